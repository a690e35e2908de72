// SPDX-License-Identifier: BSD-2-Clause
// Two RC QPs of this process connected to each other through emu0: every opcode, the ways of
// posting and polling, and the error completions.
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class Loopback : public VerbsTest {
 protected:
  void SetUpObjects() override {
    p = make_pair();
    ASSERT_TRUE(p.a && p.b);
    la = make_buf(16384, kAllAccess, 0x11);
    lb = make_buf(16384, kAllAccess, 0x22);
  }
  // An extended CQ reporting wc_flags (nullptr with a gtest failure if refused).
  ibv_cq_ex* make_cq_ex(uint64_t wc_flags) {
    ibv_cq_init_attr_ex ca;
    std::memset(&ca, 0, sizeof ca);
    ca.cqe = 16;
    ca.wc_flags = wc_flags;
    ibv_cq_ex* cqx = ibv_create_cq_ex(ctx, &ca);
    EXPECT_NE(cqx, nullptr) << "ibv_create_cq_ex: errno " << errno;
    if (cqx) cqs.push_back(ibv_cq_ex_to_cq(cqx));
    return cqx;
  }
  // A connected pair whose receiving side (*qb) completes its receives into rcq.
  ::testing::AssertionResult connected_into(ibv_cq* rcq, ibv_qp** qa, ibv_qp** qb,
                                            const QpCaps& b_caps = {},
                                            ibv_qp_cap* b_got = nullptr) {
    *qb = make_qp(p.cqb, rcq, b_caps, b_got);
    *qa = make_qp(p.cqa, p.cqa);
    if (!*qa || !*qb) return ::testing::AssertionFailure() << "QP creation refused";
    if (connect_qp(*qa, lid, (*qb)->qp_num, 1, 2) || connect_qp(*qb, lid, (*qa)->qp_num, 2, 1))
      return ::testing::AssertionFailure() << "connect failed";
    return ::testing::AssertionSuccess();
  }
  // ibv_start_poll until it finds a completion or the deadline passes; its return value.
  static int start_poll_waiting(ibv_cq_ex* cqx) {
    ibv_poll_cq_attr pa = {};
    int rc = ENOENT;
    auto end = std::chrono::steady_clock::now() + kDeadline;
    while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && std::chrono::steady_clock::now() < end) {
    }
    return rc;
  }
  // A's WR w into the receive `r` (wr_id recv_id) posted on B: both complete with SUCCESS (B's
  // completion in *wc).
  void a_to_b(ibv_send_wr w, ibv_sge r, uint64_t recv_id, ibv_wc* wc) {
    ASSERT_EQ(post_recv(p.b, recv_id, &r, 1), 0);
    ASSERT_EQ(post_one(p.a, &w), 0);
    ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, w.wr_id));
    ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, recv_id, wc));
  }
  // Asserts that nothing (more) is on either CQ.
  void expect_quiet() {
    EXPECT_TRUE(drain(p.cqa).empty()) << "unexpected completion on A";
    EXPECT_TRUE(drain(p.cqb).empty()) << "unexpected completion on B";
  }
  Pair p;
  Buf la, lb;  // registered on A's and B's side (same PD)
};

void fill_pattern(uint8_t* d, size_t n, uint8_t seed) { vt::fill_pattern(d, n, seed, 7); }

