// SPDX-License-Identifier: BSD-2-Clause
#include "emu/reclaim.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emu/barriers.h"
#include "emu/shm_lock.h"

namespace emu {
namespace {

// This thread's slot in its process's EngineSlots: an index, or kEngineSlots for the overflow
// count.
EMU_FAST_TLS uint32_t t_slot = ~0u;

uint32_t my_slot(EngineSlots& es) {
  if (t_slot == ~0u) {
    uint32_t i = es.next.fetch_add(1, std::memory_order_relaxed);
    t_slot = i < kEngineSlots ? i : kEngineSlots;
    if (t_slot < kEngineSlots)
      es.slot[t_slot].owner_tid.store(static_cast<uint32_t>(syscall(SYS_gettid)),
                                      std::memory_order_relaxed);
  }
  return t_slot;
}

}  // namespace

namespace detail {
EMU_FAST_TLS constinit uint32_t t_engine_depth = 0;
}  // namespace detail
using detail::t_engine_depth;

void forget_engine_slot() {
  t_slot = ~0u;
  t_engine_depth = 0;
}

void EngineSection::enter() {
  EngineSlots& es = seg_->hdr()->engines[seg_->self()];
  uint32_t i = my_slot(es);
  if (i < kEngineSlots) {
    // exchange: a full barrier, so the odd mark is visible before any object is looked up.
    es.slot[i].seq.exchange(es.slot[i].seq.load(std::memory_order_relaxed) + 1,
                            std::memory_order_seq_cst);
  } else {
    es.overflow_inside.fetch_add(1, std::memory_order_seq_cst);
  }
}

void EngineSection::leave() {
  EngineSlots& es = seg_->hdr()->engines[seg_->self()];
  if (t_slot < kEngineSlots)
    es.slot[t_slot].seq.store(es.slot[t_slot].seq.load(std::memory_order_relaxed) + 1,
                              std::memory_order_release);
  else
    es.overflow_inside.fetch_sub(1, std::memory_order_release);
}

void wait_for_engines(Segment* seg) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the object is unfindable before we look
  Header* h = seg->hdr();
  for (uint32_t p = 0; p < kMaxProcs; ++p) {
    if (h->procs[p].state.load(std::memory_order_acquire) != kProcAlive) continue;
    EngineSlots& es = h->engines[p];
    uint32_t n = es.next.load(std::memory_order_acquire);
    if (n > kEngineSlots) n = kEngineSlots;
    for (uint32_t i = 0; i < n; ++i) {
      if (p == seg->self() && i == t_slot && t_engine_depth) continue;  // our own open section
      uint64_t seen = es.slot[i].seq.load(std::memory_order_acquire);
      if (!(seen & 1)) continue;
      for (unsigned spins = 0; es.slot[i].seq.load(std::memory_order_acquire) == seen; ++spins) {
        if (spins > 64 && !proc_slot_alive(p)) break;
        if (spins < 64)
          cpu_relax();
        else
          sched_yield();
      }
    }
    for (unsigned spins = 0; es.overflow_inside.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins > 64 && !proc_slot_alive(p)) break;
      sched_yield();
    }
  }
}

void reset_engine_slots(Segment* seg, uint32_t proc) {
  EngineSlots& es = seg->hdr()->engines[proc];
  for (auto& s : es.slot) {
    s.seq.store(0, std::memory_order_relaxed);
    s.owner_tid.store(0, std::memory_order_relaxed);
  }
  es.overflow_inside.store(0, std::memory_order_relaxed);
  es.next.store(0, std::memory_order_release);
}

}  // namespace emu
