// SPDX-License-Identifier: BSD-2-Clause
#include "device/engine.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "device/doorbell.h"
#include "device/engine_internal.h"
#include "dma/memory.h"
#include "dma/shared_map.h"
#include "emu/barriers.h"
#include "emu/kill_point.h"
#include "emu/notify.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/small_copy.h"
#include "emu/xrc.h"
#include "wire/pcap.h"

namespace emu {
using namespace engine_detail;
namespace {

template <clockid_t kClock>
uint64_t clock_ns() {
  timespec ts;
  clock_gettime(kClock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The clock tick the kernel last counted (1-4 ms resolution): a few ns to read where the precise
// clock costs 26 ns here, for checks asked per message that only need to run every millisecond
// or so.
uint64_t coarse_ns() { return clock_ns<CLOCK_MONOTONIC_COARSE>(); }

// The IBTA RNR timer encoding, in microseconds (code 0 is the longest, 655.36 ms).
const uint32_t kRnrUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                             160,    240,   320,   480,    640,    960,    1280,   1920,
                             2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                             40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};

}  // namespace

Engine::Engine(Segment* seg)
    : seg_(seg), h_(seg->hdr()), now_(clock_ns<CLOCK_MONOTONIC>), pcap_(wire::Pcap::from_env()) {
  // EMU_FAULTS: every process that has it sets the same rules (the last one's win).
  if (const char* text = std::getenv("EMU_FAULTS"); text && *text) {
    // Set only if they differ, so that a later process does not zero the counters of a run.
    FaultRules rules;
    std::string err;
    if (faults_parse(text, &rules, &err) != Status::ok)
      log("EMU_FAULTS: %s (ignored)", err.c_str());
    else if (faults_format(rules) != faults_format(faults_get(seg)))
      faults_set(seg, rules);
  }
}

Engine* Engine::process_engine() {
  static Engine* e = new Engine(Segment::get());  // lives as long as the process
  return e;
}

uint64_t Engine::rnr_delay_us(uint8_t code) { return kRnrUs[code & 31]; }

uint64_t Engine::transport_timeout_us(uint8_t timeout) {
  if (timeout == 0) return 0;  // infinite
  // EMU_ACK_TIMEOUT_SCALE shortens (or stretches) every QP's timeout, for tests of retries.
  static const double scale = knob_number("EMU_ACK_TIMEOUT_SCALE");
  uint64_t us = (4096ull << std::min<uint8_t>(timeout, 31)) / 1000;
  return std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(us) * scale));
}

void Engine::on_doorbell(uint64_t ctrl_head) {
  EngineSection in_engine(seg_);
  CtrlSeg ctrl;
  std::memcpy(&ctrl, &ctrl_head, 8);
  uint32_t qpn = ctrl_qpn(ctrl);
  QpSlot* qp = seg_->find_qp(qpn);
  if (!qp) {
    log("doorbell for unknown QP 0x%x ignored", qpn);
    return;
  }
  run_or_leave(*qp);  // inside this section
}

void Engine::kick_sq(QpSlot& qp, bool force_retry) {
  // A forced retry is a flag on the QP, so that a runner already inside (which this call cannot
  // join) still honours it.
  if (force_retry) qp.retry_now.store(1, std::memory_order_seq_cst);
  EngineSection in_engine(seg_);
  run_or_leave(qp);
}

void Engine::run_or_leave(QpSlot& qp) {
  for (;;) {
    uint32_t consumed;
    bool stalled;
    {
      ShmTryLockGuard runner(qp.sq_engine, seg_->self());
      if (!runner.owns()) return;  // the runner re-checks for us
      if (runner.took_over()) [[unlikely]]
        stop_if_owner_died(qp);
      EMU_KILL_POINT(KillPoint::engine_lock);
      // A load first: an exchange per doorbell would be one more full barrier per post.
      run_sq(qp,
             qp.retry_now.load(std::memory_order_relaxed) != 0 && qp.retry_now.exchange(0) != 0);
      consumed = qp.sq_ci & 0xffff;  // read under the lock: sq_ci changes only there
      stalled = qp.stall.load() != kStallNone;
    }
    // A doorbell that arrived after the runner's last look found the lock taken: take it over.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (qp.state.load(std::memory_order_acquire) != kSlotLive) return;
    uint32_t pending = (sq_producer(seg_, qp) - consumed) & 0xffff;
    if (pending == 0 || pending > qp.sq_bbs) return;  // nothing new (or a record gone backwards)
    if (stalled && qp.qp_state.load() != kQpsErr && !qp.retry_now.load()) return;
  }
}

