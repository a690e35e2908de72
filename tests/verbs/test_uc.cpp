// SPDX-License-Identifier: BSD-2-Clause
// UC QPs through emu0: SEND and RDMA WRITE without acknowledgements. What the responder cannot take
// is dropped; the requester, which completes once the message is sent, never learns of it.
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <tuple>

#include "verbs_fixture.h"

namespace vt {
namespace {

void fill(uint8_t* d, size_t n, uint8_t seed) { fill_pattern(d, n, seed, 5); }
bool same_pattern(const uint8_t* d, size_t n, uint8_t seed) { return has_pattern(d, n, seed, 5); }

class Uc : public VerbsTest {
 protected:
  void SetUpObjects() override {
    Pair p = make_qps(IBV_QPT_UC);
    ASSERT_TRUE(p.a && p.b);
    std::tie(a, b, cqa, cqb) = std::tie(p.a, p.b, p.cqa, p.cqb);
    ASSERT_EQ(connect_uc(a, lid, b->qp_num, 0x100, 0x200), 0);
    ASSERT_EQ(connect_uc(b, lid, a->qp_num, 0x200, 0x100), 0);
    la = make_buf(16384, kAllAccess, 0x11);
    lb = make_buf(16384, kAllAccess, 0x22);
  }
  void post_and_complete(ibv_send_wr* w) {
    ASSERT_EQ(post_one(a, w), 0);
    ibv_wc wc;
    ASSERT_TRUE(wait_wc(cqa, IBV_WC_SUCCESS, w->wr_id, &wc));
  }
  ibv_cq* cqa = nullptr;
  ibv_cq* cqb = nullptr;
  ibv_qp* a = nullptr;  // requester
  ibv_qp* b = nullptr;  // responder
  Buf la, lb;
};

TEST_F(Uc, SendWriteAndWriteWithImm) {
  // A SEND of several packets (path MTU 1024).
  fill(la.p, 5000, 1);
  ibv_sge rs = lb.sge(0, 8192);
  ASSERT_EQ(post_recv(b, 1, &rs, 1), 0);
  ibv_sge ss = la.sge(0, 5000);
  ibv_send_wr w = send_wr(10, IBV_WR_SEND, &ss, 1);
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, 1, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 5000u);
  EXPECT_EQ(wc.src_qp, a->qp_num);
  EXPECT_TRUE(same_pattern(lb.p, 5000, 1));

  // RDMA WRITE: no receive is consumed, nothing completes at the responder.
  fill(la.p + 8192, 300, 2);
  ibv_sge ws = la.sge(8192, 300);
  w = rdma_wr(11, IBV_WR_RDMA_WRITE, &ws, 1, lb.addr() + 10000, lb.rkey());
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  EXPECT_TRUE(same_pattern(lb.p + 10000, 300, 2));
  EXPECT_EQ(lb.p[10300], 0x22);
  EXPECT_TRUE(drain(cqb).empty());

  // RDMA WRITE with immediate: the data, and a receive completion with the immediate.
  ibv_sge rs2 = lb.sge(0, 16);
  ASSERT_EQ(post_recv(b, 2, &rs2, 1), 0);
  fill(la.p + 12000, 2000, 3);
  ibv_sge is = la.sge(12000, 2000);
  w = rdma_wr(12, IBV_WR_RDMA_WRITE_WITH_IMM, &is, 1, lb.addr() + 12000, lb.rkey());
  w.imm_data = htonl(0xabcd1234);
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  ASSERT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, 2, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xabcd1234u);
  EXPECT_EQ(wc.byte_len, 2000u);
  EXPECT_TRUE(same_pattern(lb.p + 12000, 2000, 3));
  EXPECT_TRUE(same_pattern(lb.p, 5000, 1)) << "the receive buffer of a WRITE_WITH_IMM was written";
}

// A SEND with no receive posted is dropped: the requester completes SUCCESS, the responder sees
// nothing; the next SEND, after a receive is posted, arrives with its own data.
TEST_F(Uc, SendWithoutReceiveIsDropped) {
  fill(la.p, 100, 7);
  fill(la.p + 1024, 60, 8);
  ibv_sge s1 = la.sge(0, 100);
  ibv_send_wr w = send_wr(1, IBV_WR_SEND, &s1, 1);
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  ibv_sge rs = lb.sge(0, 4096);
  ASSERT_EQ(post_recv(b, 5, &rs, 1), 0);
  EXPECT_TRUE(drain(cqb).empty()) << "the dropped SEND arrived late";
  ibv_sge s2 = la.sge(1024, 60);
  w = send_wr(2, IBV_WR_SEND, &s2, 1);
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, 5, &wc));
  EXPECT_EQ(wc.byte_len, 60u);
  EXPECT_TRUE(same_pattern(lb.p, 60, 8)) << "not the second SEND's data";
  EXPECT_EQ(lb.p[60], 0x22);
  EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(a), IBV_QPS_RTS);
}

