// SPDX-License-Identifier: BSD-2-Clause
// Tag matching SRQs through emu0 (ibv_create_srq_ex IBV_SRQT_TM, ibv_post_srq_ops, the extended
// CQ's tm_info): a sender in another process sends tagged messages (ibv_tmh, ibv_rvh of
// infiniband/tm_types.h) to a QP of this process on a TM SRQ; eager messages matched and
// unexpected, rendezvous (the device reads the sender's buffer and sends it a FIN), NO_TAG, DEL
// while posted and after consumption, phase synchronisation, and the errors of the list.
#include <infiniband/tm_types.h>

#include <cerrno>
#include <cstring>

#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint32_t kBuf = 8192;  // the sender's buffer: header at 0, rendezvous data at 4096
constexpr uint32_t kRndvOff = 4096;
constexpr uint32_t kTagBuf = 4096;  // a tagged buffer

struct TmPeerInfo {
  uint32_t ok;
  uint16_t lid;
  uint32_t qpn;
  char err[96];
};
struct TmParentInfo {
  uint16_t lid;
  uint32_t qpn;
};
// One message for the peer to send: a header of `tmh_op` and `tag`, then len payload bytes of
// pattern `seed` (for RNDV: a rendezvous header naming len bytes of its buffer, filled so).
struct TmCmd {
  uint8_t tmh_op;  // ibv_tmh_op; 0xff: finish
  uint8_t seed;
  uint8_t fin;  // a rendezvous the receiver matches: a FIN comes back
  uint32_t len;
  uint64_t tag;
};
struct TmResult {
  uint32_t ok;
  int32_t send_status;
  uint8_t fin_op;  // a rendezvous: the FIN's header opcode, tag
  uint64_t fin_tag;
  char err[96];
};

uint32_t header_len(uint8_t op) {
  return sizeof(ibv_tmh) + (op == IBV_TMH_RNDV ? sizeof(ibv_rvh) : 0);
}

[[noreturn]] void run_tm_sender_peer() {
  TmPeerInfo me{};
  PeerDevice d = peer_open_device(me, 64);
  ibv_qp* qp = create_rc_qp(d.pd, d.cq, d.cq);
  alignas(4096) static uint8_t buf[kBuf];
  alignas(64) static uint8_t fin[64];
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, kAllAccess);
  ibv_mr* fmr = ibv_reg_mr(d.pd, fin, sizeof fin, IBV_ACCESS_LOCAL_WRITE);
  if (!qp || !mr || !fmr) peer_fail(me, "qp/mr");
  me.ok = 1;
  me.lid = d.lid;
  me.qpn = qp->qp_num;
  peer_tell(me);
  auto parent = peer_hear<TmParentInfo>();
  uint8_t ready = connect_qp(qp, parent.lid, parent.qpn, 0x30, 0x40) == 0;
  peer_tell(ready);
  for (uint64_t n = 0;; ++n) {
    auto cmd = peer_hear<TmCmd>();
    if (cmd.tmh_op == 0xff) break;
    TmResult res{1, 0, 0, 0, {}};
    std::memset(buf, 0, sizeof buf);
    auto* tmh = reinterpret_cast<ibv_tmh*>(buf);
    tmh->opcode = cmd.tmh_op;
    tmh->app_ctx = htobe32(0xc0de0000u | static_cast<uint32_t>(n));
    tmh->tag = htobe64(cmd.tag);
    uint32_t hlen = header_len(cmd.tmh_op), send_len = hlen + cmd.len;
    if (cmd.tmh_op == IBV_TMH_RNDV) {
      auto* rvh = reinterpret_cast<ibv_rvh*>(buf + sizeof(ibv_tmh));
      rvh->va = htobe64(reinterpret_cast<uint64_t>(buf + kRndvOff));
      rvh->rkey = htobe32(mr->rkey);
      rvh->len = htobe32(cmd.len);
      fill_pattern(buf + kRndvOff, cmd.len, cmd.seed, 3);
      send_len = hlen;
    } else {
      fill_pattern(buf + hlen, cmd.len, cmd.seed, 3);
    }
    ibv_sge fs{reinterpret_cast<uint64_t>(fin), sizeof fin, fmr->lkey};
    if (cmd.fin && post_recv(qp, 100 + n, &fs, 1)) peer_fail(res, "post_recv for the FIN");
    ibv_sge sg{reinterpret_cast<uint64_t>(buf), send_len, mr->lkey};
    ibv_send_wr w = send_wr(n, IBV_WR_SEND, &sg, 1);
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &w, &bad)) peer_fail(res, "post_send");
    auto wcs = poll_n(d.cq, 1);
    if (wcs.size() != 1 || wcs[0].opcode != IBV_WC_SEND) peer_fail(res, "no send completion");
    res.send_status = wcs[0].status;
    if (cmd.fin && wcs[0].status == IBV_WC_SUCCESS) {
      // The receiver's device answers with a FIN once it has read the data.
      auto f = poll_n(d.cq, 1);
      if (f.size() != 1 || f[0].opcode != IBV_WC_RECV || f[0].status != IBV_WC_SUCCESS ||
          f[0].byte_len != sizeof(ibv_tmh))
        peer_fail(res, "no FIN");
      auto* h = reinterpret_cast<ibv_tmh*>(fin);
      res.fin_op = h->opcode;
      res.fin_tag = be64toh(h->tag);
    }
    peer_tell(res);
  }
  TmResult done{1, 0, 0, 0, {}};
  peer_finish(done);
}