// The runner before this one died inside qp's send queue, perhaps in the middle of its head WQE
// (a SEND delivered and its receive completed, the send not yet). If the one that died is the
// QP's owner, the QP is gone as the kernel destroys a dead process's QPs: it goes to ERR, so that
// what is left is flushed instead of run (running the head again would deliver it twice). A live
// owner's queue goes on from its head (docs/design/reliability.md, "Process death").
void Engine::stop_if_owner_died(QpSlot& qp) {
  if (proc_slot_alive(qp.owner)) return;
  log("QP 0x%x: its owner died running it: nothing more leaves it", qp.qpn);
  qp.qp_state.store(kQpsErr, std::memory_order_release);
}

// A NIC executes a WQE that came by BlueFlame from the copy it received, and fetches the others
// from the ring.
Engine::Fetch Engine::fetch_wqe_general(QpSlot& qp, uint32_t pos, uint8_t* buf, uint32_t* bbs) {
  bool bad = false;
  bool from_bf = bf_copy_waiting(qp) && take_bf_copy(qp, pos, buf, &bad);
  if (from_bf && bad) {
    note_fetch(seg_, qp, pos, true);
    return Fetch::bad_bf;
  }
  CtrlSeg ctrl;
  uint32_t size;
  if (from_bf) {
    std::memcpy(&ctrl, buf, sizeof ctrl);
    size = ctrl_size(ctrl);  // fits the copy: checked when it arrived
  } else {
    const uint8_t* ring = seg_->at<uint8_t>(qp.sq_off);
    uint32_t idx = pos & (qp.sq_bbs - 1);
    uint64_t at = qp.sq_off + idx * kSendWqeBB;
    std::memcpy(&ctrl, ring + idx * kSendWqeBB, sizeof ctrl);
    sched::device_view(at, &ctrl, sizeof ctrl);  // a scheduled run's undrained stores hidden
    size = ctrl_size(ctrl);
    if (size == 0 || size > kMaxWqeBBs * kSendWqeBB) return Fetch::stale;
    uint32_t first = std::min(size, (qp.sq_bbs - idx) * kSendWqeBB);
    std::memcpy(buf, ring + idx * kSendWqeBB, first);
    sched::device_view(at, buf, first);
    if (first < size) {
      std::memcpy(buf + first, ring, size - first);
      sched::device_view(qp.sq_off, buf + first, size - first);
    }
  }
  *bbs = (size + kSendWqeBB - 1) / kSendWqeBB;
  if (ctrl_wqe_index(ctrl) != (pos & 0xffff) || ctrl_qpn(ctrl) != qp.qpn) return Fetch::stale;
  note_fetch(seg_, qp, pos, from_bf);
  return Fetch::ok;
}

void Engine::set_stall(QpSlot& qp, uint32_t kind, uint64_t delay_us) {
  uint32_t prev = qp.stall.exchange(kind);
  if (prev != kind) qp.stall_attempts = 0;
  qp.stall_since_ns = timer_now();
  qp.stall_delay_us = delay_us;
  if (prev == kStallNone) {
    cq_slot(h_, qp.send_cq).stalled_qps.fetch_add(1);
    h_->procs[qp.owner].stalled_qps.fetch_add(1);
  }
}

void Engine::clear_stall(QpSlot& qp) { emu::clear_stall(h_, qp); }