// A WRITE the responder refuses (unknown R_Key, an MR without remote write) is dropped: the
// requester completes SUCCESS, nothing is written, the responder stays in RTS and raises nothing.
TEST_F(Uc, WriteWithBadRkeyIsDropped) {
  Buf ro = make_buf(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0x33);
  fill(la.p, 64, 4);
  ibv_sge ws = la.sge(0, 64);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &ws, 1, lb.addr(), lb.rkey() ^ 0x5a5a00);
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  w = rdma_wr(2, IBV_WR_RDMA_WRITE, &ws, 1, ro.addr(), ro.rkey());
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(lb.p[i], 0x22) << i;
    ASSERT_EQ(ro.p[i], 0x33) << i;
  }
  EXPECT_EQ(qp_state(b), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(a), IBV_QPS_RTS);
  EXPECT_FALSE(async_event_pending(ctx)) << "an async event for a dropped UC packet";
  // The connection still works.
  w = rdma_wr(3, IBV_WR_RDMA_WRITE, &ws, 1, lb.addr(), lb.rkey());
  ASSERT_NO_FATAL_FAILURE(post_and_complete(&w));
  EXPECT_TRUE(same_pattern(lb.p, 64, 4));
  EXPECT_TRUE(drain(cqb).empty());
}

// UC has no RDMA READ and no atomics: refused at post, nothing left behind.
TEST_F(Uc, ReadAndAtomicsRefusedAtPost) {
  ibv_sge sg = la.sge(0, 8);
  ibv_send_wr r = rdma_wr(1, IBV_WR_RDMA_READ, &sg, 1, lb.addr(), lb.rkey());
  EXPECT_EQ(post_one(a, &r), EINVAL);
  ibv_send_wr f = atomic_wr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, &sg, lb.addr(), lb.rkey(), 1, 0);
  EXPECT_EQ(post_one(a, &f), EINVAL);
  ibv_send_wr c = atomic_wr(3, IBV_WR_ATOMIC_CMP_AND_SWP, &sg, lb.addr(), lb.rkey(), 0, 1);
  EXPECT_EQ(post_one(a, &c), EINVAL);
  // A list: the WRITE before the READ is posted, the READ is bad_wr.
  ibv_send_wr ok = rdma_wr(4, IBV_WR_RDMA_WRITE, &sg, 1, lb.addr(), lb.rkey());
  ok.next = &r;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &ok, &bad), EINVAL);
  EXPECT_EQ(bad, &r);
  ASSERT_TRUE(wait_wc(cqa, IBV_WC_SUCCESS, 4));
  EXPECT_TRUE(drain(cqa).empty()) << "a refused WR completed";
  EXPECT_EQ(lb.p[0], 0x11);
  EXPECT_EQ(lb.p[8], 0x22);
}

TEST_F(Uc, CreateQpExWithReadOrAtomicsIsNotSupported) {
  expect_qp_ex_unsupported(IBV_QPT_UC, cqa, IBV_QP_EX_WITH_RDMA_WRITE,
                           {IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
                            IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD});
}

// ibv_modify_qp(3) for UC: RC's table without the reliability attributes (RNR timer, RDMA-read
// depths, timeout, retry counts), which UC refuses.
TEST_F(Uc, ModifyAttributeRules) {
  ibv_qp* q = make_qp_of(IBV_QPT_UC, cqa, cqa);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(to_init(q, IBV_ACCESS_REMOTE_WRITE), 0);
  ibv_qp_attr at = rtr_attr(lid, b->qp_num, 0x55, 12);
  at.path_mtu = IBV_MTU_2048;
  constexpr int kRtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  EXPECT_EQ(ibv_modify_qp(q, &at, kRtr | IBV_QP_MIN_RNR_TIMER), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, kRtr | IBV_QP_MAX_DEST_RD_ATOMIC), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, kRtr & ~IBV_QP_RQ_PSN), EINVAL) << "RTR without an RQ PSN";
  EXPECT_EQ(qp_state(q), IBV_QPS_INIT);
  ASSERT_EQ(ibv_modify_qp(q, &at, kRtr), 0);

  at = rts_attr(0x66, 14, 7, 7);
  EXPECT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE), EINVAL) << "RTS without an SQ PSN";
  EXPECT_EQ(qp_state(q), IBV_QPS_RTR);
  ASSERT_EQ(ibv_modify_qp(q, &at, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);

  ibv_qp_attr got;
  ibv_qp_init_attr gi;
  ASSERT_EQ(ibv_query_qp(q, &got, IBV_QP_STATE, &gi), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.path_mtu, IBV_MTU_2048);
  EXPECT_EQ(got.dest_qp_num, b->qp_num);
  EXPECT_EQ(got.rq_psn, 0x55u);
  EXPECT_EQ(got.sq_psn, 0x66u);
  EXPECT_EQ(gi.qp_type, IBV_QPT_UC);
}

}  // namespace
}  // namespace vt