TEST_F(Loopback, SendThreeSgesIntoTwoRecvSges) {
  fill_pattern(la.p, 600, 3);
  ibv_sge r[2] = {lb.sge(1000, 250), lb.sge(4000, 400)};
  ASSERT_EQ(post_recv(p.b, 42, r, 2), 0);
  // Gather 100 + 200 + 300 bytes from three places, out of order in memory.
  uint8_t expect[600];
  std::memcpy(expect, la.p + 500, 100);
  std::memcpy(expect + 100, la.p, 200);
  std::memcpy(expect + 300, la.p + 200, 300);
  std::memcpy(la.p + 8000, la.p + 500, 100);  // the 100 bytes live at 8000 for the gather
  ibv_sge s[3] = {la.sge(8000, 100), la.sge(0, 200), la.sge(200, 300)};
  ibv_send_wr w = send_wr(7, IBV_WR_SEND, s, 3);
  ASSERT_EQ(post_one(p.a, &w), 0);
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 7, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, 42, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 600u);
  EXPECT_EQ(wc.qp_num, p.b->qp_num);
  EXPECT_EQ(wc.src_qp, p.a->qp_num);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(std::memcmp(lb.p + 1000, expect, 250), 0);
  EXPECT_EQ(std::memcmp(lb.p + 4000, expect + 250, 350), 0);
  EXPECT_EQ(lb.p[4350], 0x22) << "wrote past the message";
  EXPECT_EQ(lb.p[999], 0x22);
  expect_quiet();
}

TEST_F(Loopback, SendWithImm) {
  ibv_sge s = la.sge(0, 32);
  ibv_send_wr w = send_wr(2, IBV_WR_SEND_WITH_IMM, &s, 1);
  w.imm_data = htobe32(0xdeadbeef);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(a_to_b(w, lb.sge(0, 64), 1, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(wc.imm_data), 0xdeadbeefu);
  EXPECT_EQ(wc.byte_len, 32u);
  EXPECT_EQ(std::memcmp(lb.p, la.p, 32), 0);
}

TEST_F(Loopback, RdmaWrite) {
  fill_pattern(la.p, 5000, 9);
  ibv_sge s = la.sge(0, 5000);
  ibv_send_wr w = rdma_wr(3, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + 100, lb.rkey());
  ASSERT_EQ(post_one(p.a, &w), 0);
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 3, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(lb.p + 100, la.p, 5000), 0);
  EXPECT_EQ(lb.p[99], 0x22);
  EXPECT_EQ(lb.p[5100], 0x22);
  expect_quiet();  // a plain write consumes no receive
}

TEST_F(Loopback, RdmaWriteWithImm) {
  fill_pattern(la.p, 300, 1);
  ibv_sge s = la.sge(0, 300);
  ibv_send_wr w = rdma_wr(12, IBV_WR_RDMA_WRITE_WITH_IMM, &s, 1, lb.addr() + 2048, lb.rkey());
  w.imm_data = htobe32(0x1234);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(a_to_b(w, lb.sge(0, 0), 11, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.byte_len, 300u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(wc.imm_data), 0x1234u);
  EXPECT_EQ(std::memcmp(lb.p + 2048, la.p, 300), 0);
}

TEST_F(Loopback, RdmaRead) {
  fill_pattern(lb.p, 3000, 5);
  ibv_sge s = la.sge(10, 3000);
  ibv_send_wr w = rdma_wr(4, IBV_WR_RDMA_READ, &s, 1, lb.addr(), lb.rkey());
  ASSERT_EQ(post_one(p.a, &w), 0);
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 4, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_EQ(std::memcmp(la.p + 10, lb.p, 3000), 0);
  EXPECT_EQ(la.p[9], 0x11);
  EXPECT_EQ(la.p[3010], 0x11);
}

TEST_F(Loopback, CompareAndSwap) {
  auto* target = reinterpret_cast<uint64_t*>(lb.p + 64);
  auto* result = reinterpret_cast<uint64_t*>(la.p + 128);
  *target = 1000;
  ibv_sge s = la.sge(128, 8);
  ibv_send_wr w =
      atomic_wr(5, IBV_WR_ATOMIC_CMP_AND_SWP, &s, lb.addr() + 64, lb.rkey(), 1000, 2000);
  ASSERT_EQ(post_one(p.a, &w), 0);
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 5, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(*result, 1000u) << "old value";
  EXPECT_EQ(*target, 2000u) << "matched: swapped";
  // Not matching: the old value comes back and memory stays.
  w = atomic_wr(6, IBV_WR_ATOMIC_CMP_AND_SWP, &s, lb.addr() + 64, lb.rkey(), 1000, 3000);
  *result = 0;
  ASSERT_EQ(post_one(p.a, &w), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 6));
  EXPECT_EQ(*result, 2000u);
  EXPECT_EQ(*target, 2000u) << "not matched: unchanged";
}

