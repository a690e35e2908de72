// SPDX-License-Identifier: BSD-2-Clause
#include "shm/shm_heap.h"

#include <atomic>
#include <cstring>

#include "emu/kill_point.h"

namespace emu {
namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

constexpr uint64_t kPageBytes = 4096;
// A freed block smaller than this keeps its pages (as malloc keeps its small chunks). Small
// blocks come and go with every context, QP, CQ and SRQ (rings, records, register pages), and
// giving their pages back zaps them from every process mapping the segment (an IPI to each CPU
// they run on): a third of a create-and-destroy's time on a two-vCPU VM, for pages the next
// object takes again. What stays is bounded by the most small blocks ever in use at once.
constexpr uint64_t kKeepPagesBelow = 64 << 10;

// A single store another process (or a later attacher after our death) sees whole.
void store_word(uint64_t* w, uint64_t v) {
  reinterpret_cast<std::atomic<uint64_t>*>(w)->store(v, std::memory_order_release);
}
void store_byte(uint8_t* b, uint8_t v) {
  reinterpret_cast<std::atomic<uint8_t>*>(b)->store(v, std::memory_order_release);
}

}  // namespace

bool ShmHeap::init(char* base, ShmHeapHeader* h, uint64_t meta_off, uint64_t size,
                   HeapBacking* backing) {
  std::memset(h, 0, sizeof *h);
  // Where the bookkeeping goes: order bytes and bitmaps for a heap of at most the remaining size.
  // Only the part for the heap's first growth step is taken now (grow); a page of it is read by
  // no one before the heap has grown over the blocks it describes.
  uint64_t rough_blocks = (size - meta_off) / kHeapMinBlock;
  uint64_t off = align_up(meta_off, 64);
  h->order_off = off;
  off = align_up(off + rough_blocks, 64);
  uint32_t max_order = 0;
  while (max_order < 31 && (2ull << max_order) <= rough_blocks) ++max_order;
  for (uint32_t k = 0; k <= max_order; ++k) {
    h->free_off[k] = off;
    off += ((rough_blocks >> k) / 64 + 2) * 8;
  }
  h->heap_off = align_up(off, 4096);
  h->heap_blocks = (size - h->heap_off) / kHeapMinBlock;
  h->max_order = max_order;
  return ShmHeap(base, h, backing).grow();
}

// Bytes [base + lo, base + hi) of a piece of bookkeeping whose [base, base + lo) an earlier step
// reserved: only the pages that step did not reach, so an emulated tmpfs limit (EMU_SHM_LIMIT)
// does not count a held page again.
bool ShmHeap::reserve_new(uint64_t base, uint64_t lo, uint64_t hi) {
  const uint64_t start = lo ? align_up(base + lo, kPageBytes) : base;
  return base + hi <= start || backing_->reserve(start, base + hi - start);
}

uint64_t ShmHeap::grown() const {
  return reinterpret_cast<const std::atomic<uint64_t>*>(&h_->grown_blocks)
      ->load(std::memory_order_acquire);
}

// One growth step: the bookkeeping of the next 2^kHeapGrowOrder blocks taken (its pages are fresh,
// so zero: nothing gives bookkeeping pages back), the new end stored, then the new blocks given
// back, merging with free buddies below. A death before the store leaves reserved pages the next
// step uses; after it, blocks in no state, which the heap audit gives back as leaked.
bool ShmHeap::grow() {
  const uint64_t from = grown();
  if (from >= h_->heap_blocks) return false;
  const uint32_t step_order = kHeapGrowOrder < h_->max_order ? kHeapGrowOrder : h_->max_order;
  uint64_t to = from + (1ull << step_order);
  if (to > h_->heap_blocks) to = h_->heap_blocks;
  if (backing_) {
    // Of each piece of bookkeeping, the bytes for blocks [from, to): the order bytes, and of
    // each order's bitmap the words holding bits below to >> k that the last step did not.
    if (!reserve_new(h_->order_off, from, to)) return false;
    for (uint32_t k = 0; k <= h_->max_order; ++k)
      if (!reserve_new(h_->free_off[k], ((from >> k) + 63) / 64 * 8, ((to >> k) + 63) / 64 * 8))
        return false;
  }
  reinterpret_cast<std::atomic<uint64_t>*>(&h_->grown_blocks)->store(to, std::memory_order_release);
  EMU_KILL_POINT(KillPoint::heap_grow);  // grown, its new blocks in no state: leaked blocks
  // The new blocks are rarely one power of two: the largest aligned blocks that fit.
  for (uint64_t pos = from; pos < to;) {
    uint32_t k = h_->max_order;
    while (k > 0 && ((pos & ((1ull << k) - 1)) != 0 || pos + (1ull << k) > to)) --k;
    give_back(k, pos >> k);
    pos += 1ull << k;
  }
  return true;
}

