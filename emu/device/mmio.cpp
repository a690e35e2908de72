// SPDX-License-Identifier: BSD-2-Clause
#include "emu/mmio.h"

#include "device/doorbell.h"
#include "device/engine.h"
#include "device/progress.h"
#include "emu/barriers.h"
#include "emu/config.h"
#include "emu/kill_point.h"
#include "emu/race_log.h"
#include "emu/sched/sched.h"
#include "emu/segment.h"
#include "emu/wqe.h"

namespace emu {
namespace {

struct PendingBf {
  UarReg* reg;
  uint32_t buf;
  uint64_t tag;
  uint32_t next_chunk;  // the chunk after the last one written
};

struct WcState {
  uint32_t burst = 0;
  uint32_t n = 0;
  PendingBf pending[kWcBuffers];
};
EMU_FAST_TLS WcState t_wc;

// One pending buffer reaches the device.
uint64_t drain_one(const PendingBf& p, bool reg_locked = false) {
  Segment* seg = Segment::get();
  return bf_intake(seg, *p.reg, p.buf, p.tag, reg_locked);
}

}  // namespace

// Burst numbers run through 31 bits, never 0 (no write) nor with kMixedBurst's bit.
uint64_t mmio_bf_begin() {
  t_wc.burst = (t_wc.burst + 1) & ~kMixedBurst;
  if (!t_wc.burst) t_wc.burst = 1;
  return bf_tag(writer_tid(), t_wc.burst);
}

// A chunk's eight 8-byte stores; under EMU_KILL_AT a death can fall between the fourth and fifth.
static void copy_bf_chunk(void* dst, const void* src) {
  if (__builtin_expect(g_kill_armed, 0)) {
    mmio_words_store(dst, src, 32);
    kill_point_hit(KillPoint::bf_copy);
    mmio_words_store(static_cast<uint8_t*>(dst) + 32, static_cast<const uint8_t*>(src) + 32, 32);
    return;
  }
  mmio_copy_chunk64(dst, src);
}

void mmio_bf_chunk(UarReg& reg, uint32_t buf, uint32_t i, const void* src, uint64_t tag) {
  sched::point(sched::kPointBfChunk, reinterpret_cast<uintptr_t>(reg.bf[buf] + i * kSendWqeBB),
               tag);
  // Under a visibility profile the poster's write-combining entry holds the chunk until delivery.
  if (!sched::buffer_wc_chunk(reg.bf[buf] + i * kSendWqeBB, src, &reg.bf_tag[buf][i], tag)) {
    copy_bf_chunk(reg.bf[buf] + i * kSendWqeBB, src);
    reg.bf_tag[buf][i].store(tag, std::memory_order_release);
  }
  // Remember the buffer as pending (once per burst).
  WcState& wc = t_wc;
  if (wc.n && wc.pending[wc.n - 1].reg == &reg && wc.pending[wc.n - 1].buf == buf &&
      wc.pending[wc.n - 1].tag == tag) {
    wc.pending[wc.n - 1].next_chunk = i + 1;
    return;
  }
  if (wc.n == kWcBuffers) {  // eviction: the oldest buffer drains now
    sched::deliver_wc();
    uint64_t head = drain_one(wc.pending[0]);
    for (uint32_t k = 1; k < wc.n; ++k) wc.pending[k - 1] = wc.pending[k];
    --wc.n;
    if (head) device_doorbell(head);
  }
  wc.pending[wc.n++] = PendingBf{&reg, buf, tag, i + 1};
}

void mmio_bf_abandon(UarReg& reg, uint32_t buf) {
  WcState& wc = t_wc;
  uint32_t kept = 0;
  for (uint32_t k = 0; k < wc.n; ++k)
    if (wc.pending[k].reg != &reg || wc.pending[k].buf != buf) wc.pending[kept++] = wc.pending[k];
  wc.n = kept;
}

uint64_t mmio_bf_continue(UarReg& reg, uint32_t buf, uint32_t first) {
  const WcState& wc = t_wc;
  if (first != 0 && wc.n) {
    const PendingBf& last = wc.pending[wc.n - 1];
    if (last.reg == &reg && last.buf == buf && last.next_chunk == first) return last.tag;
  }
  sched::drain_stores();  // mmio_wc_start: a barrier before the device write
  mmio_wc_start();
  return mmio_bf_begin();
}

void mmio_bf_copy(UarReg& reg, uint32_t buf, const uint8_t* const* blocks, uint32_t nbbs) {
  uint64_t tag = mmio_bf_begin();
  sched::drain_stores();
  mmio_wc_start();
  for (uint32_t i = 0; i < nbbs && i < kBfChunks; ++i) mmio_bf_chunk(reg, buf, i, blocks[i], tag);
}

uint32_t mmio_flush(uint64_t* heads, uint32_t max, bool reg_locked) {
  sched::point(sched::kPointFlush);
  sched::drain_stores(/*point_first=*/false);
  mmio_flush_writes();
  sched::deliver_wc();  // the flush empties the write-combining buffers before the device reads
  WcState& wc = t_wc;
  uint32_t out = 0;
  for (uint32_t k = 0; k < wc.n; ++k) {
    uint64_t head = drain_one(wc.pending[k], reg_locked);
    if (!head) continue;
    if (out < max)
      heads[out++] = head;
    else
      device_doorbell(head);
  }
  wc.n = 0;
  return out;
}

void sq_note_wqe_before_slow(QpSlot& qp, uint32_t pos, uint32_t nbbs) {
  const uint8_t* ring = Segment::get()->at<uint8_t>(qp.sq_off);
  for (uint32_t i = 0; i < nbbs; ++i) {
    uint32_t idx = (pos + i) & (qp.sq_bbs - 1);
    sched::buffer_store(sched::StoreKind::kRing, qp.sq_off + idx * kSendWqeBB,
                        ring + idx * kSendWqeBB, kSendWqeBB);
  }
}

void sq_note_wqe_unstore(WqeWriteRec* rec, uint32_t mask, uint32_t pos) {
  if (!rec) return;
  WqeWriteRec& c = rec[pos & mask];
  if (c.unfetched.load(std::memory_order_relaxed))
    c.unfetched.fetch_sub(1, std::memory_order_relaxed);
  c.pos.store(~0u, std::memory_order_relaxed);
}

}  // namespace emu