TEST_F(Loopback, FetchAndAdd) {
  auto* target = reinterpret_cast<uint64_t*>(lb.p + 8);
  auto* result = reinterpret_cast<uint64_t*>(la.p);
  *target = 0xffffffffull;
  ibv_sge s = la.sge(0, 8);
  ibv_send_wr w = atomic_wr(8, IBV_WR_ATOMIC_FETCH_AND_ADD, &s, lb.addr() + 8, lb.rkey(), 5, 0);
  ASSERT_EQ(post_one(p.a, &w), 0);
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 8, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(*result, 0xffffffffull);
  EXPECT_EQ(*target, 0x100000004ull);
  EXPECT_EQ(lb.p[0], 0x22);
  EXPECT_EQ(lb.p[16], 0x22);
}

TEST_F(Loopback, InlineSend) {
  Pair q = make_pair({.max_inline_data = 128});
  ASSERT_TRUE(q.a && q.b);
  ibv_sge r = lb.sge(0, 256);
  ASSERT_EQ(post_recv(q.b, 1, &r, 1), 0);
  char msg[100];
  for (int i = 0; i < 100; ++i) msg[i] = static_cast<char>('A' + i % 26);
  ibv_sge s = {reinterpret_cast<uint64_t>(msg), 100, 0};  // unregistered memory, no lkey
  ibv_send_wr w = send_wr(9, IBV_WR_SEND, &s, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_one(q.a, &w), 0);
  std::memset(msg, 0, sizeof msg);  // inline data was copied at post time
  ASSERT_TRUE(wait_wc(q.cqa, IBV_WC_SUCCESS, 9));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(q.cqb, IBV_WC_SUCCESS, 1, &wc));
  EXPECT_EQ(wc.byte_len, 100u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(lb.p[i], 'A' + i % 26) << i;
}

TEST_F(Loopback, UnsignaledThenSignaled) {
  ibv_sge s = la.sge(0, 16);
  ibv_send_wr w[3];
  for (int i = 0; i < 3; ++i)
    w[i] = rdma_wr(100 + i, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + 16 * i, lb.rkey(),
                   i == 2 ? IBV_SEND_SIGNALED : 0);
  ASSERT_EQ(post_one(p.a, &w[0]), 0);
  ASSERT_EQ(post_one(p.a, &w[1]), 0);
  EXPECT_TRUE(drain(p.cqa).empty()) << "an unsignaled WR produced a completion";
  ASSERT_EQ(post_one(p.a, &w[2]), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 102));
  expect_quiet();
  EXPECT_EQ(std::memcmp(lb.p, la.p, 16), 0);
  EXPECT_EQ(std::memcmp(lb.p + 16, la.p, 16), 0);
}

TEST_F(Loopback, SqSigAll) {
  Pair q = make_pair({.sq_sig_all = 1});
  ASSERT_TRUE(q.a && q.b);
  ibv_sge s = la.sge(0, 16);
  ibv_send_wr w[3];
  for (int i = 0; i < 3; ++i)
    w[i] = rdma_wr(200 + i, IBV_WR_RDMA_WRITE, &s, 1, lb.addr(), lb.rkey(), 0);
  w[0].next = &w[1];
  w[1].next = &w[2];
  ASSERT_EQ(post_one(q.a, &w[0]), 0);
  auto wcs = poll_n(q.cqa, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 200u + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
  }
}