uint64_t Engine::timer_now() const {
  if (sched::scheduled()) return now();
  // The hold first: once it reads 0, the total includes the hold that just ended.
  uint64_t since = h_->timers_held_since.load(std::memory_order_acquire);
  uint64_t held = h_->timers_held_ns.load(std::memory_order_acquire);
  return (since ? since : now_()) - held;
}

bool Engine::retry_due(QpSlot& qp) {
  if (qp.stall_delay_us == 0) return false;  // infinite timeout: only a kick retries
  // A reader that met a hold's end half way can see its clock a moment behind a stall's start:
  // not due.
  uint64_t t = timer_now();
  return t >= qp.stall_since_ns && t - qp.stall_since_ns >= qp.stall_delay_us * 1000;
}

void Engine::run_sq(QpSlot& qp, bool force_retry) {
  alignas(64) uint8_t buf[kMaxWqeBBs * kSendWqeBB];
  for (;;) {
    if (qp.state.load(std::memory_order_acquire) != kSlotLive) return;  // destroyed meanwhile
    uint32_t pi = step_fetch_dbrec(qp);
    // Done when the consumer reached the producer, or passed it: a WQE whose blocks overran the
    // record (racing posters wrote it) must not send the flush loop round the 16-bit ring again.
    if (static_cast<int16_t>(pi - qp.sq_ci) <= 0) return;
    uint32_t state = qp.qp_state.load(std::memory_order_acquire);
    if (state == kQpsErr || state == kQpsSqe) {
      flush_head(qp, buf);
      continue;
    }
    // Only RTS starts new WQEs; SQD lets in-flight ones finish (ours finish as they are executed).
    if (state != kQpsRts) return;
    if (qp.stall.load() != kStallNone && !retry_now(qp, &force_retry)) return;
    // Several plain RDMA WRITEs waiting (the device thread falls behind a fast poster): one copy.
    if (qp.stall.load(std::memory_order_relaxed) == kStallNone && !wire_on() && !inject_on() &&
        run_may_form(qp, pi) && step_execute_writes(qp, pi))
      continue;
    uint32_t bbs = 1;
    Fetch got = step_fetch_wqe(qp, buf, &bbs);
    if (got != Fetch::ok) {
      fail_malformed(qp, got);
      continue;
    }
    if (inject_on() && inject_head(qp, buf, bbs)) continue;
    const CtrlSeg& ctrl = *reinterpret_cast<const CtrlSeg*>(buf);
    CqeInfo info;
    ExecOutcome out = step_execute(qp, buf, &info);
    if (out != ExecOutcome::done) {
      if (stall_or_fail(qp, out, info, ctrl_opcode(ctrl), bbs)) continue;
      return;
    }
    clear_stall(qp);
    step_complete(qp, info, ctrl_signaled(ctrl), bbs);
    // The record read is used up: kick_sq reads it again once the runner's lock is down and runs
    // again if more came, so it is not read here a second time. (A scheduled run reads it here:
    // each read is a step of its own.)
    if (static_cast<int16_t>(pi - qp.sq_ci) <= 0 && !sched::scheduled()) return;
  }
}

void Engine::flush_head(QpSlot& qp, uint8_t* buf) {
  clear_stall(qp);
  uint32_t bbs = 1;
  if (step_fetch_wqe(qp, buf, &bbs) != Fetch::ok) {
    // Not a WQE start (behind a malformed WQE): step one block and look again, so every real WQE
    // after it still gets its flush completion.
    qp.sq_ci += 1;
    return;
  }
  uint8_t opcode = ctrl_opcode(*reinterpret_cast<const CtrlSeg*>(buf));
  step_complete(qp, error_cqe(kCqeReqErr, kSynWrFlush, qp, qp.sq_ci, opcode), true, bbs);
}