const PeerRole kTmSender("tm-sender", run_tm_sender_peer);

// What the receiver read from one completion of its extended CQ.
struct TmWc {
  ibv_wc_status status;
  ibv_wc_opcode opcode;
  uint64_t wr_id;
  unsigned flags;
  uint32_t byte_len;
  ibv_wc_tm_info tm;
};

class TagMatching : public VerbsTest {
 protected:
  void SetUpObjects() override {
    ibv_device_attr_ex da;
    ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &da), 0);
    caps = da.tm_caps;
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 256;
    ca.wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_TM_INFO;
    cqx = ibv_create_cq_ex(ctx, &ca);
    ASSERT_NE(cqx, nullptr) << errno;
    cqs.push_back(ibv_cq_ex_to_cq(cqx));
    rbuf = make_buf(kBuf * 8);
  }
  ibv_srq* make_tm_srq(uint32_t tags, uint32_t ops = 16) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = 64;
    a.attr.max_sge = 1;
    a.comp_mask =
        IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    a.srq_type = IBV_SRQT_TM;
    a.pd = pd;
    a.cq = ibv_cq_ex_to_cq(cqx);
    a.tm_cap.max_num_tags = tags;
    a.tm_cap.max_ops = ops;
    ibv_srq* s = ibv_create_srq_ex(ctx, &a);
    if (s) srqs.push_back(s);
    return s;
  }
  // The next completion of the extended CQ (by the deadline).
  ::testing::AssertionResult next_wc(TmWc* out) {
    ibv_poll_cq_attr pa{};
    auto until = std::chrono::steady_clock::now() + kDeadline;
    int rc;
    while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && std::chrono::steady_clock::now() < until) {
    }
    if (rc) return ::testing::AssertionFailure() << "no completion (" << rc << ")";
    out->status = cqx->status;
    out->wr_id = cqx->wr_id;
    out->opcode = ibv_wc_read_opcode(cqx);
    out->flags = ibv_wc_read_wc_flags(cqx);
    out->byte_len = ibv_wc_read_byte_len(cqx);
    ibv_wc_read_tm_info(cqx, &out->tm);
    ibv_end_poll(cqx);
    return ::testing::AssertionSuccess();
  }
  // An operation on the tag list; its completion is checked when `expect_wc`.
  int op(ibv_srq* s, ibv_ops_wr* w) {
    ibv_ops_wr* bad = nullptr;
    int rc = ibv_post_srq_ops(s, w, &bad);
    if (rc) {
      EXPECT_EQ(bad, w);
    }
    return rc;
  }
  // ADD of `tag` (mask 0xffff) into tag buffer `slot` of rbuf; returns the handle.
  uint32_t add(ibv_srq* s, uint64_t tag, uint64_t wr_id, int slot,
               unsigned flags = IBV_OPS_SIGNALED, uint32_t unexpected = 0,
               ibv_wc_status want = IBV_WC_SUCCESS, unsigned want_flags = 0) {
    ibv_sge sg = rbuf.sge(size_t(slot) * kBuf, kTagBuf);
    ibv_ops_wr w{};
    w.wr_id = 1000 + wr_id;
    w.opcode = IBV_WR_TAG_ADD;
    w.flags = static_cast<int>(flags);
    w.tm.unexpected_cnt = unexpected;
    w.tm.add.recv_wr_id = wr_id;
    w.tm.add.sg_list = &sg;
    w.tm.add.num_sge = 1;
    w.tm.add.tag = tag;
    w.tm.add.mask = 0xffff;
    EXPECT_EQ(op(s, &w), 0);
    TmWc wc{};
    EXPECT_TRUE(next_wc(&wc));
    EXPECT_EQ(wc.opcode, IBV_WC_TM_ADD);
    EXPECT_EQ(wc.wr_id, 1000 + wr_id);
    EXPECT_EQ(wc.status, want);
    EXPECT_EQ(wc.flags, want_flags);
    return w.tm.handle;
  }
  void list_op(ibv_srq* s, ibv_ops_wr_opcode code, uint32_t handle, uint32_t unexpected,
               ibv_wc_status want, unsigned want_flags = 0) {
    ibv_ops_wr w{};
    w.wr_id = 77;
    w.opcode = code;
    w.flags = IBV_OPS_SIGNALED | (code == IBV_WR_TAG_SYNC ? IBV_OPS_TM_SYNC : 0);
    w.tm.handle = handle;
    w.tm.unexpected_cnt = unexpected;
    ASSERT_EQ(op(s, &w), 0);
    TmWc wc{};
    ASSERT_TRUE(next_wc(&wc));
    EXPECT_EQ(wc.opcode, code == IBV_WR_TAG_DEL ? IBV_WC_TM_DEL : IBV_WC_TM_SYNC);
    EXPECT_EQ(wc.wr_id, 77u);
    EXPECT_EQ(wc.status, want);
    EXPECT_EQ(wc.flags, want_flags);
  }
  // Starts the sender and connects a QP of this process on srq to it.
  void connect(ibv_srq* s) {
    TmPeerInfo pi{};
    ASSERT_NO_FATAL_FAILURE(peer.start("tm-sender", &pi));
    ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
    ibv_qp* qp = make_qp_of(IBV_QPT_RC, cq, cq, {}, s);
    ASSERT_NE(qp, nullptr);
    TmParentInfo me{lid, qp->qp_num};
    ASSERT_TRUE(peer.send(&me, sizeof me));
    ASSERT_EQ(connect_qp(qp, pi.lid, pi.qpn, 0x40, 0x30), 0);
    ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
    const uctlite::EmudvFns* dv = uctlite::emudv_fns();
    ASSERT_NE(dv, nullptr);
    races = dv->races_recorded();
  }
  TmResult send(uint8_t tmh_op, uint64_t tag, uint32_t len, uint8_t seed, bool fin = false) {
    TmCmd c{tmh_op, seed, fin, len, tag};
    TmResult r{};
    EXPECT_TRUE(peer.send(&c, sizeof c));
    EXPECT_TRUE(peer.recv_by(&r, sizeof r, std::chrono::steady_clock::now() + 2 * kDeadline));
    EXPECT_EQ(r.ok, 1u) << r.err;
    return r;
  }
  void finish() {
    TmCmd c{0xff, 0, 0, 0, 0};
    ASSERT_TRUE(peer.send(&c, sizeof c));
    TmResult rep{};
    peer.finish(&rep, 2 * kDeadline);
    EXPECT_EQ(uctlite::emudv_fns()->races_recorded(), races) << "the device recorded a race";
  }
  // Posts an ordinary receive (the unexpected messages' buffers) into slot `slot` of rbuf.
  void post_unexpected_buffer(ibv_srq* s, int slot) {
    ibv_sge sg = rbuf.sge(size_t(slot) * kBuf, kBuf);
    ASSERT_EQ(post_srq(s, 500 + slot, &sg), 0);
  }
  const uint8_t* slot_p(int slot) const { return rbuf.p + size_t(slot) * kBuf; }

  ibv_tm_caps caps{};
  ibv_cq_ex* cqx = nullptr;
  Buf rbuf;
  Peer peer;
  uint64_t races = 0;
};