// The ibv_wr_* API on a QP made with ibv_create_qp_ex.
TEST_F(Loopback, WrApi) {
  ibv_qp* qa = make_qp_ex(IBV_QPT_RC, p.cqa, {16, 16, 2, 2, 64},
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND);
  ASSERT_NE(qa, nullptr) << "errno " << errno;
  ibv_qp* qb = make_qp(p.cqb, p.cqb);
  ASSERT_NE(qb, nullptr);
  ASSERT_EQ(connect_qp(qa, lid, qb->qp_num, 5, 6), 0);
  ASSERT_EQ(connect_qp(qb, lid, qa->qp_num, 6, 5), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qa);
  ASSERT_NE(x, nullptr);

  fill_pattern(la.p, 512, 77);
  ibv_wr_start(x);
  wr_add_write(x, 31, lb.rkey(), lb.addr() + 512, la.sge(0, 512));
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 31));
  EXPECT_EQ(std::memcmp(lb.p + 512, la.p, 512), 0);

  ibv_sge r = lb.sge(4096, 64);
  ASSERT_EQ(post_recv(qb, 32, &r, 1), 0);
  char msg[] = "inline through the wr api";
  ibv_wr_start(x);
  wr_next(x, 33, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, msg, sizeof msg);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 33));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, 32, &wc));
  EXPECT_EQ(wc.byte_len, sizeof msg);
  EXPECT_STREQ(reinterpret_cast<char*>(lb.p + 4096), msg);

  // wr_abort: nothing of the session is posted. A later post is the only thing that completes.
  ibv_wr_start(x);
  wr_add_write(x, 34, lb.rkey(), lb.addr() + 8192, la.sge(0, 64));
  ibv_wr_abort(x);
  ibv_wr_start(x);
  wr_add_write(x, 35, lb.rkey(), lb.addr() + 12288, la.sge(0, 8));
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 35));
  EXPECT_TRUE(drain(p.cqa).empty());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(lb.p[8192 + i], 0x22) << "the aborted write ran";
}

TEST_F(Loopback, CqExPolling) {
  ibv_cq_ex* cqx = make_cq_ex(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM);
  ASSERT_NE(cqx, nullptr);
  ibv_qp *qa, *qb;
  ASSERT_TRUE(connected_into(ibv_cq_ex_to_cq(cqx), &qa, &qb));
  ibv_sge r = lb.sge(0, 128);
  ASSERT_EQ(post_recv(qb, 51, &r, 1), 0);
  ibv_sge s = la.sge(0, 77);
  ibv_send_wr w = send_wr(52, IBV_WR_SEND_WITH_IMM, &s, 1);
  w.imm_data = htobe32(0xabcdef01);
  ASSERT_EQ(post_one(qa, &w), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 52));

  ASSERT_EQ(start_poll_waiting(cqx), 0) << "no completion on the extended CQ";
  EXPECT_EQ(cqx->wr_id, 51u);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_RECV);
  EXPECT_EQ(ibv_wc_read_byte_len(cqx), 77u);
  EXPECT_EQ(be32toh(ibv_wc_read_imm_data(cqx)), 0xabcdef01u);
  EXPECT_EQ(ibv_wc_read_qp_num(cqx), qb->qp_num);
  EXPECT_TRUE(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM);
  EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
  ibv_end_poll(cqx);
  ibv_poll_cq_attr pa = {};
  EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT) << "the completion was consumed";
}

TEST_F(Loopback, CompletionChannel) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  channels.push_back(ch);
  int cookie = 0;
  ibv_cq* ecq = ibv_create_cq(ctx, 16, &cookie, ch, 0);
  ASSERT_NE(ecq, nullptr);
  cqs.push_back(ecq);
  ibv_qp* qa = make_qp(ecq, ecq);
  ibv_qp* qb = make_qp(p.cqb, p.cqb);
  ASSERT_TRUE(qa && qb);
  ASSERT_EQ(connect_qp(qa, lid, qb->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(qb, lid, qa->qp_num, 2, 1), 0);
  ASSERT_EQ(ibv_req_notify_cq(ecq, 0), 0);
  ibv_sge s = la.sge(0, 8);
  ibv_send_wr w = rdma_wr(61, IBV_WR_RDMA_WRITE, &s, 1, lb.addr(), lb.rkey());
  ASSERT_EQ(post_one(qa, &w), 0);
  pollfd pf = {ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pf, 1, static_cast<int>(kDeadline.count() * 1000)), 1) << "no completion event";
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
  EXPECT_EQ(ev_cq, ecq);
  EXPECT_EQ(ev_ctx, &cookie);
  ibv_ack_cq_events(ev_cq, 1);
  ASSERT_TRUE(wait_wc(ecq, IBV_WC_SUCCESS, 61));
  // Not re-armed: a further completion raises no event.
  w.wr_id = 62;
  ASSERT_EQ(post_one(qa, &w), 0);
  ASSERT_TRUE(wait_wc(ecq, IBV_WC_SUCCESS, 62));
  EXPECT_EQ(poll(&pf, 1, 0), 0) << "an event without req_notify";
}

