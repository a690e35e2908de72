// SPDX-License-Identifier: BSD-2-Clause
// The heap's half of the segment checker (emu/check.h): the buddy allocator's bitmaps and order
// bytes must describe each block once. A block in no state is a leak (a death between two of the
// allocator's stores); a block in two states would be handed out twice.
#include "audit/problems.h"
#include "shm/shm_heap.h"

namespace emu {
namespace {

enum Cover : uint8_t { kNone = 0, kFree = 1, kTaken = 2 };
const char* cover_name(uint8_t c) { return c == kFree ? "free" : "allocated"; }
using ull = unsigned long long;

}  // namespace

std::vector<ShmHeap::Block> ShmHeap::check(uint64_t segment_size,
                                           std::vector<std::string>* problems) const {
  std::vector<Block> taken;
  // Only the grown part has bookkeeping (a read beyond it would take tmpfs pages). Read once:
  // the checker runs beside traffic, which may grow the heap meanwhile.
  const uint64_t blocks = grown();
  if (h_->max_order >= 32 || h_->heap_off % 4096 || blocks > h_->heap_blocks ||
      h_->heap_off + h_->heap_blocks * kHeapMinBlock > segment_size) {
    add_problem(problems,
                "heap: header out of bounds (heap_off %llu, blocks %llu, grown %llu, order %u)",
                ull(h_->heap_off), ull(h_->heap_blocks), ull(blocks), h_->max_order);
    return taken;
  }
  std::vector<uint8_t> cover(blocks, kNone);
  auto mark = [&](uint64_t first, uint64_t n, Cover c) {
    for (uint64_t b = first; b < first + n; ++b) {
      if (cover[b] != kNone) {
        add_problem(problems, "heap: block %llu is %s and also %s", ull(b), cover_name(cover[b]),
                    cover_name(c));
        return false;
      }
      cover[b] = c;
    }
    return true;
  };
  for (uint32_t k = 0; k <= h_->max_order; ++k) {
    const uint64_t* bm = bitmap(k);
    const uint64_t n = blocks >> k;
    for (uint64_t w = 0; w * 64 < n; ++w) {
      for (uint64_t word = bm[w]; word; word &= word - 1) {
        uint64_t i = w * 64 + static_cast<uint64_t>(__builtin_ctzll(word));
        if (i >= n) {
          add_problem(problems, "heap: order %u: free bit %llu beyond its %llu blocks", k, ull(i),
                      ull(n));
          break;
        }
        if (!mark(i << k, 1ull << k, kFree)) break;
      }
    }
  }
  const uint8_t* order = reinterpret_cast<const uint8_t*>(base_ + h_->order_off);
  for (uint64_t b = 0; b < blocks; ++b) {
    if (!order[b]) continue;
    uint64_t k = order[b] - 1u;
    if (k > h_->max_order || b % (1ull << k) || b + (1ull << k) > blocks) {
      add_problem(problems, "heap: block %llu has a bad order byte %u", ull(b), order[b]);
      continue;
    }
    if (mark(b, 1ull << k, kTaken))
      taken.push_back({h_->heap_off + b * kHeapMinBlock, kHeapMinBlock << k});
  }
  uint64_t leaked = 0;
  for (uint8_t c : cover) leaked += c == kNone;
  if (leaked)
    add_problem(problems, "heap: %llu blocks of %llu bytes neither free nor allocated (leaked)",
                ull(leaked), ull(kHeapMinBlock));
  return taken;
}

}  // namespace emu
