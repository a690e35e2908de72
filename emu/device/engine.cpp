#include "device/engine.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>

#include "emu/barriers.h"
#include "device/doorbell.h"
#include "shm/memory.h"
#include "emu/notify.h"
#include "emu/objects.h"
#include "device/engine_internal.h"
#include "emu/reclaim.h"
#include "shm/shared_map.h"
#include "emu/xrc.h"

namespace emu {
using namespace engine_detail;
namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The clock tick the kernel last counted (1-4 ms resolution): a few ns to read where the precise
// clock costs 26 ns here, for checks asked per message that only need to run every millisecond
// or so.
uint64_t coarse_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The IBTA RNR timer encoding, in microseconds (code 0 is the longest, 655.36 ms).
const uint32_t kRnrUs[32] = {655360, 10,    20,    30,    40,    60,     80,     120,
                             160,    240,   320,   480,   640,   960,    1280,   1920,
                             2560,   3840,  5120,  7680,  10240, 15360,  20480,  30720,
                             40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

}  // namespace

Engine::Engine(Segment* seg) : seg_(seg), h_(seg->hdr()), now_(monotonic_ns) {}

Engine* Engine::process_engine() {
  static Engine* e = new Engine(Segment::get());  // lives as long as the process
  return e;
}

uint64_t Engine::rnr_delay_us(uint8_t code) { return kRnrUs[code & 31]; }

uint64_t Engine::transport_timeout_us(uint8_t timeout) {
  if (timeout == 0) return 0;  // infinite
  return (4096ull << std::min<uint8_t>(timeout, 31)) / 1000;
}

void Engine::on_doorbell(uint64_t ctrl_head) {
  EngineSection in_engine(seg_);
  CtrlSeg ctrl;
  std::memcpy(&ctrl, &ctrl_head, 8);
  uint32_t qpn = be32(ctrl.qpn_ds) >> 8;
  QpSlot* qp = seg_->find_qp(qpn);
  if (!qp) {
    log("doorbell for unknown QP 0x%x ignored", qpn);
    return;
  }
  kick_sq(*qp);
}

void Engine::kick_sq(QpSlot& qp, bool force_retry) {
  // A forced retry is a flag on the QP, so that a runner already inside (which this call cannot
  // join) still honours it.
  if (force_retry) qp.retry_now.store(1, std::memory_order_seq_cst);
  EngineSection in_engine(seg_);
  for (;;) {
    if (!qp.sq_engine.try_lock_or_recover(seg_->self())) return;  // the runner re-checks for us
    // A load first: an exchange per doorbell would be one more full barrier per post.
    run_sq(qp, qp.retry_now.load(std::memory_order_relaxed) != 0 && qp.retry_now.exchange(0) != 0);
    uint32_t consumed = qp.sq_ci & 0xffff;  // read under the lock: sq_ci changes only there
    bool stalled = qp.stall.load() != kStallNone;
    qp.sq_engine.unlock();
    // A doorbell that arrived after the runner's last look found the lock taken: take it over.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (qp.state.load(std::memory_order_acquire) != kSlotLive) return;
    uint32_t pending = (sq_producer(seg_, qp) - consumed) & 0xffff;
    if (pending == 0 || pending > qp.sq_bbs) return;  // nothing new (or a record gone backwards)
    if (stalled && qp.qp_state.load() != kQpsErr && !qp.retry_now.load()) return;
  }
}

Engine::Fetch Engine::fetch_wqe(QpSlot& qp, uint8_t* buf, uint32_t* bbs) {
  return fetch_wqe_at(qp, qp.sq_ci, buf, bbs);
}

// A NIC executes a WQE that came by BlueFlame from the copy it received, and fetches the others
// from the ring.
Engine::Fetch Engine::fetch_wqe_at(QpSlot& qp, uint32_t pos, uint8_t* buf, uint32_t* bbs) {
  bool bad = false;
  bool from_bf = take_bf_copy(qp, pos, buf, &bad);
  if (from_bf && bad) {
    note_fetch(seg_, qp, pos, true);
    return Fetch::bad_bf;
  }
  CtrlSeg ctrl;
  uint32_t size;
  if (from_bf) {
    std::memcpy(&ctrl, buf, sizeof ctrl);
    size = (be32(ctrl.qpn_ds) & 0x3f) * 16;  // fits the copy: checked when it arrived
  } else {
    const uint8_t* ring = seg_->at<uint8_t>(qp.sq_off);
    uint32_t idx = pos & (qp.sq_bbs - 1);
    std::memcpy(&ctrl, ring + idx * kSendWqeBB, sizeof ctrl);
    uint32_t ds = be32(ctrl.qpn_ds) & 0x3f;
    size = ds * 16;
    if (ds == 0 || size > kMaxWqeBBs * kSendWqeBB) return Fetch::stale;
    uint32_t first = std::min(size, (qp.sq_bbs - idx) * kSendWqeBB);
    std::memcpy(buf, ring + idx * kSendWqeBB, first);
    if (first < size) std::memcpy(buf + first, ring, size - first);
  }
  *bbs = (size + kSendWqeBB - 1) / kSendWqeBB;
  uint32_t wqe_idx = (be32(ctrl.opmod_idx_opcode) >> 8) & 0xffff;
  if (wqe_idx != (pos & 0xffff) || (be32(ctrl.qpn_ds) >> 8) != qp.qpn) return Fetch::stale;
  note_fetch(seg_, qp, pos, from_bf);
  return Fetch::ok;
}

void Engine::set_stall(QpSlot& qp, uint32_t kind, uint64_t delay_us) {
  uint32_t prev = qp.stall.exchange(kind);
  if (prev != kind) qp.stall_attempts = 0;
  qp.stall_since_ns = now_();
  qp.stall_delay_us = delay_us;
  if (prev == kStallNone) {
    h_->cqs[qp.send_cq].stalled_qps.fetch_add(1);
    h_->procs[qp.owner].stalled_qps.fetch_add(1);
  }
}

void Engine::clear_stall(QpSlot& qp) { emu::clear_stall(h_, qp); }

bool Engine::retry_due(QpSlot& qp) {
  if (qp.stall_delay_us == 0) return false;  // infinite timeout: only a kick retries
  return now_() - qp.stall_since_ns >= qp.stall_delay_us * 1000;
}

void Engine::run_sq(QpSlot& qp, bool force_retry) {
  alignas(64) uint8_t buf[kMaxWqeBBs * kSendWqeBB];
  for (;;) {
    if (qp.state.load(std::memory_order_acquire) != kSlotLive) return;  // destroyed meanwhile
    uint32_t pi = dbrec_checked(seg_, qp, sq_producer(seg_, qp));
    if ((qp.sq_ci & 0xffff) == pi) return;
    uint32_t state = qp.qp_state.load(std::memory_order_acquire);
    uint32_t bbs = 1;
    if (state == kQpsErr || state == kQpsSqe) {  // flush what is left
      clear_stall(qp);
      if (fetch_wqe(qp, buf, &bbs) != Fetch::ok) {
        // Not a WQE start (behind a malformed WQE): step one block and look again, so every real
        // WQE after it still gets its flush completion.
        qp.sq_ci += 1;
        continue;
      }
      auto* c = reinterpret_cast<const CtrlSeg*>(buf);
      CqeInfo info{};
      info.cqe_opcode = kCqeReqErr;
      info.syndrome = kSynWrFlush;
      info.wqe_opcode = be32(c->opmod_idx_opcode) & 0xff;
      info.wqe_counter = qp.sq_ci & 0xffff;
      info.qpn = qp.qpn;
      complete_send(qp, info, true);
      qp.sq_ci += bbs;
      continue;
    }
    // Only RTS starts new WQEs; SQD lets in-flight ones finish (ours finish as they are executed).
    if (state != kQpsRts) return;
    if (qp.stall.load() != kStallNone) {
      if (!force_retry && !retry_due(qp)) return;
      force_retry = false;
      ++qp.stall_attempts;
      qp.stall_since_ns = now_();
    }
    // Several plain RDMA WRITEs waiting (the device thread falls behind a fast poster): one copy.
    if (qp.stall.load(std::memory_order_relaxed) == kStallNone && run_write_batch(qp, pi)) continue;
    Fetch got = fetch_wqe(qp, buf, &bbs);
    if (got != Fetch::ok) {
      // What hardware does with a slot that holds no valid WQE for this index (or a BlueFlame
      // copy that does not parse): a local QP operation error, and the QP goes to ERR.
      if (got == Fetch::stale) report_stale(seg_, qp, qp.sq_ci);
      CqeInfo info{};
      info.cqe_opcode = kCqeReqErr;
      info.syndrome = kSynLocalQpOp;
      info.wqe_counter = qp.sq_ci & 0xffff;
      info.qpn = qp.qpn;
      log("QP 0x%x: malformed WQE at index %u", qp.qpn, qp.sq_ci & 0xffff);
      complete_send(qp, info, true);
      qp.sq_ci += 1;
      send_queue_error(qp);
      continue;
    }
    auto* ctrl = reinterpret_cast<const CtrlSeg*>(buf);
    CqeInfo info{};
    ExecOutcome out = execute(qp, buf, &info);
    if (out != ExecOutcome::done) {
      bool rnr = out == ExecOutcome::stall_rnr;
      uint32_t kind = rnr ? kStallRnr : kStallRetry;
      uint32_t limit = rnr ? qp.rnr_retry : qp.retry_cnt;
      bool infinite = rnr && limit == 7;
      bool exhausted = !infinite && (limit == 0 || (qp.stall.load() == kind && qp.stall_attempts >= limit));
      if (exhausted) {
        // Budget spent: the head WQE fails and the QP goes to ERR.
        clear_stall(qp);
        info = CqeInfo{};
        info.cqe_opcode = kCqeReqErr;
        info.syndrome = rnr ? kSynRnrRetryExc : kSynRetryExc;
        info.wqe_opcode = be32(ctrl->opmod_idx_opcode) & 0xff;
        info.wqe_counter = qp.sq_ci & 0xffff;
        info.qpn = qp.qpn;
        log("QP 0x%x: %s", qp.qpn, rnr ? "RNR retries exhausted" : "transport retries exhausted");
        complete_send(qp, info, true);
        qp.sq_ci += bbs;
        send_queue_error(qp);
        continue;
      }
      if (qp.stall.load() != kind) {
        uint64_t delay = rnr ? rnr_delay_us(info.rnr_timer) : transport_timeout_us(qp.timeout);
        set_stall(qp, kind, delay);
      }
      return;
    }
    clear_stall(qp);
    bool error = info.cqe_opcode == kCqeReqErr;
    complete_send(qp, info, error || (ctrl->fm_ce_se & kCtrlCqUpdate));
    qp.sq_ci += bbs;
    if (error) send_queue_error(qp);
  }
}

// Through a shared mapping a dead responder's memory still takes writes, so the liveness that a
// failed process_vm_* call would reveal is asked for once per clock tick (1-4 ms) per QP.
bool Engine::peer_still_there(QpSlot& qp, const QpSlot& r) {
  uint64_t now = coarse_ns();
  if (now - qp.peer_checked_ns < 1000000) return true;
  if (!seg_->proc_alive(r.owner)) return false;
  qp.peer_checked_ns = now;
  return true;
}

ExecOutcome Engine::execute(QpSlot& qp, const uint8_t* wqe, CqeInfo* out) {
  auto* ctrl = reinterpret_cast<const CtrlSeg*>(wqe);
  uint8_t opcode = be32(ctrl->opmod_idx_opcode) & 0xff;
  uint32_t size = (be32(ctrl->qpn_ds) & 0x3f) * 16;
  const uint8_t* p = wqe + sizeof(CtrlSeg);
  const uint8_t* end = wqe + size;
  *out = CqeInfo{};
  out->cqe_opcode = kCqeReq;
  out->wqe_opcode = opcode;
  if (opcode == kOpSendImm || opcode == kOpRdmaWriteImm) out->emu_flags = kCqeFlagImm;  // as mlx5
  out->wqe_counter = qp.sq_ci & 0xffff;
  out->qpn = qp.qpn;
  auto fail = [&](uint8_t syndrome) {
    out->cqe_opcode = kCqeReqErr;
    out->syndrome = syndrome;
    return ExecOutcome::done;
  };

  bool has_raddr = opcode == kOpRdmaWrite || opcode == kOpRdmaWriteImm || opcode == kOpRdmaRead ||
                   opcode == kOpAtomicCs || opcode == kOpAtomicFa;
  bool is_atomic = opcode == kOpAtomicCs || opcode == kOpAtomicFa;
  if (!has_raddr && opcode != kOpSend && opcode != kOpSendImm && opcode != kOpNop)
    return fail(kSynLocalQpOp);
  // What each transport carries: UD only SENDs, UC no READs or atomics.
  if (qp.type == kQptUd && has_raddr) return fail(kSynLocalQpOp);
  if (qp.type == kQptUc && (opcode == kOpRdmaRead || is_atomic)) return fail(kSynLocalQpOp);
  XrcSeg xrc{};
  if (qp.type == kQptXrcSend) {
    // emu0's XRC carries SENDs (what XRC users post); RDMA and atomics over XRC are not modelled.
    if (has_raddr) return fail(kSynLocalQpOp);
    if (p + sizeof xrc > end) return fail(kSynLocalQpOp);
    std::memcpy(&xrc, p, sizeof xrc);
    p += sizeof xrc;
  }
  AvSeg av{};
  if (qp.type == kQptUd) {
    if (p + sizeof av > end) return fail(kSynLocalQpOp);
    std::memcpy(&av, p, sizeof av);
    p += sizeof av;
  }
  RaddrSeg raddr{};
  AtomicSeg atom{};
  if (has_raddr) {
    if (p + sizeof raddr > end) return fail(kSynLocalQpOp);
    std::memcpy(&raddr, p, sizeof raddr);
    p += sizeof raddr;
  }
  if (is_atomic) {
    if (p + sizeof atom > end) return fail(kSynLocalQpOp);
    std::memcpy(&atom, p, sizeof atom);
    p += sizeof atom;
  }

  // Local gather/scatter list.
  bool local_write = opcode == kOpRdmaRead || is_atomic;
  Sges local;
  while (p + 4 <= end) {
    uint32_t bc;
    std::memcpy(&bc, p, 4);
    bc = be32(bc);
    if (bc & kInlineSegFlag) {
      uint32_t len = bc & ~kInlineSegFlag;
      if (local_write || p + 4 + len > end || local.n == kMaxSpans) return fail(kSynLocalQpOp);
      local.span[local.n++] = {reinterpret_cast<uint64_t>(p + 4), len};
      local.total += len;
      local.is_inline = true;
      p += (4 + len + 15) & ~15u;
      continue;
    }
    if (p + sizeof(DataSeg) > end) break;
    DataSeg d;
    std::memcpy(&d, p, sizeof d);
    p += sizeof d;
    uint64_t len = be32(d.byte_count) ? be32(d.byte_count) : kMaxMsgSize;
    uint64_t va;
    if (local.is_inline || local.n == kMaxSpans) return fail(kSynLocalQpOp);
    if (!translate_local(seg_, qp, be32(d.lkey), be64(d.addr), len, local_write, &va))
      return fail(kSynLocalProt);
    local.span[local.n++] = {va, len};
    local.total += len;
  }
  if (local.total > kMaxMsgSize) return fail(kSynLocalLength);
  if (is_atomic && local.total != 8) return fail(kSynLocalLength);
  out->byte_cnt = static_cast<uint32_t>(local.total);
  if (opcode == kOpNop) return ExecOutcome::done;
  int local_pid = local.is_inline ? 0 : h_->procs[qp.owner].pid;
  if (qp.type == kQptUd) return execute_ud(qp, *ctrl, av, local, local_pid, out);

  // UC has no acknowledgements: what the responder cannot take is lost, and the requester, which
  // completes once the message is on the wire, does not learn of it.
  bool unreliable = qp.type == kQptUc;
  uint32_t npk = packets(local.total, qp.path_mtu);
  auto dropped = [&]() {
    qp.sq_psn = (qp.sq_psn + npk) & 0xffffff;
    return ExecOutcome::done;
  };
  // The responder: the connected QP behind the destination LID, ready to receive.
  QpSlot* r = connected_responder(seg_, qp);
  if (!r) return unreliable ? dropped() : ExecOutcome::stall_retry;
  // A retry asks the slow question too: is the responder's process still the one that registered?
  if (qp.stall.load(std::memory_order_relaxed) != kStallNone && !seg_->proc_alive(r->owner))
    return ExecOutcome::stall_retry;
  raise_comm_est(*r);
  int remote_pid = h_->procs[r->owner].pid;
  uint16_t my_lid = h_->devices[qp.dev].ports[qp.port - 1].lid;
  auto responder_error = [&](uint8_t req_syndrome, uint32_t event) {
    if (unreliable) return dropped();  // UC: the packet is silently dropped (no NAK)
    enter_error(*r);  // before the event: whoever reads it finds the QP in ERR
    raise_qp_event(*r, event);
    return fail(req_syndrome);
  };
  auto gone = [&]() { return unreliable ? dropped() : ExecOutcome::stall_retry; };

  if (opcode == kOpRdmaWrite || opcode == kOpRdmaWriteImm || opcode == kOpRdmaRead) {
    uint64_t va = 0;
    const MrSlot* rmr = nullptr;
    uint32_t need = opcode == kOpRdmaRead ? kAccessRemoteRead : kAccessRemoteWrite;
    // A zero-length transfer carries no R_Key check.
    if (local.total && !translate_remote(seg_, *r, be32(raddr.rkey), be64(raddr.raddr),
                                         local.total, need, &va, &rmr))
      return responder_error(kSynRemoteAccess, kEvQpAccessErr);
    // Through a shared mapping of the target's pages when there is one (EMU_SHARED_MR).
    int rpid = remote_pid;
    if (uint64_t w = local.total ? shared_window(seg_, *rmr, va, local.total) : 0) {
      if (!peer_still_there(qp, *r)) return gone();
      va = w;
      rpid = 0;
    }
    bool imm = opcode == kOpRdmaWriteImm;
    RecvRef rq = recv_of(*r);
    if (imm) recv_lock(rq);
    if (imm && recv_empty_wait(qp, rq)) {
      recv_unlock(rq);
      if (unreliable) return dropped();
      out->rnr_timer = r->min_rnr_timer;
      return ExecOutcome::stall_rnr;
    }
    CopyResult cr = CopyResult::ok;
    if (local.total) {
      MemSpan remote{va, local.total};
      cr = opcode == kOpRdmaRead ? dma_copy(rpid, &remote, 1, local_pid, local.span, local.n)
                                 : dma_copy(local_pid, local.span, local.n, rpid, &remote, 1);
    }
    if (cr != CopyResult::ok) {
      if (imm) recv_unlock(rq);
      bool remote_side = opcode == kOpRdmaRead ? (cr == CopyResult::src_gone || cr == CopyResult::src_fault)
                                               : (cr == CopyResult::dst_gone || cr == CopyResult::dst_fault);
      if (cr == CopyResult::src_gone || cr == CopyResult::dst_gone) {
        if (remote_side) return gone();
      }
      if (remote_side) return responder_error(kSynRemoteAccess, kEvQpAccessErr);
      return fail(kSynLocalProt);
    }
    qp.sq_psn = (qp.sq_psn + npk) & 0xffffff;
    r->rq_psn = (r->rq_psn + npk) & 0xffffff;
    if (imm) {
      CqeInfo rc{};
      uint32_t seg_bytes;
      recv_head(rq, &seg_bytes, &rc.wqe_counter);
      rc.cqe_opcode = kCqeRespWrImm;
      rc.qpn = r->qpn;
      rc.src_qpn = qp.qpn;
      rc.slid = my_lid;
      rc.byte_cnt = static_cast<uint32_t>(local.total);
      rc.imm_be = ctrl->imm;
      rc.emu_flags = kCqeFlagImm | ((ctrl->fm_ce_se & kCtrlSolicited) ? kCqeFlagSolicited : 0);
      recv_consume(rq);
      recv_unlock(rq);
      write_cqe(h_->cqs[r->recv_cq], rc);
    }
    return ExecOutcome::done;
  }

  if (is_atomic) {
    uint64_t va;
    const MrSlot* rmr = nullptr;
    if (be64(raddr.raddr) & 7) return responder_error(kSynRemoteInvalReq, kEvQpReqErr);
    if (!translate_remote(seg_, *r, be32(raddr.rkey), be64(raddr.raddr), 8, kAccessRemoteAtomic, &va,
                          &rmr))
      return responder_error(kSynRemoteAccess, kEvQpAccessErr);
    int apid = remote_pid;
    if (uint64_t w = shared_window(seg_, *rmr, va, 8)) {
      if (!peer_still_there(qp, *r)) return ExecOutcome::stall_retry;
      va = w;
      apid = 0;
    }
    uint64_t old = 0;
    CopyResult cr;
    {
      ShmLockGuard g(h_->atomic_lock, seg_->self());
      cr = dma_read64(apid, va, &old);
      if (cr == CopyResult::ok) {
        uint64_t v = old;
        if (opcode == kOpAtomicFa) v = old + be64(atom.swap_add);
        else if (old == be64(atom.compare)) v = be64(atom.swap_add);
        if (v != old) cr = dma_write64(apid, va, v);
      }
    }
    if (cr == CopyResult::src_gone || cr == CopyResult::dst_gone) return ExecOutcome::stall_retry;
    if (cr != CopyResult::ok) return responder_error(kSynRemoteAccess, kEvQpAccessErr);
    MemSpan src{reinterpret_cast<uint64_t>(&old), 8};
    if (dma_copy(0, &src, 1, local_pid, local.span, local.n) != CopyResult::ok)
      return fail(kSynLocalProt);
    qp.sq_psn = (qp.sq_psn + 1) & 0xffffff;
    r->rq_psn = (r->rq_psn + 1) & 0xffffff;
    return ExecOutcome::done;
  }

  // SEND / SEND_WITH_IMM: consume the responder's next receive WQE (its own queue or its SRQ).
  RecvRef rq;
  if (!recv_of(*r, be32(xrc.xrc_srqn), &rq)) {
    // No such SRQ in the TGT QP's domain: the responder NAKs an invalid request.
    return responder_error(kSynRemoteInvalReq, kEvQpReqErr);
  }
  if (rq.srq && rq.srq->xrcd_ref) remote_pid = recv_pid(rq);  // the SRQ's process takes the data
  recv_lock(rq);
  if (recv_empty_wait(qp, rq)) {
    recv_unlock(rq);
    if (unreliable) return dropped();
    out->rnr_timer = r->min_rnr_timer;
    return ExecOutcome::stall_rnr;
  }
  CqeInfo rc{};
  uint32_t seg_bytes;
  const uint8_t* rwqe = recv_head(rq, &seg_bytes, &rc.wqe_counter);
  Sges scatter;
  bool addr_is_va = true;  // the receiver can scatter from its own WQE (no iova offset)
  bool prot_ok = recv_scatter(rq, rwqe, seg_bytes, &scatter, &addr_is_va);
  rc.qpn = r->qpn;
  bool xrc_srq = rq.srq && rq.srq->xrcd_ref;
  if (xrc_srq) rc.srqn = rq.srq->srqn;
  rc.src_qpn = qp.qpn;
  rc.slid = my_lid;
  uint8_t resp_syndrome = 0;
  if (!prot_ok) resp_syndrome = kSynLocalProt;
  else if (scatter.total < local.total) resp_syndrome = kSynLocalLength;
  // Shared windows (EMU_SHARED_MR) into the receive buffers, used only if all of it has them.
  uint64_t window[kMaxSpans];
  bool all_windows = prot_ok && (local.total > kCqeInlineMax || !addr_is_va);
  for (int i = 0; all_windows && i < scatter.n; ++i) {
    const MrSlot* smr = nullptr;
    uint64_t va = 0;
    // The key was checked by recv_scatter; look the MR up again for its window.
    uint64_t len = std::min<uint64_t>(scatter.span[i].len, local.total);
    DataSeg d;
    std::memcpy(&d, rwqe + i * sizeof d, sizeof d);
    bool ok = xrc_srq ? translate_key(seg_, rq.srq->pd, rq.srq->owner, be32(d.lkey), be64(d.addr),
                                      len, true, &va, &smr)
                      : translate_local(seg_, *r, be32(d.lkey), be64(d.addr), len, true, &va, &smr);
    window[i] = ok && smr ? shared_window(seg_, *smr, va, len) : 0;
    if (!window[i]) all_windows = false;
  }
  if (!resp_syndrome && local.total && local.total <= kCqeInlineMax && addr_is_va && !xrc_srq &&
      remote_pid != seg_->pid()) {
    // Scatter-to-CQE: the payload rides in the receive CQE, one line for the receiver to read;
    // its poll copies it into the buffers of its own receive WQE (checked here, as the device does).
    MemSpan cqe_data{reinterpret_cast<uint64_t>(rc.inline_data), local.total};
    if (dma_copy(local_pid, local.span, local.n, 0, &cqe_data, 1) != CopyResult::ok) {
      recv_unlock(rq);
      return fail(kSynLocalProt);
    }
    rc.inline_scatter = true;
  } else if (!resp_syndrome && local.total && all_windows && remote_pid != seg_->pid() &&
             peer_still_there(qp, *r)) {
    // Straight into the receive buffer through shared mappings (EMU_SHARED_MR).
    Sges direct = scatter;
    uint64_t left = local.total;
    for (int i = 0; i < direct.n; ++i) {
      direct.span[i].addr = window[i];
      if (direct.span[i].len > left) direct.span[i].len = left;
      left -= direct.span[i].len;
    }
    if (dma_copy(local_pid, local.span, local.n, 0, direct.span, direct.n) != CopyResult::ok) {
      recv_unlock(rq);
      return fail(kSynLocalProt);
    }
  } else if (!resp_syndrome && local.total) {
    CopyResult cr = dma_copy(local_pid, local.span, local.n, remote_pid, scatter.span, scatter.n);
    if (cr == CopyResult::dst_gone) {
      recv_unlock(rq);
      return gone();
    }
    if (cr == CopyResult::src_fault || cr == CopyResult::src_gone) {
      recv_unlock(rq);
      return fail(kSynLocalProt);
    }
    if (cr == CopyResult::dst_fault) resp_syndrome = kSynLocalProt;
  }
  recv_consume(rq);
  recv_unlock(rq);
  if (resp_syndrome) {
    rc.cqe_opcode = kCqeRespErr;
    rc.syndrome = resp_syndrome;
    write_cqe(recv_cq(rq), rc);
    enter_error(*r);
    if (unreliable) return dropped();
    return fail(resp_syndrome == kSynLocalLength ? kSynRemoteInvalReq : kSynRemoteOp);
  }
  rc.cqe_opcode = opcode == kOpSendImm ? kCqeRespSendImm : kCqeRespSend;
  rc.byte_cnt = static_cast<uint32_t>(local.total);
  rc.imm_be = ctrl->imm;
  rc.emu_flags = (opcode == kOpSendImm ? kCqeFlagImm : 0) |
                 ((ctrl->fm_ce_se & kCtrlSolicited) ? kCqeFlagSolicited : 0);
  qp.sq_psn = (qp.sq_psn + npk) & 0xffffff;
  r->rq_psn = (r->rq_psn + npk) & 0xffffff;
  write_cqe(recv_cq(rq), rc);
  return ExecOutcome::done;
}

// IBV_EVENT_COMM_EST: the first packet reaching a QP still in RTR (once per connection).
void Engine::raise_comm_est(QpSlot& r) {
  if (r.qp_state.load(std::memory_order_relaxed) != kQpsRtr) return;
  if (r.comm_est.load(std::memory_order_relaxed) || r.comm_est.exchange(1)) return;
  raise_qp_event(r, kEvCommEst);
}

void Engine::complete_send(QpSlot& qp, const CqeInfo& info, bool signaled) {
  if (signaled) write_cqe(h_->cqs[qp.send_cq], info);
}

void Engine::write_cqe(CqSlot& cq, const CqeInfo& info) {
  if (cq.overrun.load(std::memory_order_relaxed)) return;  // a CQ in error takes no more
  uint32_t pi = cq.pi.fetch_add(1, std::memory_order_relaxed);
  // The consumer's index is read only when the cached one says the ring may be full.
  if (pi - cq.ci_seen.load(std::memory_order_relaxed) >= cq.cqe_cnt)
    cq.ci_seen.store(cq.ci.load(std::memory_order_acquire), std::memory_order_relaxed);
  if (pi - cq.ci_seen.load(std::memory_order_relaxed) >= cq.cqe_cnt) {
    // The CQ is full: the completion cannot be placed. As a NIC does: the CQ enters error
    // (IBV_EVENT_CQ_ERR to its owner) and so does every QP completing into it.
    if (!cq.overrun.exchange(1)) {
      log("CQ overrun (cqe count %u)", cq.cqe_cnt);
      if (cq.ctx < kMaxContexts) notify_async(h_->ctxs[cq.ctx], cq.uid, kEvCqErr);
      uint32_t idx = static_cast<uint32_t>(&cq - h_->cqs);
      for (QpSlot& q : h_->qps)
        if (q.state.load(std::memory_order_acquire) == kSlotLive &&
            (q.send_cq == idx || q.recv_cq == idx) && q.qp_state.load() != kQpsErr) {
          enter_error(q);  // before the event: whoever reads it finds the QP in ERR
          raise_qp_event(q, kEvQpFatal);
        }
    }
    return;
  }
  Cqe64* ring = seg_->at<Cqe64>(cq.buf_off);
  Cqe64& c = ring[pi & (cq.cqe_cnt - 1)];
  bool err = info.cqe_opcode == kCqeReqErr || info.cqe_opcode == kCqeRespErr;
  // Written field by field into the ring (the owner byte last): composing the CQE on the stack and
  // copying it reads back narrow stores as wide loads, a store-forwarding stall per CQE.
  std::memset(&c, 0, offsetof(Cqe64, op_own));
  c.emu_flags = info.emu_flags;
  if (info.inline_scatter) {
    std::memcpy(&c, info.inline_data, info.byte_cnt);
  } else {
    c.slid = be16(info.slid);
    c.flags_rqpn = be32(info.src_qpn);
  }
  c.imm_inval_pkey = info.imm_be;
  c.srqn_uidx = be32(info.srqn);
  c.byte_cnt = be32(info.byte_cnt);
  if (cq.stamp) c.timestamp = be64(now_());
  c.sop_drop_qpn = be32((uint32_t(info.wqe_opcode) << 24) | (info.qpn & 0xffffff));
  c.wqe_counter = be16(info.wqe_counter);
  c.qp_gen = static_cast<uint16_t>(
      h_->qps[info.qpn & (kMaxQps - 1)].incarnation.load(std::memory_order_relaxed));
  if (err) {
    auto* e = reinterpret_cast<ErrCqe*>(&c);
    e->syndrome = info.syndrome;
    e->vendor_err_synd = info.syndrome;
  }
  uint8_t owner = (pi >> cq.log_cqe_cnt) & 1;
  uint8_t inline_bit = info.inline_scatter ? kCqeInlineScatter32 : 0;
  cqe_publish(&c.op_own, static_cast<uint8_t>(info.cqe_opcode << 4 | inline_bit | owner));
  if (cq.chan_wfd < 0) return;  // no completion channel: an armed CQ has nowhere to signal
  // Store CQE, then load the arm state; the driver stores the arm state, then loads the CQE. Without a
  // full fence on both sides each could miss the other and the event would be lost.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t arm = cq.arm.load(std::memory_order_acquire);
  if (arm == 1 || (arm == 2 && (err || (info.emu_flags & kCqeFlagSolicited)))) {
    if (cq.arm.exchange(0) != 0) notify_comp(cq);
  }
}

void Engine::flush_rq(QpSlot& qp) {
  if (qp.srq_ref) return;  // an SRQ's WQEs are not this QP's to flush
  EngineSection in_engine(seg_);
  ShmLockGuard g(qp.rq_lock, seg_->self());
  uint32_t pi = rq_producer(seg_, qp);
  while ((qp.rq_ci & 0xffff) != pi) {
    CqeInfo info{};
    info.cqe_opcode = kCqeRespErr;
    info.syndrome = kSynWrFlush;
    info.wqe_counter = qp.rq_ci & 0xffff;
    info.qpn = qp.qpn;
    write_cqe(h_->cqs[qp.recv_cq], info);
    ++qp.rq_ci;
  }
}

void Engine::enter_error(QpSlot& qp) {
  EngineSection in_engine(seg_);
  qp.qp_state.store(kQpsErr, std::memory_order_release);
  flush_rq(qp);
  kick_sq(qp);  // flushes the send queue unless this thread already runs it (then its loop does)
  // A QP on an SRQ takes no more of its WQEs once in ERR: the owner learns it may destroy it.
  if (qp.srq_ref && !qp.last_wqe.exchange(1)) raise_qp_event(qp, kEvLastWqe);
  uint32_t waiter = qp.rnr_waiter.exchange(0);
  if (waiter) {
    if (QpSlot* w = seg_->find_qp(waiter - 1)) kick_sq(*w);
  }
}

// A send completed in error. RC: the whole QP goes to ERR. UC and UD: only the send queue stops
// (SQE, IBTA 10.3.1): what is left in it is flushed, receives go on, and ibv_modify_qp can take the
// QP back to RTS.
void Engine::send_queue_error(QpSlot& qp) {
  if (qp.type == kQptRc) {
    enter_error(qp);
    return;
  }
  uint32_t st = qp.qp_state.load();
  if (st != kQpsErr) qp.qp_state.compare_exchange_strong(st, kQpsSqe);
}

void Engine::raise_qp_event(const QpSlot& qp, uint32_t type) {
  if (qp.type == kQptXrcRecv) {
    // A TGT QP's events go to every handle to it, in whichever process holds one.
    for_each_tgt_handle(seg_, static_cast<uint32_t>(&qp - h_->qps), [&](const XrcHandle& x) {
      if (x.ctx < kMaxContexts) notify_async(h_->ctxs[x.ctx], x.uid, type);
    });
    return;
  }
  if (qp.ctx < kMaxContexts) notify_async(h_->ctxs[qp.ctx], qp.uid, type);
}

}  // namespace emu