// ---- error completions ----

TEST_F(Loopback, RecvBufferTooSmall) {
  EXPECT_TRUE(send_through(p.a, p.cqa, la.sge(0, 100), p.b, p.cqb, lb.sge(0, 10), 71,
                           IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(lb.p[10], 0x22) << "wrote past the receive buffer";
  EXPECT_EQ(qp_state(p.a), IBV_QPS_ERR);
  EXPECT_EQ(qp_state(p.b), IBV_QPS_ERR);
}

TEST_F(Loopback, BadLkey) {
  ibv_sge r = lb.sge(0, 64);
  ASSERT_EQ(post_recv(p.b, 73, &r, 1), 0);
  ibv_sge s = la.sge(0, 64);
  s.lkey ^= 0x5a5a00;
  ibv_send_wr w = send_wr(74, IBV_WR_SEND, &s, 1);
  ASSERT_EQ(post_one(p.a, &w), 0);
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_LOC_PROT_ERR, 74));
  EXPECT_TRUE(drain(p.cqb).empty()) << "the local error reached the responder";
  EXPECT_EQ(lb.p[0], 0x22);
}

class RemoteAccess : public Loopback {
 protected:
  // Posts one signaled 64-byte write to (raddr, rkey) and expects REM_ACCESS_ERR with the bytes
  // [check, check + check_len) of the target unchanged.
  void write_expect_rem_access(uint64_t raddr, uint32_t rkey, const uint8_t* check,
                               size_t check_len) {
    std::vector<uint8_t> before(check, check + check_len);
    fill_pattern(la.p, 64, 99);
    ibv_sge s = la.sge(0, 64);
    ibv_send_wr w = rdma_wr(81, IBV_WR_RDMA_WRITE, &s, 1, raddr, rkey);
    ASSERT_EQ(post_one(p.a, &w), 0);
    EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_REM_ACCESS_ERR, 81));
    EXPECT_EQ(std::memcmp(before.data(), check, check_len), 0) << "target memory changed";
    EXPECT_EQ(qp_state(p.a), IBV_QPS_ERR);
  }
};

TEST_F(RemoteAccess, BadRkey) {
  write_expect_rem_access(lb.addr(), lb.rkey() ^ 0x777700, lb.p, 128);
}

TEST_F(RemoteAccess, OutOfBounds) {
  // Registered 1000 bytes of a page: a write over the end is refused, in the MR and beyond it.
  Buf t = make_buf(1000, kAllAccess, 0x33);
  write_expect_rem_access(t.addr() + 1000 - 32, t.rkey(), t.p, 4096);
}

TEST_F(RemoteAccess, MrWithoutRemoteWrite) {
  Buf t = make_buf(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0x44);
  write_expect_rem_access(t.addr(), t.rkey(), t.p, 4096);
}

TEST_F(Loopback, MisalignedAtomic) {
  auto* target = reinterpret_cast<uint64_t*>(lb.p + 16);
  target[0] = 5;
  target[1] = 6;
  ibv_sge s = la.sge(0, 8);
  ibv_send_wr w = atomic_wr(91, IBV_WR_ATOMIC_FETCH_AND_ADD, &s, lb.addr() + 20, lb.rkey(), 1, 0);
  ASSERT_EQ(post_one(p.a, &w), 0);
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_REM_INV_REQ_ERR, 91));
  EXPECT_EQ(target[0], 5u);
  EXPECT_EQ(target[1], 6u);
}

