// SPDX-License-Identifier: BSD-2-Clause
// Tag matching on SRQs (ibv_create_srq_ex(3) IBV_SRQT_TM, ibv_post_srq_ops(3)), the device's
// part: the tag list (emu/layout.h TmListHead, TmTag) changed by list operations and consumed by
// incoming messages whose tag matching header (TmHeader) names a posted tag. Both run under the
// SRQ's lock, so a message and a DEL of the tag it matches are ordered, as on mlx5 (a DEL that
// loses answers IBV_WC_TM_ERR).
//
// Phases: the device counts the messages it found no tag for (unexpected); software reports the
// count it has handled with IBV_OPS_TM_SYNC. A tag added while software is behind might have
// been taken by one of those messages had software seen it first, so it is not matched until a
// SYNC brings software level with the device; its ADD completion asks for that sync
// (IBV_WC_TM_SYNC_REQ).
#include <cstring>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "emu/reclaim.h"
#include "emu/shm_lock.h"

namespace emu {
using namespace engine_detail;
namespace {

TmListHead& list_head(Segment* seg, const SrqSlot& s) { return *seg->at<TmListHead>(s.tm_off); }
TmTag* tags_of(Segment* seg, const SrqSlot& s) {
  return reinterpret_cast<TmTag*>(&list_head(seg, s) + 1);
}

// The oldest posted tag the message's tag matches (MPI's order: the first posted receive that
// matches), or -1.
int find_tag(Segment* seg, const SrqSlot& s, uint64_t msg_tag) {
  TmTag* tags = tags_of(seg, s);
  int best = -1;
  for (uint32_t i = 0; i < s.tm_tags; ++i) {
    const TmTag& t = tags[i];
    if (t.state != kTmTagPosted || (msg_tag & t.mask) != t.tag) continue;
    if (best < 0 || static_cast<int32_t>(t.seq - tags[best].seq) < 0) best = static_cast<int>(i);
  }
  return best;
}

}  // namespace

bool Engine::tm_list_op(SrqSlot& s, const TmListOp& op) {
  EngineSection in_engine(seg_);
  if (s.state.load(std::memory_order_acquire) != kSlotLive || !s.tm_tags) return false;
  TmListHead& head = list_head(seg_, s);
  TmTag* tags = tags_of(seg_, s);
  bool ok = true;
  bool behind;
  {
    ShmLockGuard held(s.lock, seg_->self());
    if (op.sync) head.synced = op.unexpected;
    if (op.op == kTmOpAppend && op.index < s.tm_tags) {
      TmTag& t = tags[op.index];
      t = TmTag{};
      t.seq = ++head.seq;
      t.tag = op.tag;
      t.mask = op.mask;
      t.addr = op.addr;
      t.length = op.length;
      t.lkey = op.lkey;
      t.state = op.unexpected == head.unexpected ? kTmTagPosted : kTmTagStale;
    } else if (op.op == kTmOpRemove) {
      // Posted or waiting for a sync: removed; consumed (or never added): the tag is not there.
      ok = op.index < s.tm_tags &&
           (tags[op.index].state == kTmTagPosted || tags[op.index].state == kTmTagStale);
      if (ok) tags[op.index].state = kTmTagFree;
    }
    behind = head.synced != head.unexpected;
    if (!behind)
      for (uint32_t i = 0; i < s.tm_tags; ++i)
        if (tags[i].state == kTmTagStale) tags[i].state = kTmTagPosted;
    if (op.op == kTmOpAppend) behind = op.unexpected != head.unexpected;
  }
  if (op.signaled) {
    CqeInfo c{};
    c.cqe_opcode = kCqeNoPacket;
    c.tm_op = op.op;
    c.emu_flags = static_cast<uint8_t>(kCqeFlagTm | (behind ? kCqeFlagTmSyncReq : 0) |
                                       (ok ? 0 : kCqeFlagTmFail));
    c.srqn = s.srqn;
    c.wqe_counter = static_cast<uint16_t>(op.index);
    write_cqe(cq_slot(h_, s.cq), c);
  }
  return ok;
}

Engine::TmVerdict Engine::tm_classify(Exchange& x, SrqSlot& s) {
  TmVerdict v{};
  v.op = kTmOpNoTag;
  const Sges& local = x.w.local;
  uint8_t hdr[sizeof(TmHeader) + sizeof(RndvHeader)] = {};
  uint64_t hdr_len = std::min<uint64_t>(local.total, sizeof hdr);
  Sges head = sub_spans(local, 0, hdr_len);
  MemSpan into{reinterpret_cast<uint64_t>(hdr), hdr_len};
  if (dma_copy(x.local_pid, head.span, head.n, 0, &into, 1) != CopyResult::ok) return v;
  TmHeader tmh;
  std::memcpy(&tmh, hdr, sizeof tmh);
  bool eager = tmh.opcode == kTmhEager && hdr_len >= sizeof(TmHeader);
  bool rndv = tmh.opcode == kTmhRndv && hdr_len >= sizeof hdr;
  // NO_TAG, a FIN, an unknown opcode or a message too short for its header: for software.
  if (!eager && !rndv) return v;
  v.tag = be64(tmh.tag);
  v.app_ctx = be32(tmh.app_ctx);
  int i = find_tag(seg_, s, v.tag);
  if (i < 0) {
    v.op = kTmOpUnexpected;
    return v;
  }
  TmTag& t = tags_of(seg_, s)[i];
  v.index = static_cast<uint16_t>(i);
  if (rndv) {
    // The read waits for the SEND's completion (tm_rndv_finish); the tag is taken now.
    RndvHeader rvh;
    std::memcpy(&rvh, hdr + sizeof(TmHeader), sizeof rvh);
    t.state = kTmTagRndv;
    t.rndv_va = be64(rvh.va);
    t.rndv_rkey = be32(rvh.rkey);
    t.rndv_len = be32(rvh.len);
    t.msg_tag = v.tag;
    t.app_ctx = v.app_ctx;
    v.op = kTmOpConsumed;
    return v;
  }
  // Eager: the payload after the header into the tagged buffer.
  t.state = kTmTagFree;
  v.op = kTmOpConsumedMsg;
  uint64_t len = local.total - sizeof(TmHeader);
  v.bytes = static_cast<uint32_t>(len);
  uint64_t va = 0;
  if (len > t.length) {
    v.syndrome = kSynLocalLength;
  } else if (len) {
    if (!translate_key(seg_, s.pd, s.owner, t.lkey, t.addr, len, kAccessLocalWrite, &va)) {
      v.syndrome = kSynLocalProt;
    } else {
      Sges body = sub_spans(local, sizeof(TmHeader), len);
      MemSpan dst{va, len};
      if (dma_copy(x.local_pid, body.span, body.n, recv_pid(RecvRef{&x.r, &s}), &dst, 1) !=
          CopyResult::ok)
        v.syndrome = kSynLocalProt;
    }
  }
  return v;
}

ExecOutcome Engine::tm_matched(Exchange& x, SrqSlot& s, const TmVerdict& v) {
  CqeInfo rc{};
  rc.cqe_opcode = v.syndrome ? kCqeRespErr : kCqeRespSend;
  rc.syndrome = v.syndrome;
  rc.qpn = x.r.qpn;
  rc.src_qpn = x.qp.qpn;
  rc.slid = x.my_lid;
  rc.srqn = s.srqn;
  rc.wqe_counter = v.index;
  rc.byte_cnt = v.op == kTmOpConsumed ? 0 : v.bytes;
  rc.emu_flags = kCqeFlagTm;
  rc.tm_op = v.op;
  rc.tm_tag = v.tag;
  rc.tm_app_ctx = v.app_ctx;
  write_cqe(recv_cq(RecvRef{&x.r, &s}), rc);
  if (v.syndrome) {
    // As a receive that does not fit (exec_send): the responder's QP fails, the requester is told.
    enter_error(x.r);
    if (x.unreliable) return dropped(x);
    x.out->cqe_opcode = kCqeReqErr;
    x.out->syndrome = v.syndrome == kSynLocalLength ? kSynRemoteInvalReq : kSynRemoteOp;
    return ExecOutcome::done;
  }
  advance_psn(x.qp, &x.r, x.npk);
  if (v.op == kTmOpConsumed) x.out->tm_rndv = 1 + (srq_index(s) << 16 | v.index);
  return ExecOutcome::done;
}

// A rendezvous: the responder's device reads the sender's buffer into the tagged one, tells the
// sender with a FIN message (a receive on the sender's QP) and completes the tag
// (IBV_WC_TM_DATA_VALID). Runs after the sender's SEND completed, as the acknowledgement comes
// before the read on a real wire.
void Engine::tm_rndv_finish(QpSlot& qp, uint32_t ref) {
  SrqSlot& s = srq_slot(h_, ((ref - 1) >> 16) & (kMaxSrqs - 1));
  uint32_t idx = (ref - 1) & 0xffff;
  if (s.state.load(std::memory_order_acquire) != kSlotLive || idx >= s.tm_tags) return;
  TmTag t;
  {
    ShmLockGuard held(s.lock, seg_->self());
    t = tags_of(seg_, s)[idx];
  }
  if (t.state != kTmTagRndv) return;
  QpSlot* r = responder_of(seg_, qp);
  uint8_t syndrome = 0;
  uint64_t src = 0, dst = 0;
  if (t.rndv_len > t.length)
    syndrome = kSynLocalLength;
  else if (t.rndv_len &&
           !translate_remote(seg_, qp, t.rndv_rkey, t.rndv_va, t.rndv_len, kAccessRemoteRead, &src))
    syndrome = kSynRemoteAccess;
  else if (t.rndv_len &&
           !translate_key(seg_, s.pd, s.owner, t.lkey, t.addr, t.rndv_len, kAccessLocalWrite, &dst))
    syndrome = kSynLocalProt;
  if (!syndrome && t.rndv_len) {
    MemSpan from{src, t.rndv_len}, to{dst, t.rndv_len};
    if (dma_copy(h_->procs[qp.owner].pid, &from, 1, h_->procs[s.owner].pid, &to, 1) !=
        CopyResult::ok)
      syndrome = kSynRemoteAccess;
  }
  {
    ShmLockGuard held(s.lock, seg_->self());
    tags_of(seg_, s)[idx].state = kTmTagFree;
  }
  if (!syndrome) tm_send_fin(qp, r, t);
  CqeInfo rc{};
  rc.cqe_opcode = syndrome ? kCqeRespErr : kCqeRespSend;
  rc.syndrome = syndrome;
  rc.qpn = r ? r->qpn : 0;
  rc.src_qpn = qp.qpn;
  rc.srqn = s.srqn;
  rc.wqe_counter = static_cast<uint16_t>(idx);
  rc.byte_cnt = t.rndv_len;
  rc.emu_flags = kCqeFlagTm;
  rc.tm_op = kTmOpExpected;
  write_cqe(cq_slot(h_, r ? r->recv_cq : s.cq), rc);
}

// The FIN: a tag matching header (opcode FIN, the message's tag and context) into the sender's
// next receive. With none posted it is lost (hardware would retry it after an RNR NAK).
void Engine::tm_send_fin(QpSlot& qp, const QpSlot* r, const TmTag& t) {
  TmHeader fin{};
  fin.opcode = kTmhFin;
  fin.app_ctx = be32(t.app_ctx);
  fin.tag = be64(t.msg_tag);
  RecvRef q = recv_of(qp);
  CqeInfo rc{};
  uint8_t syndrome = 0;
  bool placed;
  {
    ShmLockGuard held(recv_lock(q), seg_->self());
    settle_owed(q);
    if (recv_empty(q)) return;
    uint32_t seg_bytes;
    const uint8_t* wqe = recv_head(q, &seg_bytes, &rc.wqe_counter);
    Sges scatter;
    bool addr_is_va;
    if (!recv_scatter(q, wqe, seg_bytes, &scatter, &addr_is_va)) {
      syndrome = kSynLocalProt;
    } else if (scatter.total < sizeof fin) {
      syndrome = kSynLocalLength;
    } else {
      MemSpan from{reinterpret_cast<uint64_t>(&fin), sizeof fin};
      Sges to = sub_spans(scatter, 0, sizeof fin);
      if (dma_copy(0, &from, 1, recv_pid(q), to.span, to.n) != CopyResult::ok)
        syndrome = kSynLocalProt;
    }
    rc.cqe_opcode = syndrome ? kCqeRespErr : kCqeRespSend;
    rc.syndrome = syndrome;
    rc.qpn = qp.qpn;
    rc.src_qpn = r ? r->qpn : 0;
    rc.slid = r ? h_->devices[r->dev].ports[r->port - 1].lid : 0;
    rc.byte_cnt = sizeof fin;
    placed = complete_recv(q, recv_cq(q), rc);
  }
  if (placed) step_raise_event(recv_cq(q), rc);
  if (syndrome) enter_error(qp);
}

}  // namespace emu