TEST_F(TagMatching, CapsAndListErrors) {
  EXPECT_EQ(caps.flags & IBV_TM_CAP_RC, uint32_t(IBV_TM_CAP_RC));
  EXPECT_GT(caps.max_num_tags, 0u);
  EXPECT_GT(caps.max_ops, 0u);
  EXPECT_EQ(caps.max_sge, 1u);
  EXPECT_GE(caps.max_rndv_hdr_size, sizeof(ibv_tmh) + sizeof(ibv_rvh));
  errno = 0;
  EXPECT_EQ(make_tm_srq(0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(make_tm_srq(caps.max_num_tags + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_srq* s = make_tm_srq(2);
  ASSERT_NE(s, nullptr) << errno;
  add(s, 1, 1, 0);
  add(s, 2, 2, 1);
  ibv_sge sg = rbuf.sge(0, 64);
  ibv_ops_wr w{};
  w.opcode = IBV_WR_TAG_ADD;
  w.flags = IBV_OPS_SIGNALED;
  w.tm.add.sg_list = &sg;
  w.tm.add.num_sge = 1;
  EXPECT_EQ(op(s, &w), ENOMEM);  // the list is full
  w.tm.add.num_sge = 2;
  EXPECT_EQ(op(s, &w), EINVAL);  // one SGE per tag
  w.opcode = IBV_WR_TAG_DEL;
  w.tm.handle = 2;
  EXPECT_EQ(op(s, &w), EINVAL);  // no such tag
  w.opcode = static_cast<ibv_ops_wr_opcode>(99);
  EXPECT_EQ(op(s, &w), EINVAL);
  ibv_srq* basic = make_srq(4);
  ASSERT_NE(basic, nullptr);
  w.opcode = IBV_WR_TAG_SYNC;
  EXPECT_EQ(op(basic, &w), EINVAL);  // an SRQ without a tag list
  // A DEL frees the tag for the next ADD; a second DEL of it finds nothing there.
  list_op(s, IBV_WR_TAG_DEL, 0, 0, IBV_WC_SUCCESS);
  add(s, 3, 3, 0);
  list_op(s, IBV_WR_TAG_DEL, 1, 0, IBV_WC_SUCCESS);
  list_op(s, IBV_WR_TAG_DEL, 1, 0, IBV_WC_TM_ERR);
}

TEST_F(TagMatching, EagerMatchedUnexpectedAndNoTag) {
  ibv_srq* s = make_tm_srq(caps.max_num_tags);
  ASSERT_NE(s, nullptr) << errno;
  for (int k = 4; k < 8; ++k) post_unexpected_buffer(s, k);
  add(s, 0x11, 1, 0);
  add(s, 0x22, 2, 1);
  // The same tag twice: the older ADD matches first.
  add(s, 0x22, 3, 2);
  ASSERT_NO_FATAL_FAILURE(connect(s));
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x10022, 700, 5).send_status, IBV_WC_SUCCESS);  // mask 0xffff
  TmWc wc{};
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.tm.tag, 0x10022u);
  EXPECT_EQ(wc.tm.priv, 0xc0de0000u);
  EXPECT_EQ(wc.byte_len, 700u);
  EXPECT_TRUE(has_pattern(slot_p(1), 700, 5, 3)) << "the payload after the header";
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x22, 40, 6).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_TRUE(has_pattern(slot_p(2), 40, 6, 3));
  // No tag for it: an ordinary receive takes it, header and all.
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x22, 100, 7).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.flags, 0u);
  EXPECT_EQ(wc.wr_id, 504u);
  EXPECT_EQ(wc.byte_len, 116u);
  EXPECT_EQ(reinterpret_cast<const ibv_tmh*>(slot_p(4))->opcode, IBV_TMH_EAGER);
  EXPECT_TRUE(has_pattern(slot_p(4) + sizeof(ibv_tmh), 100, 7, 3));
  // Software is one unexpected message behind: a new tag waits for the sync.
  add(s, 0x33, 4, 3, IBV_OPS_SIGNALED, 0, IBV_WC_SUCCESS, IBV_WC_TM_SYNC_REQ);
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x33, 8, 8).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.wr_id, 505u) << "a tag added out of sync matched";
  list_op(s, IBV_WR_TAG_SYNC, 0, 1, IBV_WC_SUCCESS, IBV_WC_TM_SYNC_REQ);  // still one behind
  list_op(s, IBV_WR_TAG_SYNC, 0, 2, IBV_WC_SUCCESS);
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x33, 8, 9).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.wr_id, 4u);
  EXPECT_EQ(wc.flags, unsigned(IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID));
  // NO_TAG: an ordinary receive, not counted as unexpected.
  EXPECT_EQ(send(IBV_TMH_NO_TAG, 0x11, 20, 10).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.opcode, IBV_WC_TM_NO_TAG);
  EXPECT_EQ(wc.wr_id, 506u);
  EXPECT_EQ(wc.flags, 0u);
  list_op(s, IBV_WR_TAG_SYNC, 0, 2, IBV_WC_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(finish());
}