// After an error completion, the WRs behind it and the posted receives are flushed.
TEST_F(Loopback, ErrorFlushesFollowingWrs) {
  ibv_sge r[2] = {la.sge(8192, 64), la.sge(8256, 64)};
  ASSERT_EQ(post_recv(p.a, 301, &r[0], 1), 0);
  ASSERT_EQ(post_recv(p.a, 302, &r[1], 1), 0);
  ibv_sge s = la.sge(0, 64);
  ibv_send_wr w[3];
  w[0] = rdma_wr(311, IBV_WR_RDMA_WRITE, &s, 1, lb.addr(), lb.rkey() ^ 0x777700);
  w[1] = rdma_wr(312, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + 1024, lb.rkey());
  w[2] = rdma_wr(313, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + 2048, lb.rkey(), 0);  // unsignaled
  w[0].next = &w[1];
  w[1].next = &w[2];
  ASSERT_EQ(post_one(p.a, &w[0]), 0);
  ibv_send_wr w4 = rdma_wr(314, IBV_WR_RDMA_WRITE, &s, 1, lb.addr() + 3072, lb.rkey());
  ASSERT_EQ(post_one(p.a, &w4), 0) << "posting in ERR is allowed (and flushes)";
  auto wcs = poll_n(p.cqa, 6);
  ASSERT_EQ(wcs.size(), 6u);
  std::vector<uint64_t> send_ids, recv_ids;
  for (auto& wc : wcs) {
    if (wc.wr_id == 311) {
      EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
      send_ids.push_back(wc.wr_id);
      continue;
    }
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR) << "wr_id " << wc.wr_id;
    (wc.wr_id > 310 ? send_ids : recv_ids).push_back(wc.wr_id);
  }
  // Flushed WRs complete even when unsignaled; each queue in order.
  EXPECT_EQ(send_ids, (std::vector<uint64_t>{311, 312, 313, 314}));
  EXPECT_EQ(recv_ids, (std::vector<uint64_t>{301, 302}));
  EXPECT_TRUE(drain(p.cqa).empty());
  for (int off : {1024, 2048, 3072}) EXPECT_EQ(lb.p[off], 0x22) << "a flushed write ran at " << off;
}

TEST_F(Loopback, ModifyToErrFlushesReceives) {
  ibv_sge r = lb.sge(0, 64);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(post_recv(p.b, 400 + i, &r, 1), 0);
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(p.b, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(p.b), IBV_QPS_ERR);
  auto wcs = poll_n(p.cqb, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 400 + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  // A receive posted in ERR completes at once with a flush.
  ASSERT_EQ(post_recv(p.b, 410, &r, 1), 0);
  EXPECT_TRUE(wait_wc(p.cqb, IBV_WC_WR_FLUSH_ERR, 410));
  EXPECT_TRUE(drain(p.cqb).empty());
}

TEST_F(Loopback, RnrRetryZeroFails) {
  ConnParams pa;
  pa.rnr_retry = 0;
  Pair q = make_pair({}, pa);
  ASSERT_TRUE(q.a && q.b);
  ibv_sge s = la.sge(0, 16);
  ibv_send_wr w = send_wr(501, IBV_WR_SEND, &s, 1);
  ASSERT_EQ(post_one(q.a, &w), 0);
  EXPECT_TRUE(wait_wc(q.cqa, IBV_WC_RNR_RETRY_EXC_ERR, 501));  // polling drives the retries
  EXPECT_EQ(qp_state(q.a), IBV_QPS_ERR);
  EXPECT_TRUE(drain(q.cqb).empty());
}

TEST_F(Loopback, RnrRetryInfiniteWaitsForReceive) {
  fill_pattern(la.p, 48, 50);
  ibv_sge s = la.sge(0, 48);
  ibv_send_wr w = send_wr(601, IBV_WR_SEND, &s, 1);
  ASSERT_EQ(post_one(p.a, &w), 0);
  EXPECT_TRUE(drain(p.cqa, 1000).empty()) << "completed without a receive";
  ibv_sge r = lb.sge(0, 64);
  ASSERT_EQ(post_recv(p.b, 602, &r, 1), 0);
  EXPECT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 601));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(p.cqb, IBV_WC_SUCCESS, 602, &wc));
  EXPECT_EQ(wc.byte_len, 48u);
  EXPECT_EQ(std::memcmp(lb.p, la.p, 48), 0);
}