// What hardware does with a slot that holds no valid WQE for this index (or a BlueFlame copy that
// does not parse): a local QP operation error, and the QP goes to ERR.
void Engine::fail_malformed(QpSlot& qp, Fetch got) {
  if (got == Fetch::stale) report_stale(seg_, qp, qp.sq_ci);
  log("QP 0x%x: malformed WQE at index %u", qp.qpn, qp.sq_ci & 0xffff);
  step_complete(qp, error_cqe(kCqeReqErr, kSynLocalQpOp, qp, qp.sq_ci), true, 1);
}

bool Engine::retry_now(QpSlot& qp, bool* force_retry) {
  if (!*force_retry && !retry_due(qp)) return false;
  *force_retry = false;
  ++qp.stall_attempts;
  qp.stall_since_ns = timer_now();
  return true;
}

bool Engine::stall_or_fail(QpSlot& qp, ExecOutcome out, const CqeInfo& info, uint8_t wqe_opcode,
                           uint32_t bbs) {
  bool rnr = out == ExecOutcome::stall_rnr;
  uint32_t kind = rnr ? kStallRnr : kStallRetry;
  uint32_t limit = rnr ? qp.rnr_retry : qp.retry_cnt;
  bool infinite = rnr && limit == 7;
  bool exhausted =
      !infinite && (limit == 0 || (qp.stall.load() == kind && qp.stall_attempts >= limit));
  if (!exhausted) {
    if (qp.stall.load() != kind) {
      uint64_t delay = rnr ? rnr_delay_us(info.rnr_timer) : transport_timeout_us(qp.timeout);
      set_stall(qp, kind, delay);
    }
    return false;
  }
  // Budget spent: the head WQE fails and the QP goes to ERR.
  clear_stall(qp);
  log("QP 0x%x: %s", qp.qpn, rnr ? "RNR retries exhausted" : "transport retries exhausted");
  uint8_t syndrome = rnr ? kSynRnrRetryExc : kSynRetryExc;
  step_complete(qp, error_cqe(kCqeReqErr, syndrome, qp, qp.sq_ci, wqe_opcode), true, bbs);
  return true;
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

void Engine::raise_comm_est_once(QpSlot& r) {
  if (r.comm_est.load(std::memory_order_relaxed) || r.comm_est.exchange(1)) return;
  raise_qp_event(r, kEvCommEst);
}

// A CQE that names bytes in the CQ's staging area: they are released if the CQE is not placed.
void Engine::write_staged_cqe(CqSlot& cq, const CqeInfo& info) {
  if (info.cqe_opcode == kCqeRespErr) {
    // Staged, then failed at the responder (a SEND with invalidate naming a bad key): no payload.
    release_staged(cq, info);
    CqeInfo bare = info;
    bare.staged = false;
    bare.emu_flags &= static_cast<uint8_t>(~kCqeFlagStaged);
    return write_cqe(cq, bare);
  }
  if (step_write_cqe(cq, info))
    step_raise_event(cq, info);
  else
    release_staged(cq, info);
}

inline void Engine::fill_cqe(CqSlot& cq, uint64_t ring_word, uint32_t pi, const CqeInfo& info,
                             const QpSlot* qp) {
  uint32_t log_cnt = cq_ring_log(ring_word);
  Cqe64& c =
      cq_entry(seg_->at<uint8_t>(cq_ring_off(ring_word)), pi, log_cnt, cq_log_entry(cq.format));
  bool err = info.cqe_opcode == kCqeReqErr || info.cqe_opcode == kCqeRespErr;
  // Written field by field into the ring (the owner byte last): composing the CQE on the stack and
  // copying it reads back narrow stores as wide loads, a store-forwarding stall per CQE.
  std::memset(&c, 0, offsetof(Cqe64, op_own));
  c.emu_flags = info.emu_flags;
  if (info.inline_scatter) {
    copy_small(&c, info.inline_data, info.byte_cnt);
  } else {
    if (info.staged) std::memcpy(&c, &info.staged_ref, sizeof info.staged_ref);
    c.slid = be16(info.slid);
    c.flags_rqpn = be32(info.src_qpn);
  }
  if (info.tm_op) [[unlikely]] {
    CqeTmInfo tm{be64(info.tm_tag), be32(info.tm_app_ctx)};
    std::memcpy(&c, &tm, sizeof tm);
    c.app_op = info.tm_op;
  }
  c.imm_inval_pkey = info.imm_be;
  c.srqn_uidx = be32(info.srqn);
  c.byte_cnt = be32(info.byte_cnt);
  if (cq.stamp) c.timestamp = be64(now());
  cqe_set_opcode_qpn(c, info.wqe_opcode, info.qpn);
  c.wqe_counter = be16(info.wqe_counter);
  // The slot of the QP the CQE names: the caller's, or found by the number's index.
  const QpSlot& named = qp && qp->qpn == info.qpn ? *qp : qp_slot(h_, info.qpn & (kMaxQps - 1));
  c.qp_gen = static_cast<uint16_t>(named.incarnation.load(std::memory_order_relaxed));
  if (err) {
    auto* e = reinterpret_cast<ErrCqe*>(&c);
    e->syndrome = info.syndrome;
    e->vendor_err_synd = info.vendor_err ? info.vendor_err : info.syndrome;
  }
  uint8_t owner = (pi >> log_cnt) & 1;
  uint8_t inline_bit = info.inline_scatter ? kCqeInlineScatter32 : 0;
  cqe_publish(&c.op_own, static_cast<uint8_t>(info.cqe_opcode << 4 | inline_bit | owner));
}

bool Engine::step_write_cqe(CqSlot& cq, const CqeInfo& info, const QpSlot* qp,
                            std::atomic<uint64_t>* owed) {
  sched::point(sched::kPointDevCqe, info.qpn, info.wqe_counter);
  // A CQ in error takes no more; one an injection armed takes this CQE as full (kCqOverrunArmed).
  if (uint32_t o = cq.overrun.load(std::memory_order_relaxed)) {
    if (o == kCqOverrunArmed) {
      log("CQ %u: injected overrun", cq.index);
      cq_error(cq);
    }
    return false;
  }
  // One load of the ring this CQE goes to (a resize switches it; resize_cq waits for this
  // engine section to close before it moves what the old ring holds).
  uint64_t ring_word = cq.ring.load(std::memory_order_acquire);
  uint32_t capacity = 1u << cq_ring_log_capacity(ring_word);
  uint32_t pi = cq.pi.fetch_add(1, std::memory_order_relaxed);
  if (owed) {
    owed->store(recv_owed(pi, info.qpn), std::memory_order_relaxed);
    EMU_KILL_POINT(KillPoint::recv_cqe_slot);
  }
  // The consumer's index is read only when the cached one says the ring may be full; the full
  // verdict is the index just read (another producer may store an older one into the cache).
  // The index is the consumer's word that it has read every CQE below it (its release store, the
  // CQ doorbell record a NIC reads), and it is what lets this producer overwrite the slot a lap
  // back: a producer that trusts the cache must see those reads as done, so the cache carries the
  // acquire on to it (release store, acquire load; plain moves on x86, as a NIC's cached copy of
  // the doorbell record in its CQ context is ordered after the DMA read that filled it).
  if (pi - cq.ci_seen.load(std::memory_order_acquire) >= capacity &&
      !(cq.format & kCqFormatIgnoreOverrun)) [[unlikely]] {
    uint32_t ci = cq_consumer_index(cq, pi);
    cq.ci_seen.store(ci, std::memory_order_release);
    if (pi - ci >= capacity) {
      // The CQ is full: the completion cannot be placed. As a NIC does: the CQ enters error
      // (IBV_EVENT_CQ_ERR to its owner) and so does every QP completing into it.
      log("CQ overrun (cqe count %u)", capacity);
      cq_error(cq);
      return false;
    }
  }
  fill_cqe(cq, ring_word, pi, info, qp);
  return true;
}

void Engine::cq_error(CqSlot& cq) {
  if (cq.overrun.exchange(kCqOverrunDone) == kCqOverrunDone) return;  // once
  EngineSection in_engine(seg_);
  if (cq.ctx < kMaxContexts) notify_async(h_->ctxs[cq.ctx], cq.uid, kEvCqErr);
  uint32_t idx = cq.index;
  each_qp(h_, [&](QpSlot& q) {
    if (q.state.load(std::memory_order_acquire) == kSlotLive &&
        (q.send_cq == idx || q.recv_cq == idx) && q.qp_state.load() != kQpsErr) {
      enter_error(q);  // before the event: whoever reads it finds the QP in ERR
      raise_qp_event(q, kEvQpFatal);
    }
  });
}

void Engine::raise_if_armed(CqSlot& cq, const CqeInfo& info) {
  // Store CQE, then load the arm state; the driver stores the arm state, then loads the CQE.
  // Without a full fence on both sides each could miss the other and the event would be lost.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t arm = cq.arm.load(std::memory_order_acquire);
  bool err = info.cqe_opcode == kCqeReqErr || info.cqe_opcode == kCqeRespErr;
  if (arm == kCqArmNext ||
      (arm == kCqArmSolicited && (err || (info.emu_flags & kCqeFlagSolicited)))) {
    if (cq.arm.exchange(kCqArmNone) != kCqArmNone) {
      // Named while the event is on its way: if this process dies before writing it, the CQ's
      // owner, waiting for it, writes it itself.
      uint32_t me = seg_->self() + 1;
      cq.raiser.store(me, std::memory_order_relaxed);
      EMU_KILL_POINT(KillPoint::event_raise);
      notify_comp(cq);
      cq.raiser.compare_exchange_strong(me, 0, std::memory_order_release);
    }
  }
}

void Engine::flush_rq(QpSlot& qp) {
  if (qp.srq_ref) return;  // an SRQ's WQEs are not this QP's to flush
  EngineSection in_engine(seg_);
  ShmLockGuard g(qp.rq_lock, seg_->self());
  RecvRef q{&qp, nullptr};
  settle_owed(q);
  uint32_t pi = rq_producer(seg_, qp);
  while ((qp.rq_ci & 0xffff) != pi) {
    write_cqe(cq_slot(h_, qp.recv_cq), error_cqe(kCqeRespErr, kSynWrFlush, qp, qp.rq_ci));
    ++qp.rq_ci;
  }
}

bool Engine::cqe_placed(const CqSlot& cq, uint32_t pi) {
  uint64_t ring_word = cq.ring.load(std::memory_order_acquire);
  // Consumed already: it was there. Otherwise the slot holds this lap's CQE or an older one (its
  // owner bit says); no later lap can have overwritten it while the consumer has not passed it.
  if (static_cast<int32_t>(cq_consumer_index(cq, pi) - pi) > 0) return true;
  uint32_t log_cnt = cq_ring_log(ring_word);
  const Cqe64& c =
      cq_entry(seg_->at<uint8_t>(cq_ring_off(ring_word)), pi, log_cnt, cq_log_entry(cq.format));
  return cqe_is_new(cqe_owner_load(&c.op_own), pi, log_cnt);
}

bool Engine::complete_recv_unstaged(RecvRef& q, CqSlot& cq, const CqeInfo& rc, const QpSlot* qp) {
  release_staged(cq, rc);
  CqeInfo bare = rc;
  bare.staged = false;
  bare.emu_flags &= static_cast<uint8_t>(~kCqeFlagStaged);
  return complete_recv(q, cq, bare, qp);
}

void Engine::settle_owed_record(RecvRef& q, uint64_t v) {
  std::atomic<uint64_t>& owed = recv_owed_of(q);
  CqSlot& cq = recv_cq(q);
  uint32_t pi = recv_owed_pi(v);
  if (cqe_placed(cq, pi)) {
    // Its completion event was still to come (the holder raises it after letting the lock go).
    uint64_t ring_word = cq.ring.load(std::memory_order_acquire);
    const Cqe64& c = cq_entry(seg_->at<uint8_t>(cq_ring_off(ring_word)), pi, cq_ring_log(ring_word),
                              cq_log_entry(cq.format));
    CqeInfo placed{};
    placed.cqe_opcode = cqe_opcode_of(cqe_owner_load(&c.op_own));
    placed.emu_flags = c.emu_flags;
    log("QP 0x%x: a receive a dead process completed is consumed, its event raised",
        recv_owed_qpn(v));
    step_raise_event(cq, placed);
  } else {
    uint32_t seg_bytes;
    CqeInfo e{};
    recv_head(q, &seg_bytes, &e.wqe_counter);
    e.cqe_opcode = kCqeRespErr;
    e.syndrome = kSynWrFlush;
    e.qpn = recv_owed_qpn(v);
    e.srqn = q.srq && q.srq->xrcd_ref ? q.srq->srqn : 0;
    log("QP 0x%x: a receive whose completion a dead process was placing completes as flushed",
        e.qpn);
    fill_cqe(cq, cq.ring.load(std::memory_order_acquire), pi, e, nullptr);
    step_raise_event(cq, e);
  }
  recv_consume(q);
  owed.store(0, std::memory_order_release);
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

void Engine::finish_for_the_dead(QpSlot& qp) {
  // (A TGT QP has neither a receive queue nor CQs of its own: its SRQs' holders settle them.)
  if (qp.state.load(std::memory_order_acquire) != kSlotLive || qp.type == kQptXrcRecv) return;
  EngineSection in_engine(seg_);
  RecvRef q = recv_of(qp);
  {
    // Taking the lock (over, from a dead holder) is what makes the record a dead one's: a live
    // holder clears its record before it lets the lock go.
    ShmLockGuard held(recv_lock(q), seg_->self());
    settle_owed(q);
  }
  raise_owed_event(cq_slot(h_, qp.send_cq));
  if (qp.recv_cq != qp.send_cq) raise_owed_event(cq_slot(h_, qp.recv_cq));
}

// A raiser still alive writes its event and clears its name in a moment; one that is dying (its
// sockets close before it is a zombie, so the CM may know before /proc does) is waited out, as a
// dead lock holder is.
void Engine::raise_owed_event(CqSlot& cq) {
  for (;;) {
    uint32_t r = cq.raiser.load(std::memory_order_acquire);
    if (r == 0) return;
    if (!proc_slot_alive(r - 1)) break;
    sched_yield();
  }
  raise_lost_event(cq);
}

bool Engine::raise_lost_event(CqSlot& cq) {
  uint32_t r = cq.raiser.load(std::memory_order_acquire);
  if (r == 0 || proc_slot_alive(r - 1) || !cq.raiser.compare_exchange_strong(r, 0)) return false;
  log("CQ 0x%x: a completion event lost with process slot %u written again", cq.index, r - 1);
  notify_comp(cq);
  return true;
}

// A send completed in error. The reliable transports (RC, an XRC INI QP, a DCI): the whole QP goes
// to ERR. UC and UD: only the send queue stops (SQE, IBTA 10.3.1): what is left in it is flushed,
// receives go on, and ibv_modify_qp can take the QP back to RTS.
void Engine::send_queue_error(QpSlot& qp) {
  if (qp.type == kQptRc || qp.type == kQptXrcSend || qp.type == kQptDci) {
    enter_error(qp);
    return;
  }
  uint32_t st = qp.qp_state.load();
  if (st != kQpsErr) qp.qp_state.compare_exchange_strong(st, kQpsSqe);
}

void Engine::raise_qp_event(const QpSlot& qp, uint32_t type) {
  if (qp.type == kQptXrcRecv) {
    // A TGT QP's events go to every handle to it, in whichever process holds one.
    for_each_tgt_handle(seg_, qp_index(qp), [&](const XrcHandle& x) {
      if (x.ctx < kMaxContexts) notify_async(h_->ctxs[x.ctx], x.uid, type);
    });
    return;
  }
  if (qp.ctx < kMaxContexts) notify_async(h_->ctxs[qp.ctx], qp.uid, type);
}

}  // namespace emu
