// SPDX-License-Identifier: BSD-2-Clause
#include "device/doorbell.h"

#include <sched.h>

#include <cstring>

#include "emu/barriers.h"
#include "emu/config.h"
#include "emu/race_log.h"
#include "emu/reclaim.h"
#include "emu/sched/sched.h"
#include "emu/wqe.h"

namespace emu {
namespace {

constexpr uint32_t kNoneSeen = 0x10000;

int16_t dist16(uint32_t a, uint32_t b) { return static_cast<int16_t>((a - b) & 0xffff); }

// The device takes one write to a register at a time (a NIC serialises a register's writes); the
// holder is a thread of the register's own process, busy for a copy of at most 256 bytes.
void reg_lock(UarReg& reg) {
  for (unsigned spins = 0;; ++spins) {
    uint32_t expected = 0;
    if (reg.device_busy.compare_exchange_weak(expected, 1, std::memory_order_acquire)) return;
    if (spins < 64)
      cpu_relax();
    else
      sched_yield();  // the holder may have been preempted on our core
  }
}
void reg_unlock(UarReg& reg) { reg.device_busy.store(0, std::memory_order_release); }

WqeWriteRec* wrec_of(Segment* seg, const QpSlot& qp) {
  return qp.wrec_off ? seg->at<WqeWriteRec>(qp.wrec_off) : nullptr;
}

void report(Segment* seg, RaceKind kind, RaceAction act, const QpSlot* qp, uint16_t reg,
            uint32_t slot, uint32_t w0, uint32_t w1, uint32_t v0 = 0, uint32_t v1 = 0) {
  RaceReport r;
  r.kind = kind;
  r.action = act;
  r.reg = reg;
  if (qp) {
    r.dev = qp->dev;
    r.qpn = qp->qpn;
    r.ctx = qp->ctx;
  }
  r.slot = slot;
  // Where the stores the device saw were one thread's, the race is with the thread that last
  // stored this QP's doorbell record besides it (two posters of one QP: after their first
  // collision each one's stores go wrong on its own, the cause being the other's earlier store).
  // A writer missing from the record (0) is the same case: two first stores into a slot at the
  // same moment both read "no writer before me", so the one they hid is the QP's other poster.
  auto other_poster = [&](uint32_t not_this) -> uint32_t {
    uint32_t other = qp->dbrec_other.load(std::memory_order_relaxed);
    uint32_t last = qp->dbrec_writer.load(std::memory_order_relaxed);
    return other && other != not_this ? other : (last && last != not_this ? last : 0);
  };
  if (qp && w0 == 0 && w1 != 0) {
    if (uint32_t pick = other_poster(w1)) w0 = pick;
  } else if (qp && (w1 == 0 || w1 == w0)) {
    if (uint32_t pick = other_poster(w0)) w1 = pick;
  }
  r.writers[0] = w0;
  r.writers[1] = w1;
  r.value[0] = v0;
  r.value[1] = v1;
  record_race(seg, r);
  if (config().log)
    log("race: %s on QP 0x%x slot %u (threads %u, %u)", race_kind_name(kind), r.qpn, slot, w0, w1);
}

}  // namespace

uint32_t bf_chunks_needed(const uint8_t* chunk0) {
  CtrlSeg c;
  std::memcpy(&c, chunk0, sizeof c);
  uint32_t ds = ctrl_ds(c);
  uint32_t n = (ds * 16 + kSendWqeBB - 1) / kSendWqeBB;
  return ds == 0 || n > kBfChunks ? 0 : n;
}

BfVerdict inspect_bf(const uint64_t* tags, const uint64_t* taken, uint64_t flusher, uint32_t n) {
  BfVerdict v;
  uint32_t judged = n ? n : 1;
  bool all_taken = true, any_flusher = false;
  for (uint32_t i = 0; i < judged; ++i) {
    all_taken = all_taken && tags[i] != 0 && tags[i] == taken[i];
    any_flusher = any_flusher || tags[i] == flusher;
  }
  v.writers[0] = bf_tag_tid(flusher);
  for (uint32_t i = 0; i < judged; ++i) {
    // A mixed chunk holds another thread's bytes even when its tag is the flushing write's (a
    // one-chunk WQE torn inside its chunk completes, and flushes, under the mixed tag).
    if (tags[i] == flusher && !is_mixed_tag(tags[i])) continue;
    v.foreign_mask |= 1u << i;
    if (!v.writers[1] || v.writers[1] == v.writers[0])
      v.writers[1] = bf_tag_other(tags[i], v.writers[0]);
  }
  if (all_taken) {
    // Nothing arrived since the device last took this buffer. If the flushing write is not what
    // it holds, another write replaced it before the drain (and was taken at its own flush).
    v.nothing_new = true;
    v.torn = !any_flusher;
    return v;
  }
  v.torn = v.foreign_mask != 0;
  return v;
}

DbrecVerdict inspect_dbrec(uint32_t seen, uint32_t now, uint32_t ci, uint32_t ring_bbs,
                           uint32_t last_block_pos, bool tracked) {
  DbrecVerdict v;
  now &= 0xffff;
  uint32_t keep = seen == kNoneSeen ? (ci & 0xffff) : seen;
  v.producer = now;
  uint32_t back = (keep - now) & 0xffff;
  if (seen != kNoneSeen && back != 0 && back < 0x8000) {
    v.backwards = true;
    v.producer = keep;  // the device keeps the furthest value it read
    return v;
  }
  uint32_t pending = (now - ci) & 0xffff;
  if (pending > ring_bbs) {
    v.ahead = true;  // more blocks than the ring holds: nothing a device can fetch
    v.producer = keep;
  } else if (tracked && pending && last_block_pos != ci + pending - 1) {
    v.ahead = true;  // the device goes on, and finds what the ring holds there
  }
  return v;
}

// A torn verdict that names one thread only (a leftover chunk: the flusher copied fewer blocks
// than the control segment it copied claims; or chunks of two writes of one thread): the other
// writer is whoever rewrote the ring slot the flusher copied from, else the QP's other poster,
// else the other thread whose plain stores reached this buffer (a register shared by QPs of two
// threads). qp may be null (nothing new arrived: the device did not look up the QP).
static void name_other_writer(BfVerdict& v, QpSlot* qp, const UarReg& reg, uint32_t buf,
                              uint32_t idx, Segment* seg) {
  auto unnamed = [&] { return v.writers[1] == 0 || v.writers[1] == v.writers[0]; };
  auto offer = [&](uint32_t t) {
    if (unnamed() && t && t != v.writers[0]) v.writers[1] = t;
  };
  if (!v.torn || !unnamed()) return;
  if (qp) {
    if (WqeWriteRec* rec = wrec_of(seg, *qp)) {
      WqeWriteRec& w = rec[idx & (qp->sq_bbs - 1)];
      offer(w.writer.load(std::memory_order_relaxed));
      offer(w.prev_writer.load(std::memory_order_relaxed));
    }
    offer(qp->dbrec_other.load(std::memory_order_relaxed));  // as report(): the other poster
  }
  for (const auto& w : reg.bf_store_writers[buf]) offer(w.load(std::memory_order_relaxed));
}

uint64_t bf_intake(Segment* seg, UarReg& reg, uint32_t buf, uint64_t flusher, bool reg_locked) {
  EngineSection in_engine(seg);  // the QP slot found below stays what it is until we are done
  if (!reg_locked) reg_lock(reg);
  uint64_t tags[kBfChunks], again[kBfChunks];
  alignas(64) uint8_t copy[kBfBufSize];
  for (uint32_t i = 0; i < kBfChunks; ++i)
    tags[i] = reg.bf_tag[buf][i].load(std::memory_order_acquire);
  mmio_words_load(copy, reg.bf[buf], kSendWqeBB);
  uint32_t n = bf_chunks_needed(copy);
  if (n > 1) mmio_words_load(copy + kSendWqeBB, reg.bf[buf] + kSendWqeBB, (n - 1) * kSendWqeBB);
  std::atomic_thread_fence(std::memory_order_acquire);
  for (uint32_t i = 0; i < kBfChunks; ++i)
    again[i] = reg.bf_tag[buf][i].load(std::memory_order_relaxed);
  BfVerdict v = inspect_bf(tags, reg.bf_taken[buf], flusher, n);
  // A chunk rewritten while the device read it came from a writer still copying: torn too.
  for (uint32_t i = 0; i < (n ? n : 1); ++i) {
    if (again[i] == tags[i]) continue;
    v.torn = true;
    v.nothing_new = false;
    v.foreign_mask |= 1u << i;
    if (!v.writers[1] || v.writers[1] == v.writers[0])
      v.writers[1] = bf_tag_other(again[i], v.writers[0]);
  }
  CtrlSeg c;
  std::memcpy(&c, copy, sizeof c);
  uint32_t qpn = ctrl_qpn(c);
  uint32_t idx = ctrl_wqe_index(c);
  QpSlot* qp = v.nothing_new ? nullptr : seg->find_qp(qpn);
  RaceAction act = kActIgnored;
  uint64_t head = 0;
  if (!v.nothing_new) {
    for (uint32_t i = 0; i < kBfChunks; ++i) reg.bf_taken[buf][i] = tags[i];
    if (!qp || qp->ctx != reg.ctx) {
      act = kActDropped;  // names no QP of this register's context: a NIC drops it
      if (config().log)
        log("BlueFlame write for QP 0x%x on a register of context %u dropped", qpn, reg.ctx);
    } else {
      // Kept until the device reaches idx; a copy for an index it has already fetched from the
      // ring is dropped then (take_bf_copy), not here: the consumer position is the runner's.
      BfStash& s = qp->bf_stash;
      uint32_t seq = s.seq.load(std::memory_order_relaxed) | 1;  // odd: being written
      s.seq.store(seq, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      mmio_words_store(s.bytes, copy, n ? n * kSendWqeBB : kSendWqeBB);
      s.writers[0] = v.writers[0];
      s.writers[1] = v.torn ? v.writers[1] : 0;
      s.torn = v.torn;
      s.index.store(idx | (n ? 0 : kStashBad), std::memory_order_relaxed);
      s.seq.store(seq + 1, std::memory_order_release);
      act = n ? kActExecutedBf : kActLocalQpOpErr;
      std::memcpy(&head, copy, 8);
    }
  }
  if (!reg_locked) reg_unlock(reg);
  name_other_writer(v, qp, reg, buf, idx, seg);
  if (v.torn) {
    RaceReport r;
    r.kind = kRaceBfTorn;
    r.action = act;
    r.reg = reg.index;
    r.dev = reg.dev;
    r.ctx = reg.ctx;
    r.qpn = qpn & 0xffffff;
    r.slot = idx;
    r.writers[0] = v.writers[0];
    r.writers[1] = v.writers[1];
    r.value[0] = buf;
    r.value[1] = v.foreign_mask;
    record_race(seg, r);
    if (config().log)
      log("race: torn BlueFlame WQE on register %u of context %u (threads %u, %u)", reg.index,
          reg.ctx, v.writers[0], v.writers[1]);
  }
  return head;
}

uint32_t dbrec_judged(Segment* seg, QpSlot& qp, uint32_t raw) {
  WqeWriteRec* rec = wrec_of(seg, qp);
  bool tracked = rec && qp.wrec_tracked.load(std::memory_order_relaxed);
  uint32_t pending = (raw - qp.sq_ci) & 0xffff;
  uint32_t last_pos = ~0u;
  if (tracked && pending && pending <= qp.sq_bbs)
    last_pos = rec[(qp.sq_ci + pending - 1) & (qp.sq_bbs - 1)].pos.load(std::memory_order_relaxed);
  DbrecVerdict v = inspect_dbrec(qp.dbrec_seen, raw, qp.sq_ci, qp.sq_bbs, last_pos, tracked);
  uint32_t writer = qp.dbrec_writer.load(std::memory_order_relaxed);
  if (v.backwards) {
    if (qp.dbrec_last_raw != raw) {  // report each backwards value once
      report(seg, kRaceDbrecBackwards, kActIgnored, &qp, qp.uar_index, raw, qp.dbrec_seen_writer,
             writer, qp.dbrec_seen, raw);
      qp.dbrec_last_raw = raw;
    }
    return v.producer;
  }
  if (v.ahead && qp.dbrec_ahead_at != raw) {
    qp.dbrec_ahead_at = raw;
    uint32_t last_writer =
        tracked && pending <= qp.sq_bbs && pending
            ? rec[(qp.sq_ci + pending - 1) & (qp.sq_bbs - 1)].writer.load(std::memory_order_relaxed)
            : 0;
    report(seg, kRaceDbrecAhead, kActNone, &qp, qp.uar_index, raw, writer, last_writer,
           qp.sq_ci & 0xffff, raw);
  }
  qp.dbrec_last_raw = raw;
  if (v.producer == (raw & 0xffff)) {
    qp.dbrec_seen = raw & 0xffff;
    qp.dbrec_seen_writer = writer;
  }
  return v.producer;
}

bool take_bf_copy(QpSlot& qp, uint32_t pos, uint8_t* buf, bool* bad) {
  BfStash& s = qp.bf_stash;
  for (;;) {
    uint32_t s1 = s.seq.load(std::memory_order_acquire);
    if (s1 == s.consumed.load(std::memory_order_relaxed)) return false;  // nothing new
    if (s1 & 1) {                                                        // the intake is writing it
      cpu_relax();
      continue;
    }
    uint32_t si = s.index.load(std::memory_order_relaxed);
    if ((si & 0xffff) != (pos & 0xffff)) {
      // A copy for an index the device has passed (it fetched that WQE from the ring first) is
      // dropped; one for a later index waits.
      if (dist16(si & 0xffff, pos) < 0 && s.seq.load(std::memory_order_acquire) == s1)
        s.consumed.store(s1, std::memory_order_relaxed);
      return false;
    }
    // Only the blocks the WQE spans (a bad copy: its first block, for the report).
    mmio_words_load(buf, s.bytes, kSendWqeBB);
    uint32_t n = (si & kStashBad) ? 1 : bf_chunks_needed(buf);
    if (n > 1) mmio_words_load(buf + kSendWqeBB, s.bytes + kSendWqeBB, (n - 1) * kSendWqeBB);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != s1) continue;  // rewritten meanwhile: again
    s.consumed.store(s1, std::memory_order_relaxed);
    *bad = (si & kStashBad) != 0;
    return true;
  }
}

void report_double_write(Segment* seg, QpSlot& qp, uint32_t pos, bool from_bf, uint32_t n) {
  const WqeWriteRec& r = wrec_of(seg, qp)[pos & (qp.sq_bbs - 1)];
  report(seg, kRaceDoubleWrite, from_bf ? kActExecutedBf : kActExecutedRing, &qp, qp.uar_index,
         pos & 0xffff, r.prev_writer.load(std::memory_order_relaxed),
         r.writer.load(std::memory_order_relaxed), n, 0);
}

void report_stale(Segment* seg, QpSlot& qp, uint32_t pos) {
  WqeWriteRec* rec = wrec_of(seg, qp);
  uint32_t w = 0, last_pos = 0;
  if (rec && qp.wrec_tracked.load(std::memory_order_relaxed)) {
    w = rec[pos & (qp.sq_bbs - 1)].writer.load(std::memory_order_relaxed);
    last_pos = rec[pos & (qp.sq_bbs - 1)].pos.load(std::memory_order_relaxed);
  }
  report(seg, kRaceStaleWqe, kActLocalQpOpErr, &qp, qp.uar_index, pos & 0xffff,
         qp.dbrec_writer.load(std::memory_order_relaxed), w, pos, last_pos);
}

void reset_race_state(Segment* seg, QpSlot& qp) {
  // The driver's counters restart at 0 (a zeroed slot is this state too).
  qp.dbrec_seen = 0;
  qp.dbrec_seen_writer = 0;
  qp.dbrec_writer.store(0);
  qp.dbrec_other.store(0);
  qp.dbrec_ahead_at = 0;
  qp.dbrec_last_raw = 0;
  qp.bf_stash.consumed.store(qp.bf_stash.seq.load() & ~1u);  // nothing to take
  if (WqeWriteRec* rec = wrec_of(seg, qp)) {
    for (uint32_t i = 0; i < qp.sq_bbs; ++i) {
      rec[i].pos.store(~0u, std::memory_order_relaxed);
      rec[i].unfetched.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace emu