bool ShmHeap::test(uint32_t order, uint64_t i) const {
  return (bitmap(order)[i / 64] >> (i % 64)) & 1;
}

void ShmHeap::set(uint32_t order, uint64_t i, bool free) {
  uint64_t* w = &bitmap(order)[i / 64];
  uint64_t bit = 1ull << (i % 64);
  store_word(w, free ? (*w | bit) : (*w & ~bit));
}

bool ShmHeap::take_any(uint32_t order, uint64_t* i) {
  uint64_t n = blocks_at(order);
  uint64_t* bm = bitmap(order);
  for (uint64_t w = 0; w * 64 < n; ++w) {
    if (!bm[w]) continue;
    uint64_t idx = w * 64 + static_cast<uint64_t>(__builtin_ctzll(bm[w]));
    if (idx >= n) return false;
    set(order, idx, false);
    *i = idx;
    return true;
  }
  return false;
}

bool ShmHeap::take_block(uint32_t order, uint64_t* i) {
  if (order > h_->max_order) return false;
  if (take_any(order, i)) return true;
  uint64_t parent;
  if (!take_block(order + 1, &parent)) return false;
  // Death here leaks the parent; after the next store, its first half.
  set(order, parent * 2 + 1, true);
  *i = parent * 2;
  return true;
}

void ShmHeap::give_back(uint32_t order, uint64_t i) {
  uint64_t buddy = i ^ 1;
  if (order < h_->max_order && buddy < blocks_at(order) && test(order, buddy)) {
    set(order, buddy, false);  // death here leaks both halves
    give_back(order + 1, i / 2);
    return;
  }
  set(order, i, true);
}

uint64_t ShmHeap::alloc(size_t bytes, size_t align) {
  uint64_t want = bytes < align ? align : bytes;
  uint32_t order = 0;
  while ((kHeapMinBlock << order) < want) ++order;
  if (order > h_->max_order) return 0;
  uint64_t i;
  while (!take_block(order, &i))
    if (!grow()) return 0;      // full, or no room for the bookkeeping of more
  uint64_t block = i << order;  // in min blocks
  uint64_t off = h_->heap_off + block * kHeapMinBlock;
  if (backing_ && !backing_->reserve(off, kHeapMinBlock << order)) {
    give_back(order, i);
    return 0;
  }
  EMU_KILL_POINT(KillPoint::heap_alloc);  // taken, not yet a block's head: a leaked block
  store_byte(reinterpret_cast<uint8_t*>(base_ + h_->order_off) + block,
             static_cast<uint8_t>(order + 1));
  std::memset(base_ + off, 0, kHeapMinBlock << order);
  return off;
}

void ShmHeap::free(uint64_t off) {
  if (off < h_->heap_off) return;
  uint64_t block = (off - h_->heap_off) / kHeapMinBlock;
  if (block >= grown()) return;
  uint8_t* ob = reinterpret_cast<uint8_t*>(base_ + h_->order_off) + block;
  if (*ob == 0) return;  // not a block's head (or freed already): nothing to do
  uint32_t order = *ob - 1;
  store_byte(ob, 0);  // death here leaks the block
  // Its pages go back before the block is free: nobody can have been handed it yet. A block
  // smaller than a page shares its page with others (heap_off is page aligned); one under
  // kKeepPagesBelow keeps them for the next.
  uint64_t bytes = kHeapMinBlock << order;
  if (backing_ && bytes >= kKeepPagesBelow) backing_->release(off, bytes);
  give_back(order, block >> order);
}

uint64_t ShmHeap::free_bytes() const {
  const uint64_t blocks = grown();  // once: the checker calls this while others may allocate
  uint64_t total = (h_->heap_blocks - blocks) * kHeapMinBlock;  // not grown over yet: free
  for (uint32_t k = 0; k <= h_->max_order; ++k)
    for (uint64_t i = 0; i < (blocks >> k); ++i)
      if (test(k, i)) total += kHeapMinBlock << k;
  return total;
}

}  // namespace emu
