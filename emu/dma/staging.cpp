// SPDX-License-Identifier: BSD-2-Clause
// The receive staging area's slot map (emu/staging.h).
#include "emu/staging.h"

namespace emu {

uint64_t staging_area_bytes(uint64_t bytes) {
  if (!bytes) return 0;
  uint64_t b = kStagingMinBytes;
  while (b < bytes && b < kStagingMaxBytes) b <<= 1;
  return b;
}

void staging_init(StagingArea* a, uint64_t bytes) {
  a->bytes = bytes;
  a->words = static_cast<uint32_t>(bytes >> (kStagingSlotShift + 6));
  a->map()[0].store(1, std::memory_order_relaxed);  // slot 0: this header and the map
  a->magic = kStagingMagic;
}

namespace {

// The lowest run of n (< 64) zero bits in v, as a mask; 0 if there is none.
uint64_t free_run(uint64_t v, uint32_t n) {
  uint64_t run = (uint64_t{1} << n) - 1;
  for (uint32_t shift = 0; shift + n <= 64;) {
    uint64_t m = run << shift;
    uint64_t clash = v & m;
    if (!clash) return m;
    shift = 64 - static_cast<uint32_t>(__builtin_clzll(clash));  // past the highest clash
  }
  return 0;
}

}  // namespace

bool staging_take(StagingArea* a, uint64_t len, StagedRef* ref) {
  uint32_t n = static_cast<uint32_t>((len + kStagingSlotBytes - 1) >> kStagingSlotShift);
  if (!n || n > 64) return false;
  for (uint32_t w = 0; w < a->words; ++w) {
    uint64_t v = a->map()[w].load(std::memory_order_relaxed);
    for (;;) {
      uint64_t m = n == 64 ? (v ? 0 : ~uint64_t{0}) : free_run(v, n);
      if (!m) break;
      // Acquire: the poller that released these slots has finished reading them.
      if (a->map()[w].compare_exchange_weak(v, v | m, std::memory_order_acquire,
                                            std::memory_order_relaxed)) {
        ref->mask = m;
        ref->word = w;
        ref->rsvd = 0;
        return true;
      }
    }
  }
  return false;
}

void staging_release(StagingArea* a, const StagedRef& ref) {
  if (ref.word < a->words) a->map()[ref.word].fetch_and(~ref.mask, std::memory_order_release);
}

uint64_t staging_taken(const StagingArea* a) {
  uint64_t n = 0;
  for (uint32_t w = 0; w < a->words; ++w)
    n += static_cast<uint64_t>(__builtin_popcountll(a->map()[w].load(std::memory_order_relaxed)));
  return n ? n - 1 : 0;
}

}  // namespace emu
