// SPDX-License-Identifier: BSD-2-Clause
// ibv_resize_cq (emu/objects/cq_resize.cpp): a CQ grows and shrinks with completions unpolled and
// while another process's engine completes receives into it; no completion is lost, doubled or
// reordered, a shrink below the unpolled ones is EINVAL, and cqe reports the new size.
#include <cstring>

#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

class ResizeCq : public VerbsTest {};

TEST_F(ResizeCq, UnpolledCompletionsMoveToTheNewRing) {
  ibv_cq* cq = make_cq(4);
  ibv_cq* rcq = make_cq();
  ASSERT_TRUE(cq && rcq);
  int first = cq->cqe;
  EXPECT_GE(first, 4);
  ibv_qp* q = make_qp(cq, cq);
  ibv_qp* r = make_qp(rcq, rcq);
  ASSERT_TRUE(q && r);
  ASSERT_EQ(connect_qp(q, lid, r->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(r, lid, q->qp_num, 2, 1), 0);
  Buf src = make_buf(64, kAllAccess, 7), dst = make_buf(64);
  ibv_sge d = dst.sge(0, 8);
  ASSERT_EQ(post_recv(r, 9, &d, 1), 0);
  ibv_sge s = src.sge(0, 8);
  for (uint64_t id = 1; id <= 3; ++id) {
    ibv_send_wr w = rdma_wr(id, IBV_WR_RDMA_WRITE, &s, 1, dst.addr() + 8, dst.rkey());
    ASSERT_EQ(post_one(q, &w), 0);
  }
  ibv_send_wr send = send_wr(4, IBV_WR_SEND, &s, 1);
  ASSERT_EQ(post_one(q, &send), 0);
  // The send queue runs in order: once the SEND's receive completed, the three WRITEs' CQEs are
  // in cq (the SEND's own may be too), none polled.
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 9));
  EXPECT_EQ(ibv_resize_cq(cq, 1), EINVAL);  // 2 entries < 3 or 4 unpolled
  EXPECT_EQ(cq->cqe, first);
  ASSERT_EQ(ibv_resize_cq(cq, 3), 0);  // 4 entries hold them
  EXPECT_EQ(cq->cqe, 3);
  ASSERT_EQ(ibv_resize_cq(cq, 100), 0);
  EXPECT_GE(cq->cqe, 100);
  auto wc = poll_n(cq, 4);
  ASSERT_EQ(wc.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wc[i].wr_id, uint64_t(i) + 1);
    EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_TRUE(drain(cq).empty());
  ASSERT_EQ(ibv_resize_cq(cq, 1), 0);  // empty: any size
  EXPECT_EQ(cq->cqe, 1);
  EXPECT_EQ(ibv_resize_cq(cq, 0), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq, 1 << 30), EINVAL);
  // Still a working CQ.
  ibv_send_wr w = rdma_wr(5, IBV_WR_RDMA_WRITE, &s, 1, dst.addr() + 8, dst.rkey());
  ASSERT_EQ(post_one(q, &w), 0);
  EXPECT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 5));
}

// ---- resizing while another process's engine completes into the CQ ----

constexpr uint32_t kStreamMsgs = 2000;
constexpr int kRecvDepth = 6;  // receives posted at a time: at most 6 completions unpolled

struct StreamPeerInfo {
  uint32_t ok;
  uint16_t lid;
  uint32_t qpn;
  char err[96];
};
struct StreamParentInfo {
  uint16_t lid;
  uint32_t qpn;
};
struct StreamPeerReport {
  uint32_t ok;
  char err[96];
};