// A CQ made to report completion timestamps gets them (the device stamps only such CQs' CQEs).
TEST_F(Loopback, CqExCompletionTimestamps) {
  ibv_cq_ex* cqx = make_cq_ex(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP);
  ASSERT_NE(cqx, nullptr);
  ibv_qp *qa, *qb;
  ASSERT_TRUE(connected_into(ibv_cq_ex_to_cq(cqx), &qa, &qb));
  uint64_t stamps[2] = {};
  for (int i = 0; i < 2; ++i) {
    ibv_sge r = lb.sge(0, 128);
    ASSERT_EQ(post_recv(qb, 60 + i, &r, 1), 0);
    ibv_sge s = la.sge(0, 8);
    ibv_send_wr w = send_wr(70 + i, IBV_WR_SEND, &s, 1);
    ASSERT_EQ(post_one(qa, &w), 0);
    ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 70 + i));
    ASSERT_EQ(start_poll_waiting(cqx), 0) << "no completion on the extended CQ";
    EXPECT_EQ(cqx->wr_id, 60u + i);
    stamps[i] = ibv_wc_read_completion_ts(cqx);
    ibv_end_poll(cqx);
  }
  EXPECT_NE(stamps[0], 0u) << "no timestamp on a CQ made to report one";
  EXPECT_GT(stamps[1], stamps[0]) << "the clock did not advance between two completions";
}

// A receive queue kept full (re-posting after each completion, as the latency tools do) over many
// laps of its ring: every message lands in the receive posted for it, and the queue takes no more
// than the max_recv_wr it reported (the ring's spare lines are the device's, not the user's).
TEST_F(Loopback, FullReceiveQueueOverManyLaps) {
  QpCaps caps;
  caps.max_recv_wr = 4;
  caps.max_recv_sge = 1;
  ibv_qp_cap got{};
  ibv_cq* rcq = make_cq(64);
  ibv_qp *qa, *qb;
  ASSERT_TRUE(connected_into(rcq, &qa, &qb, caps, &got));
  ASSERT_EQ(got.max_recv_wr, 4u);
  uint64_t next_recv = 0;
  auto post_next = [&]() {
    ibv_sge r = lb.sge((next_recv % 8) * 64, 64);
    return post_recv(qb, 1000 + next_recv++, &r, 1);
  };
  for (int i = 0; i < 4; ++i) ASSERT_EQ(post_next(), 0);
  ibv_sge extra = lb.sge(1024, 64);
  EXPECT_EQ(post_recv(qb, 9, &extra, 1), ENOMEM) << "a fifth receive beyond max_recv_wr 4";
  for (uint32_t m = 0; m < 200; ++m) {
    uint64_t word = 0x5151000000000000ull | m;
    std::memcpy(la.p, &word, 8);
    ibv_sge s = la.sge(0, 8);
    ibv_send_wr w = send_wr(m, IBV_WR_SEND, &s, 1);
    ASSERT_EQ(post_one(qa, &w), 0);
    ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, m));
    ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 1000 + m)) << "message " << m;
    uint64_t landed;
    std::memcpy(&landed, lb.p + (m % 8) * 64, 8);
    ASSERT_EQ(landed, word) << "message " << m << " landed elsewhere";
    ASSERT_EQ(post_next(), 0);
  }
  expect_quiet();
}

}  // namespace
}  // namespace vt
