// SPDX-License-Identifier: BSD-2-Clause
// Executing one WQE (step_execute): parse it, then one handler per opcode family, each doing the
// requester's and the responder's part of one message. The target process does nothing: its
// memory is written by the engine running in the initiator.
#include <algorithm>
#include <cstring>
#include <vector>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "dma/shared_map.h"
#include "emu/kill_point.h"
#include "emu/small_copy.h"

namespace emu {
using namespace engine_detail;
namespace {

// The requester's CQE becomes an error CQE (keeping the byte count and flags it had).
ExecOutcome fail(CqeInfo* out, uint8_t syndrome) {
  out->cqe_opcode = kCqeReqErr;
  out->syndrome = syndrome;
  return ExecOutcome::done;
}

}  // namespace

uint8_t Engine::gather_mixed(const QpSlot& qp, ParsedWqe* w, uint8_t* small,
                             std::vector<uint8_t>* large) {
  Sges& local = w->local;
  if (local.total > kMixedMax) {
    log("QP 0x%x: a WQE mixing inline data and pointers carries %llu bytes (at most %u here)",
        qp.qpn, static_cast<unsigned long long>(local.total), kMixedMax);
    return kSynLocalLength;
  }
  uint8_t* to = small;
  if (local.total > kMixedOnStack) {
    large->resize(local.total);
    to = large->data();
  }
  const int pid = h_->procs[qp.owner].pid;
  uint64_t at = 0;
  for (int i = 0; i < local.n; ++i) {
    MemSpan dst{reinterpret_cast<uint64_t>(to + at), local.span[i].len};
    if (!w->local_mr[i]) {  // inline: in the engine's copy of the WQE
      std::memcpy(to + at, reinterpret_cast<const void*>(local.span[i].addr), local.span[i].len);
    } else if (CopyResult cr = dma_copy(pid, &local.span[i], 1, 0, &dst, 1);
               cr != CopyResult::ok &&
               copy_via_mr_pages(cr, pid, &local.span[i], 1, &w->local_mr[i], 0, &dst, 1,
                                 nullptr) != CopyResult::ok) {
      return kSynLocalProt;
    }
    at += local.span[i].len;
  }
  local.n = 1;
  local.span[0] = {reinterpret_cast<uint64_t>(to), local.total};
  local.is_inline = true;  // the message is in the engine's memory now
  w->local_mr[0] = nullptr;
  return 0;
}

ExecOutcome Engine::step_execute(QpSlot& qp, const uint8_t* wqe, CqeInfo* out) {
  sched::point(sched::kPointDevExecute, qp.qpn);
  ParsedWqe w;
  uint8_t syndrome = parse_wqe(seg_, qp, wqe, &w);
  clear_cqe_info(out);
  out->cqe_opcode = kCqeReq;
  out->wqe_opcode = w.opcode;
  if (w.opcode == kOpSendImm || w.opcode == kOpRdmaWriteImm)
    out->emu_flags = kCqeFlagImm;  // as mlx5
  out->wqe_counter = qp.sq_ci & 0xffff;
  out->qpn = qp.qpn;
  if (syndrome) return fail(out, syndrome);
  out->byte_cnt = static_cast<uint32_t>(w.local.total);
  if (w.opcode == kOpNop) return ExecOutcome::done;
  if (w.opcode == kOpBindMw) return bind_mw(qp, w.bind) ? ExecOutcome::done : fail(out, kSynMwBind);
  if (w.opcode == kOpLocalInv)
    return invalidate_mw(qp.pd, be32(w.ctrl->imm)) ? ExecOutcome::done : fail(out, kSynMwBind);
  uint8_t small[kMixedOnStack];
  std::vector<uint8_t> large;
  if (w.mixed) [[unlikely]]
    if (uint8_t syn = gather_mixed(qp, &w, small, &large)) return fail(out, syn);
  int local_pid = w.local.is_inline ? 0 : h_->procs[qp.owner].pid;
  if (qp.type == kQptUd) return exec_ud(qp, w, local_pid, out);
  if (qp.type == kQptRaw) return exec_raw(qp, w, local_pid, out);

  // UC has no acknowledgements: what the responder cannot take is lost, and the requester, which
  // completes once the message is on the wire, does not learn of it.
  bool unreliable = qp.type == kQptUc;
  uint32_t npk = packets(w.local.total, qp.path_mtu);
  // The responder: the connected QP behind the destination LID, ready to receive (a DCI's: the DCT
  // this WQE names).
  QpSlot* r = qp.type == kQptDci ? dc_target(seg_, qp, w.av) : responder_of(seg_, qp);
  if (!r) {
    if (!unreliable) return ExecOutcome::stall_retry;
    advance_psn(qp, nullptr, npk);
    return ExecOutcome::done;
  }
  // A retry asks the slow question too: is the responder's process still the one that registered?
  // Asked at most once per clock tick per QP (peer_still_there): the question reads /proc (an open,
  // a read, a kill: ~10 us), and a requester that outruns its receiver retries after every RNR.
  if (qp.stall.load(std::memory_order_relaxed) != kStallNone && !peer_still_there(qp, *r))
    return ExecOutcome::stall_retry;
  raise_comm_est(*r);
  int remote_pid = h_->procs[r->owner].pid;
  uint16_t my_lid = h_->devices[qp.dev].ports[qp.port - 1].lid;
  Exchange x{qp, *r, w, out, npk, unreliable, local_pid, remote_pid, my_lid, r->pd, r->owner};
  // XRC: RDMA and atomics are checked against the keys of the SRQ the request names.
  if (r->type == kQptXrcRecv && (is_atomic(w.opcode) || has_raddr(w.opcode)) && !xrc_key_domain(x))
    return responder_error(x, kSynRemoteInvalReq, kEvQpReqErr);
  if (wire_on()) [[unlikely]]
    return exec_on_wire(x);
  return exec_message(x);
}

ExecOutcome Engine::exec_message(Exchange& x) {
  if (is_atomic(x.w.opcode)) return exec_atomic(x);
  if (has_raddr(x.w.opcode)) return exec_rdma(x);
  return exec_send(x);
}

bool Engine::xrc_key_domain(Exchange& x) {
  RecvRef rq;
  if (!recv_of(x.r, be32(x.w.xrc.xrc_srqn), &rq) || !rq.srq) return false;
  x.key_pd = rq.srq->pd;
  x.key_owner = rq.srq->owner;
  x.remote_pid = recv_pid(rq);
  return true;
}

ExecOutcome Engine::dropped(Exchange& x) {
  advance_psn(x.qp, nullptr, x.npk);
  return ExecOutcome::done;
}

ExecOutcome Engine::gone(Exchange& x) {
  return x.unreliable ? dropped(x) : ExecOutcome::stall_retry;
}

ExecOutcome Engine::rnr(Exchange& x) {
  // The lookup found the responder receiving, but a modify to ERR or RESET (or a destroy) may have
  // come since: it stores the state, then flushes or resets the queue under the lock our caller
  // now holds, so an empty queue here may be its doing, and the state it stored is seen. A QP that
  // no longer receives answers nothing (no RNR NAK): the packet goes nowhere, as for a responder
  // the lookup had not found.
  if (!can_receive(x.r.qp_state.load(std::memory_order_acquire)) ||
      x.r.state.load(std::memory_order_acquire) != kSlotLive)
    return gone(x);
  if (x.unreliable) return dropped(x);
  // Once per stall (not per retry): tests of flow-controlled programs (rsockets) assert that no
  // receive they posted before the peer's SEND is ever NAKed.
  if (x.qp.stall.load(std::memory_order_relaxed) != kStallRnr)
    log("QP 0x%x: RNR NAK from QP 0x%x (no receive posted), retry after %llu us", x.qp.qpn, x.r.qpn,
        static_cast<unsigned long long>(rnr_delay_us(x.r.min_rnr_timer)));
  x.out->rnr_timer = x.r.min_rnr_timer;
  return ExecOutcome::stall_rnr;
}

ExecOutcome Engine::responder_error(Exchange& x, uint8_t req_syndrome, uint32_t event) {
  if (x.unreliable) return dropped(x);  // UC: the packet is silently dropped (no NAK)
  // A DCT serves every initiator: one's bad request is NAKed and only that DCI fails (ConnectX
  // keeps the DCT going), so no event either.
  if (x.r.type == kQptDct) return fail(x.out, req_syndrome);
  enter_error(x.r);  // before the event: whoever reads it finds the QP in ERR
  raise_qp_event(x.r, event);
  return fail(x.out, req_syndrome);
}

// ---- A copy that faulted ----

namespace {
bool is_fault(CopyResult cr) { return cr == CopyResult::src_fault || cr == CopyResult::dst_fault; }
}  // namespace

CopyResult Engine::copy_via_mr_pages(CopyResult cr, int spid, const MemSpan* src, int nsrc,
                                     const MrSlot* const* smr, int dpid, const MemSpan* dst,
                                     int ndst, const MrSlot* const* dmr) {
  if (!is_fault(cr) || nsrc > kMaxSpans || ndst > kMaxSpans) return cr;
  // The spans in this process whose MR is this process's and whose pages are in its registration
  // file now point into a mapping of that file here (the program's own addresses lead nowhere, or
  // to memory it mapped there since, which hardware would not write either). One copy call
  // takes one address space per side, so a side in another process stays as it is.
  MemSpan s[kMaxSpans], d[kMaxSpans];
  bool moved = false;
  auto onto_pages = [&](int pid, const MemSpan* in, int n, const MrSlot* const* mrs, MemSpan* out) {
    for (int i = 0; i < n; ++i) {
      out[i] = in[i];
      const MrSlot* mr = mrs ? mrs[i] : nullptr;
      if (!mr || !in[i].len || (pid != 0 && pid != seg_->pid()) || mr->owner != seg_->self())
        continue;
      if (uint64_t window = shared_window(seg_, *mr, in[i].addr, in[i].len, true)) {
        out[i].addr = window;
        moved = true;
      }
    }
  };
  onto_pages(spid, src, nsrc, smr, s);
  onto_pages(dpid, dst, ndst, dmr, d);
  return moved ? dma_copy(spid, s, nsrc, dpid, d, ndst) : cr;
}

// ---- RDMA WRITE, WRITE_WITH_IMM, READ ----

CopyResult Engine::rdma_copy(Exchange& x, uint64_t va, int rpid, const MrSlot* rmr) {
  const Sges& local = x.w.local;
  if (!local.total) return CopyResult::ok;
  MemSpan remote{va, local.total};
  if (x.w.opcode == kOpRdmaRead) {
    CopyResult cr = dma_copy(rpid, &remote, 1, x.local_pid, local.span, local.n);
    if (is_fault(cr)) [[unlikely]]
      cr = copy_via_mr_pages(cr, rpid, &remote, 1, &rmr, x.local_pid, local.span, local.n,
                             x.w.local_mr);
    return cr;
  }
  CopyResult cr = dma_copy(x.local_pid, local.span, local.n, rpid, &remote, 1);
  if (is_fault(cr)) [[unlikely]]
    cr = copy_via_mr_pages(cr, x.local_pid, local.span, local.n, x.w.local_mr, rpid, &remote, 1,
                           &rmr);
  return cr;
}

ExecOutcome Engine::rdma_copy_failed(Exchange& x, CopyResult cr) {
  bool remote_side = x.w.opcode == kOpRdmaRead
                         ? (cr == CopyResult::src_gone || cr == CopyResult::src_fault)
                         : (cr == CopyResult::dst_gone || cr == CopyResult::dst_fault);
  if (!remote_side) return fail(x.out, kSynLocalProt);
  if (cr == CopyResult::src_gone || cr == CopyResult::dst_gone) return gone(x);
  return responder_error(x, kSynRemoteAccess, kEvQpAccessErr);
}

ExecOutcome Engine::exec_rdma(Exchange& x) {
  const ParsedWqe& w = x.w;
  uint64_t total = w.local.total;
  uint64_t va = 0;
  const MrSlot* rmr = nullptr;
  uint32_t need = w.opcode == kOpRdmaRead ? kAccessRemoteRead : kAccessRemoteWrite;
  // A zero-length transfer carries no R_Key check.
  if (total && !translate_remote(seg_, x.r, x.key_pd, x.key_owner, be32(w.raddr.rkey),
                                 be64(w.raddr.raddr), total, need, &va, &rmr))
    return responder_error(x, kSynRemoteAccess, kEvQpAccessErr);
  // Through a shared mapping of the target's pages when there is one (EMU_SHARED_MR).
  int rpid = x.remote_pid;
  if (uint64_t window = total ? shared_window(seg_, *rmr, va, total) : 0) {
    if (!peer_still_there(x.qp, x.r)) return gone(x);
    va = window;
    rpid = 0;
  }
  if (w.opcode != kOpRdmaWriteImm) {
    CopyResult cr = rdma_copy(x, va, rpid, rmr);
    if (cr != CopyResult::ok) return rdma_copy_failed(x, cr);
    advance_psn(x.qp, &x.r, x.npk);
    return ExecOutcome::done;
  }
  // WRITE_WITH_IMM consumes a receive: the bytes move while it is held, the CQE after.
  // (Of the XRC SRQ the request names, for XRC: xrc_key_domain found it.)
  RecvRef rq;
  recv_of(x.r, be32(w.xrc.xrc_srqn), &rq);
  CqeInfo rc;
  clear_cqe_info(&rc);
  CopyResult cr;
  bool placed = false;
  {
    ShmLockGuard held(recv_lock(rq), seg_->self());
    settle_owed(rq);
    if (recv_empty_wait(x.qp, rq)) return rnr(x);
    cr = rdma_copy(x, va, rpid, rmr);
    if (cr == CopyResult::ok) {
      uint32_t seg_bytes;
      recv_head(rq, &seg_bytes, &rc.wqe_counter);
      rc.cqe_opcode = kCqeRespWrImm;
      rc.qpn = x.r.qpn;
      rc.src_qpn = x.qp.qpn;
      rc.slid = x.my_lid;
      rc.byte_cnt = static_cast<uint32_t>(total);
      rc.imm_be = w.ctrl->imm;
      rc.emu_flags = recv_cqe_flags(*w.ctrl, true);
      if (rq.srq && rq.srq->xrcd_ref) rc.srqn = rq.srq->srqn;
      placed = complete_recv(rq, recv_cq(rq), rc, &x.r);
    }
  }
  if (cr != CopyResult::ok) return rdma_copy_failed(x, cr);
  advance_psn(x.qp, &x.r, x.npk);
  if (placed) step_raise_event(recv_cq(rq), rc);
  return ExecOutcome::done;
}

// ---- Atomics ----

ExecOutcome Engine::exec_atomic(Exchange& x) {
  const ParsedWqe& w = x.w;
  uint64_t raddr = be64(w.raddr.raddr);
  uint64_t va;
  const MrSlot* rmr = nullptr;
  if (raddr & 7) return responder_error(x, kSynRemoteInvalReq, kEvQpReqErr);
  // An atomic write is a write (the remote-write right), placed as one 8-byte store.
  bool write = w.opcode == kOpAtomicWrite;
  uint32_t need = write ? kAccessRemoteWrite : kAccessRemoteAtomic;
  if (!translate_remote(seg_, x.r, x.key_pd, x.key_owner, be32(w.raddr.rkey), raddr, 8, need, &va,
                        &rmr))
    return responder_error(x, kSynRemoteAccess, kEvQpAccessErr);
  int apid = x.remote_pid;
  if (uint64_t window = shared_window(seg_, *rmr, va, 8)) {
    if (!peer_still_there(x.qp, x.r)) return ExecOutcome::stall_retry;
    va = window;
    apid = 0;
  }
  uint64_t old = 0;
  CopyResult cr;
  {
    ShmLockGuard g(h_->atomic_lock, seg_->self());
    auto atomic_at = [&](int pid, uint64_t at) {
      CopyResult r = write ? dma_write64(pid, at, w.atom.swap_add) : dma_read64(pid, at, &old);
      if (r == CopyResult::ok && !write) {
        uint64_t v = old;
        if (w.opcode == kOpAtomicFa)
          v = old + be64(w.atom.swap_add);
        else if (old == be64(w.atom.compare))
          v = be64(w.atom.swap_add);
        if (v != old) r = dma_write64(pid, at, v);
      }
      return r;
    };
    cr = atomic_at(apid, va);
    // The target is this process's and the program unmapped it: the MR's pages in the
    // registration file, if they are there (as copy_via_mr_pages; the 8 bytes lie in one page,
    // so the read faulted before anything was written).
    if (is_fault(cr) && apid == seg_->pid() && rmr->owner == seg_->self()) [[unlikely]]
      if (uint64_t window = shared_window(seg_, *rmr, va, 8, true)) cr = atomic_at(0, window);
  }
  if (cr == CopyResult::src_gone || cr == CopyResult::dst_gone) return ExecOutcome::stall_retry;
  if (cr != CopyResult::ok) return responder_error(x, kSynRemoteAccess, kEvQpAccessErr);
  MemSpan src{reinterpret_cast<uint64_t>(&old), 8};
  if (!write) {
    cr = dma_copy(0, &src, 1, x.local_pid, w.local.span, w.local.n);
    if (is_fault(cr)) [[unlikely]]
      cr = copy_via_mr_pages(cr, 0, &src, 1, nullptr, x.local_pid, w.local.span, w.local.n,
                             w.local_mr);
    if (cr != CopyResult::ok) return fail(x.out, kSynLocalProt);
  }
  advance_psn(x.qp, &x.r, x.npk);
  return ExecOutcome::done;
}

// ---- SEND, SEND_WITH_IMM ----

// The receive CQE of a SEND whose payload is in (or failed at the responder: *resp_syndrome).
// SEND with invalidate frees the type 2 window named in the immediate field here, with the
// receive: its failure is the responder's local protection error.
inline void Engine::send_cqe(const Exchange& x, const RecvRef& rq, CqeInfo* rc,
                             uint8_t* resp_syndrome, const TmVerdict& tm) {
  if (tm.op) {
    rc->emu_flags = kCqeFlagTm;
    rc->tm_op = tm.op;
    rc->srqn = rq.srq->srqn;
  }
  bool inval = x.w.opcode == kOpSendInval;
  uint32_t inval_pd = rq.srq && rq.srq->xrcd_ref ? rq.srq->pd : x.r.pd;
  if (inval && !*resp_syndrome && !invalidate_mw(inval_pd, be32(x.w.ctrl->imm)))
    *resp_syndrome = kSynLocalProt;
  if (*resp_syndrome) {
    rc->cqe_opcode = kCqeRespErr;
    rc->syndrome = *resp_syndrome;
    return;
  }
  bool imm = x.w.opcode == kOpSendImm;
  rc->cqe_opcode = imm ? kCqeRespSendImm : kCqeRespSend;
  rc->byte_cnt = static_cast<uint32_t>(x.w.local.total);
  rc->imm_be = x.w.ctrl->imm;
  rc->emu_flags |= recv_cqe_flags(*x.w.ctrl, imm);
  if (inval) rc->emu_flags |= kCqeFlagInv;
}

ExecOutcome Engine::exec_send(Exchange& x) {
  // The responder's next receive WQE: its own queue or its SRQ.
  RecvRef rq;
  if (!recv_of(x.r, be32(x.w.xrc.xrc_srqn), &rq)) {
    // No such SRQ in the TGT QP's domain: the responder NAKs an invalid request.
    return responder_error(x, kSynRemoteInvalReq, kEvQpReqErr);
  }
  if (rq.srq && rq.srq->xrcd_ref) x.remote_pid = recv_pid(rq);  // the SRQ's process takes the data
  CqeInfo rc;
  clear_cqe_info(&rc);
  uint8_t resp_syndrome = 0;
  TmVerdict tm{};
  bool placed = false;
  {
    ShmLockGuard held(recv_lock(rq), seg_->self());
    EMU_KILL_POINT(KillPoint::recv_lock);  // the peer's lock, held by us
    settle_owed(rq);
    // A tag matching SRQ: a message matching a posted tag takes no SRQ receive.
    if (rq.srq && rq.srq->tm_tags) [[unlikely]]
      tm = tm_classify(x, *rq.srq);
    if (!tm.matched()) {
      if (recv_empty_wait(x.qp, rq)) return rnr(x);
      ExecOutcome early;
      if (!send_payload(x, rq, &rc, &resp_syndrome, &early)) return early;
      if (tm.op == kTmOpUnexpected) ++seg_->at<TmListHead>(rq.srq->tm_off)->unexpected;
      send_cqe(x, rq, &rc, &resp_syndrome, tm);
      placed = complete_recv(rq, recv_cq(rq), rc, resp_syndrome ? nullptr : &x.r);
    }
  }
  if (tm.matched()) return tm_matched(x, *rq.srq, tm);
  if (placed) step_raise_event(recv_cq(rq), rc);
  if (resp_syndrome) {
    if (x.r.type != kQptDct) enter_error(x.r);  // (a DCT serves its other initiators on)
    if (x.unreliable) return dropped(x);
    return fail(x.out, resp_syndrome == kSynLocalLength ? kSynRemoteInvalReq : kSynRemoteOp);
  }
  advance_psn(x.qp, &x.r, x.npk);
  return ExecOutcome::done;
}

bool Engine::recv_windows(const RecvRef& rq, const uint8_t* rwqe, const Sges& scatter,
                          uint64_t msg_len, uint64_t* window) {
  bool xrc_srq = rq.srq && rq.srq->xrcd_ref;
  uint32_t pd = xrc_srq ? rq.srq->pd : rq.qp->pd;
  uint32_t owner = xrc_srq ? rq.srq->owner : rq.qp->owner;
  for (int i = 0; i < scatter.n; ++i) {
    const MrSlot* mr = nullptr;
    uint64_t va = 0;
    // The key was checked by recv_scatter; look the MR up again for its window.
    uint64_t len = std::min<uint64_t>(scatter.span[i].len, msg_len);
    DataSeg d;
    std::memcpy(&d, rwqe + i * sizeof d, sizeof d);
    bool ok = translate_key(seg_, pd, owner, be32(d.lkey), be64(d.addr), len, kAccessLocalWrite,
                            &va, &mr);
    window[i] = ok && mr ? shared_window(seg_, *mr, va, len) : 0;
    if (!window[i]) return false;
  }
  return true;
}

void Engine::recv_mrs(const RecvRef& rq, const uint8_t* rwqe, const Sges& scatter, uint64_t msg_len,
                      const MrSlot** mrs) {
  bool xrc_srq = rq.srq && rq.srq->xrcd_ref;
  uint32_t pd = xrc_srq ? rq.srq->pd : rq.qp->pd;
  uint32_t owner = xrc_srq ? rq.srq->owner : rq.qp->owner;
  for (int i = 0; i < scatter.n; ++i) {
    uint64_t len = std::min<uint64_t>(scatter.span[i].len, msg_len), va;
    DataSeg d;
    std::memcpy(&d, rwqe + i * sizeof d, sizeof d);
    mrs[i] = nullptr;
    if (!translate_key(seg_, pd, owner, be32(d.lkey), be64(d.addr), len, kAccessLocalWrite, &va,
                       &mrs[i]))
      mrs[i] = nullptr;
  }
}

// Scatter-to-CQE: the payload rides in the receive CQE, one line for the receiver to read; its
// poll copies it into the buffers of its own receive WQE (checked here, as the device does).
bool Engine::payload_into_cqe(Exchange& x, CqeInfo* rc, ExecOutcome* early) {
  const Sges& local = x.w.local;
  MemSpan cqe_data{reinterpret_cast<uint64_t>(rc->inline_data), local.total};
  if (x.local_pid == 0 && local.n == 1) {  // inline data in our copy of the WQE: no DMA call
    copy_small(rc->inline_data, reinterpret_cast<const void*>(local.span[0].addr), local.total);
  } else if (CopyResult cr = dma_copy(x.local_pid, local.span, local.n, 0, &cqe_data, 1);
             cr != CopyResult::ok &&
             copy_via_mr_pages(cr, x.local_pid, local.span, local.n, x.w.local_mr, 0, &cqe_data, 1,
                               nullptr) != CopyResult::ok) {
    *early = fail(x.out, kSynLocalProt);
    return false;
  }
  rc->inline_scatter = true;
  return true;
}

// Straight into the receive buffer through shared mappings (EMU_SHARED_MR).
bool Engine::payload_through_windows(Exchange& x, const Sges& scatter, const uint64_t* window,
                                     ExecOutcome* early) {
  const Sges& local = x.w.local;
  Sges direct = scatter;
  uint64_t left = local.total;
  for (int i = 0; i < direct.n; ++i) {
    direct.span[i].addr = window[i];
    if (direct.span[i].len > left) direct.span[i].len = left;
    left -= direct.span[i].len;
  }
  if (CopyResult cr = dma_copy(x.local_pid, local.span, local.n, 0, direct.span, direct.n);
      cr != CopyResult::ok &&
      copy_via_mr_pages(cr, x.local_pid, local.span, local.n, x.w.local_mr, 0, direct.span,
                        direct.n, nullptr) != CopyResult::ok) {
    *early = fail(x.out, kSynLocalProt);
    return false;
  }
  return true;
}

// From the requester's memory into the receive buffers' owner's, one DMA call; a fault goes again
// through the MRs' own pages (an unmapped buffer the MR still holds).
bool Engine::payload_by_dma(Exchange& x, const RecvRef& rq, const uint8_t* rwqe,
                            const Sges& scatter, uint8_t* resp_syndrome, ExecOutcome* early) {
  const Sges& local = x.w.local;
  CopyResult cr = dma_copy(x.local_pid, local.span, local.n, x.remote_pid, scatter.span, scatter.n);
  if (is_fault(cr)) [[unlikely]] {
    const MrSlot* mrs[kMaxSpans];
    recv_mrs(rq, rwqe, scatter, local.total, mrs);
    cr = copy_via_mr_pages(cr, x.local_pid, local.span, local.n, x.w.local_mr, x.remote_pid,
                           scatter.span, scatter.n, mrs);
  }
  if (cr == CopyResult::dst_gone) {
    *early = gone(x);
    return false;
  }
  if (cr == CopyResult::src_fault || cr == CopyResult::src_gone) {
    *early = fail(x.out, kSynLocalProt);
    return false;
  }
  if (cr == CopyResult::dst_fault) *resp_syndrome = kSynLocalProt;
  return true;
}

bool Engine::send_payload(Exchange& x, const RecvRef& rq, CqeInfo* rc, uint8_t* resp_syndrome,
                          ExecOutcome* early) {
  const Sges& local = x.w.local;
  uint32_t seg_bytes;
  const uint8_t* rwqe = recv_head(rq, &seg_bytes, &rc->wqe_counter);
  Sges scatter;
  bool addr_is_va = true;  // the receiver can scatter from its own WQE (no iova offset)
  bool prot_ok = recv_scatter(rq, rwqe, seg_bytes, &scatter, &addr_is_va);
  rc->qpn = x.r.qpn;
  bool xrc_srq = rq.srq && rq.srq->xrcd_ref;
  if (xrc_srq) rc->srqn = rq.srq->srqn;
  rc->src_qpn = x.qp.qpn;
  rc->slid = x.my_lid;
  if (!prot_ok)
    *resp_syndrome = kSynLocalProt;
  else if (scatter.total < local.total)
    *resp_syndrome = kSynLocalLength;
  // Shared windows (EMU_SHARED_MR) into the receive buffers, used only if all of it has them.
  uint64_t window[kMaxSpans];
  bool all_windows = prot_ok && scatter.all_shared &&
                     (local.total > kCqeInlineMax || !addr_is_va) &&
                     recv_windows(rq, rwqe, scatter, local.total, window);
  if (*resp_syndrome || !local.total) return true;
  bool elsewhere = x.remote_pid != seg_->pid();
  // (Not into an XRC or TM SRQ: their CQEs are found by SRQ number and carry no payload.)
  bool by_srqn = rq.srq && (rq.srq->xrcd_ref || rq.srq->tm_tags);
  // (Not for a CQ its owner may read from memory: code written for mlx5 finds its data in the
  // buffer it posted.)
  bool cqe_scatter = !(recv_cq(rq).format & kCqFormatMlx5);
  if (local.total <= kCqeInlineMax && addr_is_va && !by_srqn && elsewhere && cqe_scatter)
    return payload_into_cqe(x, rc, early);
  if (all_windows && elsewhere && peer_still_there(x.qp, x.r))
    return payload_through_windows(x, scatter, window, early);
  // Into the receive CQ's staging area, for the receiver's poll to place (engine_stage.cpp).
  if (addr_is_va && !by_srqn && elsewhere && peer_still_there(x.qp, x.r)) {
    Staged st = stage_payload(recv_cq(rq), nullptr, 0, x.local_pid, local, rc);
    if (st == Staged::staged) return true;
    if (st == Staged::src_fault) {
      *early = fail(x.out, kSynLocalProt);
      return false;
    }
  }
  return payload_by_dma(x, rq, rwqe, scatter, resp_syndrome, early);
}

}  // namespace emu