// The peer: one RC QP sending kStreamMsgs SENDs with immediate (imm = sequence number), 16 in
// flight; an RNR stall waits for the parent's next receive (rnr_retry 7: for ever).
[[noreturn]] void run_stream_peer() {
  StreamPeerInfo me{};
  PeerDevice d = peer_open_device(me, 64);
  ibv_qp* qp = create_rc_qp(d.pd, d.cq, d.cq);
  if (!qp) peer_fail(me, "create_qp");
  alignas(4096) static uint8_t buf[64];
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) peer_fail(me, "reg_mr");
  me = {1, d.lid, qp->qp_num, {}};
  peer_tell(me);
  auto parent = peer_hear<StreamParentInfo>();
  uint8_t ready = connect_qp(qp, parent.lid, parent.qpn, 0x50, 0x60) == 0;
  peer_tell(ready);
  StreamPeerReport rep{1, {}};
  ibv_sge sg{reinterpret_cast<uint64_t>(buf), 8, mr->lkey};
  uint32_t done = 0;
  for (uint32_t i = 0; i < kStreamMsgs && rep.ok; ++i) {
    while (i - done >= 16 && rep.ok) {
      auto wc = poll_n(d.cq, 1);
      if (wc.size() != 1 || wc[0].status != IBV_WC_SUCCESS)
        peer_report_failure(rep, "send %u: %zu completions, status %d", done, wc.size(),
                            wc.empty() ? -1 : wc[0].status);
      ++done;
    }
    ibv_send_wr w = send_wr(i, IBV_WR_SEND_WITH_IMM, &sg, 1);
    w.imm_data = htobe32(i);
    ibv_send_wr* bad = nullptr;
    if (rep.ok && ibv_post_send(qp, &w, &bad)) peer_report_failure(rep, "post %u: %d", i, errno);
  }
  if (rep.ok && poll_n(d.cq, kStreamMsgs - done).size() != kStreamMsgs - done)
    peer_report_failure(rep, "the last sends did not complete");
  peer_finish(rep);
}

const PeerRole kStreamPeer("resize-stream", run_stream_peer);

TEST_F(ResizeCq, GrowsAndShrinksWhileAnotherProcessCompletesIntoIt) {
  ibv_cq* cq = make_cq(8);
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  Peer peer;
  StreamPeerInfo pi{};
  ASSERT_NO_FATAL_FAILURE(peer.start("resize-stream", &pi));
  Buf rb = make_buf(kRecvDepth * 8);
  ASSERT_EQ(to_init(qp, kAllAccess), 0);
  for (int k = 0; k < kRecvDepth; ++k) {
    ibv_sge sg = rb.sge(k * 8, 8);
    ASSERT_EQ(post_recv(qp, k, &sg, 1), 0);
  }
  StreamParentInfo me{lid, qp->qp_num};
  ASSERT_TRUE(peer.send(&me, sizeof me));
  ASSERT_EQ(to_rtr(qp, pi.lid, pi.qpn, 0x50, 1), 0);
  ASSERT_EQ(to_rts(qp, 0x60, 14, 7, 7), 0);
  ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
  // Sizes never below the kRecvDepth that may be unpolled (a smaller ring could overrun).
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  ASSERT_NE(dv, nullptr);
  uint64_t races = dv->races_recorded();
  const int sizes[] = {7, 255, 15, 1023, 7, 63};
  uint32_t next = 0, resizes = 0;
  auto until = std::chrono::steady_clock::now() + 6 * kDeadline;  // against a hang only
  while (next < kStreamMsgs && std::chrono::steady_clock::now() < until) {
    ibv_wc wc;
    int n = ibv_poll_cq(cq, 1, &wc);
    ASSERT_GE(n, 0);
    if (n == 1) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "message " << next;
      ASSERT_EQ(be32toh(wc.imm_data), next) << "a completion lost, doubled or out of order";
      ++next;
      ibv_sge sg = rb.sge(wc.wr_id * 8, 8);
      ASSERT_EQ(post_recv(qp, wc.wr_id, &sg, 1), 0);
    }
    if (n == 1 && next % 5 == 0) {
      int want = sizes[resizes % 6];
      ASSERT_EQ(ibv_resize_cq(cq, want), 0);
      ASSERT_GE(cq->cqe, want);
      ++resizes;
    }
  }
  EXPECT_EQ(next, kStreamMsgs);
  EXPECT_EQ(resizes, kStreamMsgs / 5);
  EXPECT_TRUE(drain(cq).empty()) << "nothing beyond the stream";
  EXPECT_EQ(dv->races_recorded(), races) << "the device recorded a race";
  StreamPeerReport rep{};
  peer.finish(&rep, 2 * kDeadline);
}

}  // namespace
}  // namespace vt
