// SPDX-License-Identifier: BSD-2-Clause
// The segment's allocator: a buddy allocator whose state is a free bitmap per order and an order
// byte per block, all in the segment. Every step of an allocation or a free is one store, ordered
// so that a process SIGKILLed between any two of them leaves at most a leaked block, never a block
// owned twice or a broken structure (a tree allocator's multi-word updates cannot promise that).
// Callers serialise calls (Segment holds a flock on the segment file, which the kernel drops if
// its holder dies, and a process mutex).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "emu/layout.h"  // ShmHeapHeader

namespace emu {

// What holds the heap's pages. A segment file on tmpfs reserves a block's pages before the heap
// writes them (so a full tmpfs is a failed allocation, not a bus error) and gives a free block's
// whole pages back. Without one (plain memory) every page is there already.
class HeapBacking {
 public:
  virtual bool reserve(uint64_t off, uint64_t len) = 0;  // false: no room
  virtual void release(uint64_t off, uint64_t len) = 0;  // whole pages nobody uses now
 protected:
  ~HeapBacking() = default;
};

struct HeapLeaks {
  uint64_t blocks = 0;  // leaked blocks (maximal aligned runs of the buddy system)
  uint64_t bytes = 0;
};

class ShmHeap {
 public:
  // base: the segment; h: its heap header (inside the segment). Lays the heap out over
  // [meta_off, size) of a fresh segment and grows it by one step; false if `backing` has no room
  // for that step's bookkeeping. The rest of the bookkeeping takes pages as the heap grows, so a
  // large `size` is address space, not memory.
  static bool init(char* base, ShmHeapHeader* h, uint64_t meta_off, uint64_t size,
                   HeapBacking* backing = nullptr);

  ShmHeap(char* base, ShmHeapHeader* h, HeapBacking* backing = nullptr)
      : base_(base), h_(h), backing_(backing) {}
  // Offset of a zeroed block of at least `bytes` aligned to `align` (<= 4096), 0 if none is free
  // or the backing has no room for it. With no free block of the size the heap grows first.
  uint64_t alloc(size_t bytes, size_t align);
  void free(uint64_t off);
  // Blocks free at each order summed, and the heap not grown over yet, in bytes (tests, census).
  uint64_t free_bytes() const;
  // The consistency checker's walk (audit/shm_heap_check.cpp): every block is free at exactly one
  // order or inside exactly one allocated block; problems are appended as text. Returns the
  // allocated blocks as {offset, bytes}.
  struct Block {
    uint64_t off, bytes;
  };
  std::vector<Block> check(uint64_t segment_size, std::vector<std::string>* problems) const;

  // The heap audit (audit/heap_audit.cpp): the blocks neither free nor inside a block whose head
  // offset is in `heads` (what the objects name) are leaked — taken by a process killed inside an
  // allocation, or left by one killed while freeing. With `reclaim` they are given back. The
  // caller holds the allocator's lock, and no block may be between its allocation and the store
  // that names it in a slot (Segment::audit_heap sees to both).
  HeapLeaks audit(const uint64_t* heads, size_t n, bool reclaim);

 private:
  uint64_t* bitmap(uint32_t order) const {
    return reinterpret_cast<uint64_t*>(base_ + h_->free_off[order]);
  }
  uint64_t grown() const;  // the blocks with bookkeeping (ShmHeapHeader::grown_blocks)
  uint64_t blocks_at(uint32_t order) const { return grown() >> order; }
  bool grow();  // one growth step; false if the heap is whole or the backing has no room
  bool reserve_new(uint64_t base, uint64_t lo, uint64_t hi);
  bool test(uint32_t order, uint64_t i) const;
  void set(uint32_t order, uint64_t i, bool free);
  bool take_any(uint32_t order, uint64_t* i);    // a free block of that order, marked taken
  bool take_block(uint32_t order, uint64_t* i);  // splitting a larger one if needed
  void give_back(uint32_t order, uint64_t i);    // free, merging with a free buddy

  char* base_;
  ShmHeapHeader* h_;
  HeapBacking* backing_;
};

}  // namespace emu
