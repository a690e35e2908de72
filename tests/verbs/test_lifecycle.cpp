// SPDX-License-Identifier: BSD-2-Clause
// Completions of a QP that was reset or destroyed before they were polled: they name nothing the
// user still has, so a poll never returns them (mlx5 cleans them out of the CQ).
#include <poll.h>

#include <cstring>
#include <thread>

#include "verbs_fixture.h"

namespace vt {
namespace {

class Lifecycle : public VerbsTest {
 protected:
  // A QP on `cq` (*a), connected to one on peer_cq, that has posted n signaled 8-byte RDMA WRITEs
  // (wr_ids 0 to n - 1), none of them polled.
  void post_unpolled_writes(ibv_cq* cq, ibv_cq* peer_cq, int n, ibv_qp** a) {
    *a = make_qp(cq, cq);
    ibv_qp* b = make_qp(peer_cq, peer_cq);
    ASSERT_TRUE(*a && b);
    ASSERT_EQ(connect_qp(*a, lid, b->qp_num, 1, 2), 0);
    ASSERT_EQ(connect_qp(b, lid, (*a)->qp_num, 2, 1), 0);
    Buf src = make_buf(4096, kAllAccess, 1), dst = make_buf(4096, kAllAccess, 0);
    for (int i = 0; i < n; ++i) {
      ibv_sge sg = src.sge(0, 8);
      ibv_send_wr w = rdma_wr(i, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
      ASSERT_EQ(post_one(*a, &w), 0);
    }
  }
};

TEST_F(Lifecycle, ResetDropsCompletionsOfTheOldIncarnation) {
  Pair p = make_pair();
  ASSERT_TRUE(p.a && p.b);
  Buf src = make_buf(4096, kAllAccess, 0x5a), dst = make_buf(4096, kAllAccess, 0);
  for (int i = 0; i < 3; ++i) {
    ibv_sge sg = src.sge(0, 64);
    ibv_send_wr w = rdma_wr(100 + i, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
    ASSERT_EQ(post_one(p.a, &w), 0);
  }
  // Not polled: reset A and bring it up again towards the same peer.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(p.a, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(connect_qp(p.a, lid, p.b->qp_num, 0x100, 0x200), 0);
  ibv_sge sg = src.sge(0, 64);
  ibv_send_wr w = rdma_wr(7, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
  ASSERT_EQ(post_one(p.a, &w), 0);
  auto wcs = poll_n(p.cqa, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 7u) << "a completion from before the reset came back";
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(drain(p.cqa).empty());
}

// rsockets and librdmacm's thread both move a QP to ERR at a disconnect: each call is one whole
// transition (the kernel's per-QP mutex), both succeed, and the QP ends in ERR. Under TSan
// (ci/sanitize.sh) the two threads' calls overlapping were a reported race on the QP's state.
TEST_F(Lifecycle, TwoThreadsMovingOneQpToErrorTakeTurns) {
  Pair p = make_pair();
  ASSERT_TRUE(p.a && p.b);
  for (int round = 0; round < 50; ++round) {
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(p.a, &reset, IBV_QP_STATE), 0);
    ASSERT_EQ(connect_qp(p.a, lid, p.b->qp_num, 0x100, 0x200), 0);
    int rc[2] = {-1, -1};
    auto to_error = [&](int i) {
      ibv_qp_attr err{};
      err.qp_state = IBV_QPS_ERR;
      rc[i] = ibv_modify_qp(p.a, &err, IBV_QP_STATE);
    };
    std::thread other(to_error, 1);
    to_error(0);
    other.join();
    EXPECT_EQ(rc[0], 0);
    EXPECT_EQ(rc[1], 0);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(p.a, &attr, IBV_QP_STATE, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
    EXPECT_EQ(p.a->state, IBV_QPS_ERR);
  }
}

TEST_F(Lifecycle, DestroyedQpsCompletionsLeaveASharedCq) {
  ibv_cq* shared = make_cq(64);
  ibv_cq* other = make_cq(64);
  ASSERT_TRUE(shared && other);
  ibv_qp* a1 = make_qp(shared, shared);
  ibv_qp* a2 = make_qp(shared, shared);
  ibv_qp* b1 = make_qp(other, other);
  ibv_qp* b2 = make_qp(other, other);
  ASSERT_TRUE(a1 && a2 && b1 && b2);
  ASSERT_EQ(connect_qp(a1, lid, b1->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(b1, lid, a1->qp_num, 2, 1), 0);
  ASSERT_EQ(connect_qp(a2, lid, b2->qp_num, 3, 4), 0);
  ASSERT_EQ(connect_qp(b2, lid, a2->qp_num, 4, 3), 0);
  Buf src = make_buf(4096, kAllAccess, 1), dst = make_buf(4096, kAllAccess, 0);
  for (int i = 0; i < 4; ++i) {
    ibv_sge sg = src.sge(0, 32);
    ibv_send_wr w = rdma_wr(10 + i, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey());
    ASSERT_EQ(post_one(i % 2 ? a2 : a1, &w), 0);
  }
  ASSERT_EQ(ibv_destroy_qp(a1), 0);
  forget(a1);
  auto wcs = poll_n(shared, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (auto& wc : wcs) {
    EXPECT_EQ(wc.qp_num, a2->qp_num);
    EXPECT_TRUE(wc.wr_id == 11 || wc.wr_id == 13) << wc.wr_id;
  }
  EXPECT_TRUE(drain(shared).empty()) << "a destroyed QP's completion was returned";
}

// Closing a context releases what was made on it, as the kernel does when the device file closes:
// a peer connected to a QP of the closed context gets no answer any more.
TEST_F(Lifecycle, CloseDeviceReleasesItsObjects) {
  ibv_context* ctx2 = open_emu0();
  ASSERT_NE(ctx2, nullptr);
  ibv_pd* pd2 = ibv_alloc_pd(ctx2);
  ibv_cq* cq2 = ibv_create_cq(ctx2, 16, nullptr, nullptr, 0);
  ASSERT_TRUE(pd2 && cq2);
  ibv_qp* q2 = create_rc_qp(pd2, cq2, cq2);
  ASSERT_NE(q2, nullptr);
  static uint8_t mem[4096];
  ibv_mr* mr2 = ibv_reg_mr(pd2, mem, sizeof mem, kAllAccess);
  ASSERT_NE(mr2, nullptr);
  ibv_cq* cq = make_cq(16);
  ConnParams fast;
  fast.timeout = 8;  // about 1 ms per attempt
  fast.retry_cnt = 1;
  ibv_qp* q1 = make_qp(cq, cq);
  ASSERT_EQ(connect_qp(q1, lid, q2->qp_num, 1, 2, fast), 0);
  ASSERT_EQ(connect_qp(q2, lid, q1->qp_num, 2, 1), 0);
  Buf src = make_buf(4096, kAllAccess, 3);
  ibv_sge sg = src.sge(0, 16);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &sg, 1, reinterpret_cast<uint64_t>(mem), mr2->rkey);
  ASSERT_EQ(post_one(q1, &w), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 1)) << "the peer works before the close";
  ASSERT_EQ(ibv_close_device(ctx2), 0);  // without destroying q2, cq2, mr2, pd2
  std::memset(mem, 0, sizeof mem);
  w.wr_id = 2;
  ASSERT_EQ(post_one(q1, &w), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_RETRY_EXC_ERR, 2));
  EXPECT_EQ(mem[0], 0) << "a write landed in memory of a closed context";
}

// More completions than the CQ holds, none polled: the CQ reports IBV_EVENT_CQ_ERR on the
// context's async fd and its QPs enter ERR (with IBV_EVENT_QP_FATAL).
TEST_F(Lifecycle, CqOverrunIsACqErrorAndItsQpsGoToErr) {
  ibv_cq* tiny = make_cq(1);
  ibv_cq* big = make_cq(64);
  ASSERT_TRUE(tiny && big);
  int cap = tiny->cqe;
  ibv_qp* a = nullptr;
  // The ring holds cqe + 1 (as mlx5's): one more than that certainly overruns it.
  ASSERT_NO_FATAL_FAILURE(post_unpolled_writes(tiny, big, cap + 2, &a));
  bool cq_err = false, qp_fatal = false;
  for (int k = 0; k < 2; ++k) {
    pollfd pf{ctx->async_fd, POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 10000), 1) << "no async event";
    ibv_async_event ev;
    ASSERT_EQ(ibv_get_async_event(ctx, &ev), 0);
    if (ev.event_type == IBV_EVENT_CQ_ERR) cq_err = ev.element.cq == tiny;
    if (ev.event_type == IBV_EVENT_QP_FATAL) qp_fatal = ev.element.qp == a;
    ibv_ack_async_event(&ev);
  }
  EXPECT_TRUE(cq_err);
  EXPECT_TRUE(qp_fatal);
  EXPECT_EQ(qp_state(a), IBV_QPS_ERR);
  auto wcs = poll_n(tiny, static_cast<size_t>(cap));
  EXPECT_GE(wcs.size(), static_cast<size_t>(cap)) << "the completions that fitted are still there";
}

// A CQ made with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN (UCX asks for one when built without
// assertions, and then never stores its consumer index) is never found full: more completions than
// it holds, none polled, and its QP stays in RTS, every WQE completed, the newest CQEs in the ring.
TEST_F(Lifecycle, IgnoreOverrunCqTakesMoreThanItHolds) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 1;
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  ibv_cq_ex* tiny_ex = ibv_create_cq_ex(ctx, &attr);
  ASSERT_TRUE(tiny_ex) << strerror(errno);
  ibv_cq* tiny = ibv_cq_ex_to_cq(tiny_ex);
  cqs.push_back(tiny);  // (the fixture destroys it after its QPs)
  ibv_cq* big = make_cq(64);
  ASSERT_TRUE(big);
  const int n = 3 * (tiny->cqe + 1);
  ibv_qp* a = nullptr;
  ASSERT_NO_FATAL_FAILURE(post_unpolled_writes(tiny, big, n, &a));
  // The last WQE's CQE is in the ring (the device is done with the queue once it is there).
  uint64_t newest = 0;
  for (auto until = std::chrono::steady_clock::now() + kDeadline;
       newest != uint64_t(n - 1) && std::chrono::steady_clock::now() < until;) {
    ibv_wc wc{};
    if (ibv_poll_cq(tiny, 1, &wc) == 1) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
      newest = wc.wr_id;
    }
  }
  EXPECT_EQ(newest, uint64_t(n - 1));
  EXPECT_EQ(qp_state(a), IBV_QPS_RTS) << "an overrun-ignoring CQ put its QP in error";
  pollfd pf{ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&pf, 1, 0), 0) << "an async event (CQ error?) for an overrun-ignoring CQ";
}

}  // namespace
}  // namespace vt