TEST_F(TagMatching, RendezvousAndDel) {
  ibv_srq* s = make_tm_srq(caps.max_num_tags);
  ASSERT_NE(s, nullptr) << errno;
  for (int k = 4; k < 8; ++k) post_unexpected_buffer(s, k);
  add(s, 0x44, 1, 0);
  uint32_t gone = add(s, 0x55, 2, 1);
  uint32_t used = add(s, 0x66, 3, 2);
  ASSERT_NO_FATAL_FAILURE(connect(s));
  // Matched: the device reads 3000 bytes of the sender's buffer, then tells it with a FIN.
  TmResult r = send(IBV_TMH_RNDV, 0x44, 3000, 11, true);
  EXPECT_EQ(r.send_status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.fin_op, IBV_TMH_FIN);
  EXPECT_EQ(r.fin_tag, 0x44u);
  TmWc wc{};
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.flags, unsigned(IBV_WC_TM_MATCH));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.tm.tag, 0x44u);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.flags, unsigned(IBV_WC_TM_DATA_VALID));
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_TRUE(has_pattern(slot_p(0), 3000, 11, 3)) << "the rendezvous data";
  // Unmatched: the headers go to software in an ordinary receive.
  EXPECT_EQ(send(IBV_TMH_RNDV, 0x77, 64, 12).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(wc.flags, 0u);
  EXPECT_EQ(wc.wr_id, 504u);
  EXPECT_EQ(wc.byte_len, sizeof(ibv_tmh) + sizeof(ibv_rvh));
  EXPECT_EQ(reinterpret_cast<const ibv_tmh*>(slot_p(4))->opcode, IBV_TMH_RNDV);
  list_op(s, IBV_WR_TAG_SYNC, 0, 1, IBV_WC_SUCCESS);
  // DEL while posted: the tag no longer matches.
  list_op(s, IBV_WR_TAG_DEL, gone, 1, IBV_WC_SUCCESS);
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x55, 16, 13).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.wr_id, 505u);
  list_op(s, IBV_WR_TAG_SYNC, 0, 2, IBV_WC_SUCCESS);
  // DEL of a tag a message consumed: IBV_WC_TM_ERR.
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x66, 16, 14).send_status, IBV_WC_SUCCESS);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.wr_id, 3u);
  list_op(s, IBV_WR_TAG_DEL, used, 2, IBV_WC_TM_ERR);
  // An eager message longer than its tagged buffer: the receiver's length error.
  add(s, 0x88, 9, 3);
  EXPECT_EQ(send(IBV_TMH_EAGER, 0x88, kTagBuf + 1, 15).send_status, IBV_WC_REM_INV_REQ_ERR);
  ASSERT_TRUE(next_wc(&wc));
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(wc.wr_id, 9u);
  ASSERT_NO_FATAL_FAILURE(finish());
}

}  // namespace
}  // namespace vt
