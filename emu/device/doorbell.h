// SPDX-License-Identifier: BSD-2-Clause
// The device's side of doorbells: what it receives from a register write (an 8-byte doorbell, or
// BlueFlame chunks drained by a flush), what it reads of the send doorbell record and the ring, and
// the race detectors that run on each (docs/design/doorbells-and-mmio.md). Always on: each check is
// a few loads on lines the device reads anyway.
//
// The detectors are pure functions over what the device recorded, so unit tests feed them crafted
// sequences; the intake and fetch hooks below apply them to the segment and log race events.
#pragma once
#include <cstdint>
#include <cstring>

#include "emu/device.h"
#include "emu/layout.h"
#include "emu/sched/sched.h"
#include "emu/segment.h"
#include "emu/wqe.h"

namespace emu {

// A BlueFlame chunk's tag: which write filled it (writer tid << 32 | that thread's burst number).
inline uint64_t bf_tag(uint32_t tid, uint32_t burst) { return uint64_t(tid) << 32 | burst; }
inline uint32_t bf_tag_tid(uint64_t tag) { return static_cast<uint32_t>(tag >> 32); }
// A chunk assembled from plain stores of two threads (emu/mmio.h, "Plain stores"): tagged with
// one, the other in its burst field, so that whichever of the two flushes, the other is named.
constexpr uint32_t kMixedBurst = 1u << 31;
inline uint64_t bf_mixed_tag(uint32_t tid, uint32_t other) {
  return bf_tag(tid, kMixedBurst | (other & ~kMixedBurst));
}
inline bool is_mixed_tag(uint64_t tag) { return static_cast<uint32_t>(tag) & kMixedBurst; }
// The thread a foreign chunk's tag names for a flush by `flusher`: its writer, or for a mixed
// chunk whose writer is the flusher, the other thread in it.
inline uint32_t bf_tag_other(uint64_t tag, uint32_t flusher) {
  uint32_t tid = bf_tag_tid(tag), burst = static_cast<uint32_t>(tag);
  return tid == flusher && (burst & kMixedBurst) ? burst & ~kMixedBurst : tid;
}

// Chunks the WQE whose control segment starts a BlueFlame buffer needs (0: it does not parse as a
// WQE that fits the buffer).
uint32_t bf_chunks_needed(const uint8_t* chunk0);

struct BfVerdict {
  bool nothing_new = false;      // every chunk is one the device already took: no new write here
  bool torn = false;             // the chunks the WQE needs are not all the flushing write's
  uint32_t writers[2] = {0, 0};  // the flushing thread, and the first other writer found
  uint32_t foreign_mask = 0;     // which chunks came from another write
};
// tags: the chunks' tags; taken: the tags the device took last from this buffer; flusher: the
// flushing write's tag; n: chunks the WQE needs (0: chunk 0 does not parse, only it is judged).
BfVerdict inspect_bf(const uint64_t* tags, const uint64_t* taken, uint64_t flusher, uint32_t n);

struct DbrecVerdict {
  bool backwards = false;  // behind the furthest value the device had read
  bool ahead = false;      // counts blocks the ring was not given (see below)
  uint32_t producer = 0;   // the producer the device goes on with (the furthest seen)
};
// seen: the furthest value read before (0x10000: none since reset); now: the value read; ci: the
// device's consumer position (32-bit block counter); ring_bbs: the ring's size in blocks;
// last_block_pos: the position last recorded as written at block (producer - 1), or ~0 when the
// ring's stores are not recorded (then only "more than the ring holds" counts as ahead).
DbrecVerdict inspect_dbrec(uint32_t seen, uint32_t now, uint32_t ci, uint32_t ring_bbs,
                           uint32_t last_block_pos, bool tracked);

// Whether inspect_dbrec finds nothing wrong (not backwards, not ahead) and the device goes on with
// the value read: the record stayed or moved forward from the furthest value read before, by no
// more blocks than the ring holds, the last of them recorded as written there (or the ring's
// stores not recorded). Asked inline for every doorbell; false sends the read to the general
// judgement (dbrec_judged), which gives the same verdict and reports. seen 0x10000 (none read since
// reset) is left to it too.
inline bool dbrec_clean(uint32_t seen, uint32_t now, uint32_t ci, uint32_t ring_bbs,
                        uint32_t last_block_pos, bool tracked) {
  now &= 0xffff;
  uint32_t back = (seen - now) & 0xffff;
  uint32_t pending = (now - ci) & 0xffff;
  return seen < 0x10000 && (back == 0 || back >= 0x8000) && pending <= ring_bbs &&
         (!tracked || !pending || last_block_pos == ci + pending - 1);
}

// ---- Device hooks (called by the engine and the MMIO helpers) ----

// A BlueFlame buffer drained to the device by a flush of `flusher` (its tag): the device takes the
// WQE in it (a copy, kept on the QP its control segment names until the device reaches that index)
// and reports a torn buffer. Returns the control segment's first 8 bytes, for the doorbell that
// follows (0: nothing to run).
// reg_locked: the caller's lock already serialises this register's writers (and intakes).
uint64_t bf_intake(Segment* seg, UarReg& reg, uint32_t buf, uint64_t flusher,
                   bool reg_locked = false);

// The general judgement of a send doorbell record read (inspect_dbrec over the QP's state): the
// device's view moves on, and what is wrong is reported. Caller holds the QP's engine lock.
uint32_t dbrec_judged(Segment* seg, QpSlot& qp, uint32_t raw_producer);

// The send doorbell record as the device reads it before fetching: checked against what it read
// before and what the ring was given. Caller holds the QP's engine lock. Inline: every doorbell
// asks it, and the clean read (dbrec_clean) is a few loads and stores; the rest is dbrec_judged's.
inline uint32_t dbrec_checked(Segment* seg, QpSlot& qp, uint32_t raw) {
  // The very record read last time, which passed the checks then (seen moved to it, no report
  // of it ahead): only the consumer has moved since, towards it, so they pass again — a slot
  // below it written anew meanwhile is note_fetch's double write. A stream of WQEs under one
  // doorbell asks this once per WQE. Not in a scheduled run, where each read is a step.
  if (raw == qp.dbrec_last_raw && (raw & 0xffff) == qp.dbrec_seen && qp.dbrec_ahead_at != raw &&
      !sched::scheduled())
    return raw & 0xffff;
  // What dbrec_judged reads, read the same way.
  WqeWriteRec* rec = qp.wrec_off ? seg->at<WqeWriteRec>(qp.wrec_off) : nullptr;
  bool tracked = rec && qp.wrec_tracked.load(std::memory_order_relaxed);
  uint32_t pending = (raw - qp.sq_ci) & 0xffff;
  uint32_t last_pos = ~0u;
  if (tracked && pending && pending <= qp.sq_bbs)
    last_pos = rec[(qp.sq_ci + pending - 1) & (qp.sq_bbs - 1)].pos.load(std::memory_order_relaxed);
  if (!dbrec_clean(qp.dbrec_seen, raw, qp.sq_ci, qp.sq_bbs, last_pos, tracked)) [[unlikely]]
    return dbrec_judged(seg, qp, raw);
  // What dbrec_judged does with a clean read.
  qp.dbrec_last_raw = raw;
  qp.dbrec_seen = raw & 0xffff;
  qp.dbrec_seen_writer = qp.dbrec_writer.load(std::memory_order_relaxed);
  return raw & 0xffff;
}

// The WQE at ring position pos, if a BlueFlame write delivered it: copied into buf (true, and
// *bad if it did not parse). Stale copies the device has passed are dropped. Engine lock held.
bool take_bf_copy(QpSlot& qp, uint32_t pos, uint8_t* buf, bool* bad);

// Whether a BlueFlame copy waits that the runner has not taken or dropped (take_bf_copy's first
// test, for a caller that fetches many WQEs from the ring in a row). Engine lock held.
inline bool bf_copy_waiting(const QpSlot& qp) {
  return qp.bf_stash.seq.load(std::memory_order_acquire) !=
         qp.bf_stash.consumed.load(std::memory_order_relaxed);
}

// Reports a double write found by note_fetch: n WQE starts written at pos since the last fetch.
void report_double_write(Segment* seg, QpSlot& qp, uint32_t pos, bool from_bf, uint32_t n);

// The device fetched the WQE starting at ring position pos (from the ring or a BlueFlame copy):
// reports a double write (two WQEs written into the slot since the last fetch). Engine lock held.
// Inline: it runs for every WQE, and its common case is two loads and a store.
inline void note_fetch(Segment* seg, QpSlot& qp, uint32_t pos, bool from_bf) {
  if (!qp.wrec_off || !qp.wrec_tracked.load(std::memory_order_relaxed)) return;
  WqeWriteRec& r = seg->at<WqeWriteRec>(qp.wrec_off)[pos & (qp.sq_bbs - 1)];
  uint32_t n = r.unfetched.load(std::memory_order_relaxed);
  if (n == 0) return;
  r.unfetched.store(0, std::memory_order_relaxed);
  if (n > 1) report_double_write(seg, qp, pos, from_bf, n);
}

// The device's fetch of the common WQE without a call: one block, in the ring, no BlueFlame copy
// waiting, copied into buf whole. False for anything else (a copy to take, a longer or stale
// WQE), which Engine::fetch_wqe_general then reads the general way. Engine lock held. Not for a
// scheduled run, whose device sees the ring through the stores it has not drained
// (emu/sched/visibility.h).
inline bool fetch_one_block(Segment* seg, QpSlot& qp, uint32_t pos, uint8_t* buf) {
  if (bf_copy_waiting(qp)) return false;
  std::memcpy(buf, seg->at<uint8_t>(qp.sq_off) + (pos & (qp.sq_bbs - 1)) * kSendWqeBB, kSendWqeBB);
  CtrlSeg ctrl;
  std::memcpy(&ctrl, buf, sizeof ctrl);
  uint32_t size = ctrl_size(ctrl);
  if (size == 0 || size > kSendWqeBB || ctrl_wqe_index(ctrl) != (pos & 0xffff) ||
      ctrl_qpn(ctrl) != qp.qpn)
    return false;
  note_fetch(seg, qp, pos, false);
  return true;
}

// The device reached a slot below the doorbell record that holds no WQE for that position.
void report_stale(Segment* seg, QpSlot& qp, uint32_t pos);

}  // namespace emu
