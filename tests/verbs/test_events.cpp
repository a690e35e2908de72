// SPDX-License-Identifier: BSD-2-Clause
// Async events of connected QPs: IBV_EVENT_COMM_EST when the first packet reaches a QP still in
// RTR, and that destroying after the ack does not wait. (SRQ limit and last-WQE events are in
// test_srq.cpp.)
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <tuple>

#include "verbs_fixture.h"

namespace vt {
namespace {

class Events : public VerbsTest, public ::testing::WithParamInterface<ibv_qp_type> {
 protected:
  // a in RTS, b only in RTR: b can receive but has not sent.
  void SetUpObjects() override {
    type = GetParam();
    Pair p = make_qps(type);
    ASSERT_TRUE(p.a && p.b);
    std::tie(a, b, cqa, cqb) = std::tie(p.a, p.b, p.cqa, p.cqb);
    ASSERT_NO_FATAL_FAILURE(connect_a_rts_b_rtr());
    la = make_buf(4096, kAllAccess, 0x11);
    lb = make_buf(4096, kAllAccess, 0x22);
  }

  // From RESET: a to RTS, b to RTR.
  void connect_a_rts_b_rtr() {
    if (type == IBV_QPT_UC) {
      ASSERT_EQ(connect_uc(a, lid, b->qp_num, 0x100, 0x200), 0);
    } else {
      ASSERT_EQ(connect_qp(a, lid, b->qp_num, 0x100, 0x200), 0);
    }
    ASSERT_EQ(to_init(b, kAllAccess), 0);
    ibv_qp_attr at = rtr_attr(lid, a->qp_num, 0x100, 1);
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    ASSERT_EQ(ibv_modify_qp(b, &at, mask), 0);
    ASSERT_EQ(qp_state(b), IBV_QPS_RTR);
  }

  // b from RTR to RTS, with the attributes its type takes.
  void b_to_rts() {
    ibv_qp_attr at = rts_attr(0x200, 14, 7, 7);
    int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (type == IBV_QPT_RC)
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    ASSERT_EQ(ibv_modify_qp(b, &at, mask), 0);
  }

  void send_one(uint64_t id, uint32_t len) {
    ibv_sge r = lb.sge(0, 4096);
    ASSERT_EQ(post_recv(b, id, &r, 1), 0);
    ibv_sge s = la.sge(0, len);
    ibv_send_wr w = send_wr(id, IBV_WR_SEND, &s, 1);
    ASSERT_EQ(post_one(a, &w), 0);
    ASSERT_TRUE(wait_wc(cqa, IBV_WC_SUCCESS, id));
    ibv_wc wc;
    ASSERT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, id, &wc));
    EXPECT_EQ(wc.byte_len, len);
  }

  // ibv_destroy_qp on another thread, which must return within the deadline (it waits for
  // unacknowledged events, and there must be none).
  void destroy_within_deadline(ibv_qp* qp) {
    auto done = std::make_shared<std::promise<int>>();
    std::future<int> f = done->get_future();
    std::thread([qp, done] { done->set_value(ibv_destroy_qp(qp)); }).detach();
    ASSERT_EQ(f.wait_for(kDeadline), std::future_status::ready) << "ibv_destroy_qp blocked";
    forget(qp);
    EXPECT_EQ(f.get(), 0);
  }

  ibv_qp_type type = IBV_QPT_RC;
  ibv_cq* cqa = nullptr;
  ibv_cq* cqb = nullptr;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  Buf la, lb;
};

TEST_P(Events, CommEstOnceWhenAnRtrQpReceives) {
  EXPECT_FALSE(async_event_pending(ctx)) << "an event before any traffic";
  ASSERT_NO_FATAL_FAILURE(send_one(1, 8));
  // (A small SEND and a large one: the payload travels in the CQE or is copied.)
  ASSERT_NO_FATAL_FAILURE(send_one(2, 2000));
  ibv_async_event ev;
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_COMM_EST, &ev));
  EXPECT_EQ(ev.element.qp, b);
  EXPECT_EQ(qp_state(b), IBV_QPS_RTR) << "COMM_EST does not move the QP";
  // The owner moves it to RTS as usual; no further event.
  ASSERT_NO_FATAL_FAILURE(b_to_rts());
  ASSERT_NO_FATAL_FAILURE(send_one(3, 16));
  EXPECT_FALSE(async_event_pending(ctx));
  ASSERT_NO_FATAL_FAILURE(destroy_within_deadline(b));
}

// A responder already in RTS raises no COMM_EST.
TEST_P(Events, NoCommEstInRts) {
  ASSERT_NO_FATAL_FAILURE(b_to_rts());
  ASSERT_NO_FATAL_FAILURE(send_one(1, 8));
  EXPECT_FALSE(async_event_pending(ctx));
}

// After RESET and a new connection the QP can raise COMM_EST again (once per connection).
TEST_P(Events, CommEstAgainAfterReset) {
  ASSERT_NO_FATAL_FAILURE(send_one(1, 8));
  ibv_async_event ev;
  ASSERT_TRUE(get_async_event(ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_COMM_EST);
  ibv_ack_async_event(&ev);
  ibv_qp_attr at;
  std::memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(b, &at, IBV_QP_STATE), 0);
  ASSERT_EQ(ibv_modify_qp(a, &at, IBV_QP_STATE), 0);
  ASSERT_NO_FATAL_FAILURE(connect_a_rts_b_rtr());
  ASSERT_NO_FATAL_FAILURE(send_one(2, 8));
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_COMM_EST, &ev)) << "on the second connection";
  EXPECT_EQ(ev.element.qp, b);
}

INSTANTIATE_TEST_SUITE_P(Transport, Events, ::testing::Values(IBV_QPT_RC, IBV_QPT_UC),
                         [](const auto& p) { return p.param == IBV_QPT_RC ? "RC" : "UC"; });

}  // namespace
}  // namespace vt
