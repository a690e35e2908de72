// The segment's buddy heap (emu/shm/shm_heap.h): blocks are aligned and zeroed, what is freed
// merges back to the initial free space, exhaustion gives 0, and bad frees change nothing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "shm/shm_heap.h"

using namespace emu;

namespace {

struct Arena {
  std::vector<uint64_t> mem;
  ShmHeapHeader* h;
  explicit Arena(size_t bytes) : mem(bytes / 8) {
    h = reinterpret_cast<ShmHeapHeader*>(mem.data());
    ShmHeap::init(base(), h, 4096, bytes);
  }
  char* base() { return reinterpret_cast<char*>(mem.data()); }
  ShmHeap heap() { return ShmHeap(base(), h); }
};

}  // namespace

TEST(ShmHeap, AlignedZeroedAndMergedBack) {
  Arena a(64 << 20);
  ShmHeap heap = a.heap();
  uint64_t initial = heap.free_bytes();
  ASSERT_GT(initial, 60u << 20);
  std::mt19937 rng(7);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 1500; ++i) {
    size_t bytes = 1 + rng() % 20000;
    size_t align = rng() % 2 ? 4096 : 64;
    uint64_t off = heap.alloc(bytes, align);
    ASSERT_NE(off, 0u);
    EXPECT_EQ(off % align, 0u);
    for (size_t k = 0; k < bytes; k += 997) EXPECT_EQ(a.base()[off + k], 0) << "not zeroed";
    std::memset(a.base() + off, 0xab, bytes);
    offs.push_back(off);
    if (rng() % 3 == 0) {
      size_t j = rng() % offs.size();
      heap.free(offs[j]);
      offs.erase(offs.begin() + static_cast<long>(j));
    }
  }
  for (uint64_t off : offs) heap.free(off);
  EXPECT_EQ(heap.free_bytes(), initial) << "every block merged back";
}

TEST(ShmHeap, ExhaustionAndBadFrees) {
  Arena a(2 << 20);
  ShmHeap heap = a.heap();
  uint64_t initial = heap.free_bytes();
  std::vector<uint64_t> offs;
  for (;;) {
    uint64_t off = heap.alloc(64 * 1024, 64);
    if (!off) break;
    offs.push_back(off);
  }
  EXPECT_FALSE(offs.empty());
  EXPECT_EQ(heap.alloc(64 * 1024, 64), 0u);
  heap.free(offs[0] + 64);  // not a block's head
  heap.free(1);             // not in the heap
  heap.free(offs[0]);
  heap.free(offs[0]);  // twice: the second finds no head and does nothing
  EXPECT_NE(heap.alloc(64 * 1024, 64), 0u) << "the freed block is found again";
  for (size_t i = 1; i < offs.size(); ++i) heap.free(offs[i]);
  EXPECT_LT(heap.free_bytes(), initial);  // the re-allocated block is still out
}
