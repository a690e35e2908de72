// SPDX-License-Identifier: BSD-2-Clause
// Resizing a CQ while engines in any process complete into it (docs/design/engine.md, "Resizing a
// CQ"). Producers reserve a CQE index with a fetch-add on pi and read the ring they write into
// from one word (CqSlot::ring), inside an engine section. The resizer never stops them: it
// publishes a new word, waits until every section that may have read the old word has closed
// (wait_for_engines, as reclamation does), and then copies the unpolled CQEs the old ring holds to
// their places in the new one, as mlx5's driver copies them at the resize CQE. Every reserved
// index is written exactly once, into one of the two rings, so nothing is lost or doubled.
#include <cstring>

#include "emu/barriers.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/wqe.h"

namespace emu {
namespace {

// Publishes w and returns once no producer still uses the word it replaced.
void switch_ring_word(Segment* seg, CqSlot& c, uint64_t w) {
  c.ring.store(w, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the store, then the scan of sections
  wait_for_engines(seg);
}

// Copies the CQEs for indexes [ci, end) that the old ring holds into the new ring, each with the
// owner bit of its pass there. An index whose old slot does not hold its CQE (owner bit of
// another pass, or never written) was produced into the new ring.
void move_unpolled(const uint8_t* old_ring, uint32_t old_log, uint8_t* ring, uint32_t log,
                   uint32_t log_entry, uint32_t ci, uint32_t end) {
  for (uint32_t i = ci; i != end; ++i) {
    const Cqe64& from = cq_entry(old_ring, i, old_log, log_entry);
    uint8_t op_own = cqe_owner_load(&from.op_own);
    if (!cqe_is_new(op_own, i, old_log)) continue;
    Cqe64& to = cq_entry(ring, i, log, log_entry);
    std::memcpy(&to, &from, offsetof(Cqe64, op_own));
    cqe_publish(&to.op_own, static_cast<uint8_t>((op_own & ~1u) | ((i >> log) & 1)));
  }
}

}  // namespace

Status resize_cq(Segment* seg, CqSlot& c, uint32_t log, uint32_t ci, uint64_t* ring_off) {
  uint64_t old_word = c.ring.load(std::memory_order_acquire);
  uint32_t old_log = cq_ring_log(old_word);
  uint32_t cnt = 1u << log;
  if (log < old_log) {
    // A shrink first lowers what producers may have outstanding, in the old ring: once no
    // producer uses the old bound, no index at or past ci + cnt can still be written, and
    // whether the unpolled CQEs fit is known for good. If not, the old bound comes back.
    switch_ring_word(seg, c, cq_ring_word(cq_ring_off(old_word), old_log, log));
    if (c.pi.load(std::memory_order_acquire) - ci > cnt) {
      c.ring.store(old_word, std::memory_order_release);
      return Status::invalid;
    }
  } else if (c.pi.load(std::memory_order_acquire) - ci > cnt) {
    return Status::invalid;
  }
  HeapUse use(seg);  // until the ring word names the new ring (Segment::audit_heap)
  const uint32_t log_entry = cq_log_entry(c.format);
  uint64_t off = seg->alloc(size_t(cnt) << log_entry, 4096);
  if (!off) {
    c.ring.store(old_word, std::memory_order_release);
    return Status::no_memory;
  }
  auto* ring = seg->at<uint8_t>(off);
  for (uint32_t i = 0; i < cnt; ++i)
    cq_entry(ring, i, log, log_entry).op_own = kCqeInvalid << 4 | 1;
  switch_ring_word(seg, c, cq_ring_word(off, log, log));
  // Producers of the old word are done, and none reserved an index past ci + its bound.
  uint32_t end = c.pi.load(std::memory_order_acquire);
  uint32_t old_bound = 1u << cq_ring_log_capacity(old_word);
  if (end - ci > old_bound) end = ci + old_bound;
  move_unpolled(seg->at<uint8_t>(cq_ring_off(old_word)), old_log, ring, log, log_entry, ci, end);
  seg->free(cq_ring_off(old_word));
  c.buf_off = off;
  c.cqe_cnt = cnt;
  c.log_cqe_cnt = log;
  *ring_off = off;
  return Status::ok;
}

}  // namespace emu
