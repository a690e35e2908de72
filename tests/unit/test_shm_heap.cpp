// SPDX-License-Identifier: BSD-2-Clause
// The segment's buddy heap (emu/shm/shm_heap.h): blocks are aligned and zeroed, what is freed
// merges back to the initial free space, exhaustion gives 0, and bad frees change nothing.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <random>
#include <string>
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
  uint8_t& order_byte(uint64_t off) {
    return reinterpret_cast<uint8_t*>(base() + h->order_off)[(off - h->heap_off) / kHeapMinBlock];
  }
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

namespace {

// A backing with a fixed amount of room, recording what it was asked.
struct CountingBacking final : HeapBacking {
  uint64_t room;
  uint64_t reserved = 0, released = 0;
  explicit CountingBacking(uint64_t r) : room(r) {}
  bool reserve(uint64_t, uint64_t len) override {
    if (reserved + len > room) return false;
    reserved += len;
    return true;
  }
  void release(uint64_t, uint64_t len) override { released += len; }
};

}  // namespace

TEST(ShmHeap, ABackingWithNoRoomFailsTheAllocationAndLeavesTheHeapWhole) {
  Arena a(16 << 20);
  CountingBacking b(1 << 20);
  ShmHeap heap(a.base(), a.h, &b);
  uint64_t initial = heap.free_bytes();
  EXPECT_EQ(heap.alloc(2 << 20, 64), 0u) << "more than the backing has room for";
  EXPECT_EQ(heap.free_bytes(), initial) << "the block taken for it went back, merged";
  uint64_t before = b.reserved;  // the heap may have grown: its bookkeeping counts too
  uint64_t small = heap.alloc(100, 64);
  ASSERT_NE(small, 0u);
  EXPECT_EQ(b.reserved - before, 128u);
  uint64_t page = heap.alloc(8192, 4096);
  ASSERT_NE(page, 0u);
  uint64_t big = heap.alloc(64 << 10, 4096);
  ASSERT_NE(big, 0u);
  heap.free(small);
  EXPECT_EQ(b.released, 0u) << "a block smaller than a page shares its page";
  heap.free(page);
  EXPECT_EQ(b.released, 0u) << "a block under 64 KiB keeps its pages for the next";
  heap.free(big);
  EXPECT_EQ(b.released, 64u << 10) << "a block of 64 KiB or more gives them back";
  EXPECT_EQ(heap.free_bytes(), initial);
}

TEST(ShmHeap, InitFailsWhenTheBackingCannotHoldTheBookkeeping) {
  std::vector<uint64_t> mem((16 << 20) / 8);
  auto* h = reinterpret_cast<ShmHeapHeader*>(mem.data());
  CountingBacking none(0);
  EXPECT_FALSE(ShmHeap::init(reinterpret_cast<char*>(mem.data()), h, 4096, 16 << 20, &none));
}

namespace {

// A large heap in address space only (anonymous, untouched pages are no memory), recording
// which pages the heap reserved, so a test can tell a touch of anything else.
struct BigArena {
  static constexpr uint64_t kBytes = 4ull << 30;
  char* mem;
  ShmHeapHeader* h;
  BigArena() {
    mem = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    h = reinterpret_cast<ShmHeapHeader*>(mem);
  }
  ~BigArena() { munmap(mem, kBytes); }
  uint64_t resident_bytes() const {  // pages touched, mincore's count
    std::vector<unsigned char> v(kBytes / 4096);
    mincore(mem, kBytes, v.data());
    uint64_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n * 4096;
  }
};

}  // namespace

// The heap grows as allocations need (issue 18 item 3): a 4 GiB heap takes the bookkeeping of
// its first MiB, not the 80 MiB of all of it; blocks far beyond the first step are found by
// growing, every step's bookkeeping is reserved before it is touched, the checker and audit see
// one consistent heap, and what is freed merges back.
TEST(ShmHeap, ALargeHeapTakesBookkeepingAsItGrows) {
  BigArena a;
  ASSERT_NE(a.mem, MAP_FAILED);
  CountingBacking b(1ull << 40);
  ASSERT_TRUE(ShmHeap::init(a.mem, a.h, 4096, BigArena::kBytes, &b));
  EXPECT_LT(b.reserved, 128u << 10) << "the first step's bookkeeping, not the whole heap's";
  EXPECT_EQ(a.h->grown_blocks, 1u << kHeapGrowOrder);
  EXPECT_LT(a.resident_bytes(), 256u << 10) << "nothing beyond it was touched";
  ShmHeap heap(a.mem, a.h, &b);
  uint64_t initial = heap.free_bytes();
  EXPECT_GT(initial, 3ull << 30) << "the heap not grown over yet counts as free";

  // 40 MiB in 64 KiB and 1 MiB blocks, and one 16 MiB block: the heap grows to hold them.
  std::vector<uint64_t> offs;
  for (int i = 0; i < 40; ++i) {
    uint64_t off = heap.alloc(i % 2 ? 64 << 10 : 1 << 20, 4096);
    ASSERT_NE(off, 0u) << i;
    offs.push_back(off);
  }
  uint64_t big = heap.alloc(16 << 20, 4096);
  ASSERT_NE(big, 0u);
  EXPECT_EQ(big % (16 << 20), a.h->heap_off % (16 << 20)) << "a buddy block, aligned in the heap";
  offs.push_back(big);
  const uint64_t grown = a.h->grown_blocks * kHeapMinBlock;
  EXPECT_GE(grown, 40u << 20);
  EXPECT_LE(grown, 64u << 20) << "grown by what was asked, not to the end";
  uint64_t bookkeeping = b.reserved - (20ull << 20) - (20ull * 64 << 10) - (16ull << 20);
  EXPECT_LT(bookkeeping, grown / 32) << "1/50 of what it grew by, and some pages";
  std::vector<std::string> problems;
  EXPECT_EQ(heap.check(BigArena::kBytes, &problems).size(), offs.size());
  EXPECT_TRUE(problems.empty()) << problems[0];
  EXPECT_EQ(heap.audit(offs.data(), offs.size(), false).blocks, 0u);
  for (uint64_t off : offs) heap.free(off);
  EXPECT_EQ(heap.free_bytes(), initial) << "every block merged back";
  EXPECT_EQ(heap.audit(nullptr, 0, false).blocks, 0u);
  heap.check(BigArena::kBytes, &problems);
  EXPECT_TRUE(problems.empty()) << problems[0];
  EXPECT_LT(a.resident_bytes(), grown + (2u << 20)) << "no page beyond the grown heap touched";
}

TEST(ShmHeap, NoRoomToGrowFailsTheAllocationAndLaterRoomGrowsIt) {
  BigArena a;
  ASSERT_NE(a.mem, MAP_FAILED);
  CountingBacking b(1ull << 40);
  ASSERT_TRUE(ShmHeap::init(a.mem, a.h, 4096, BigArena::kBytes, &b));
  ShmHeap heap(a.mem, a.h, &b);
  uint64_t initial = heap.free_bytes();
  b.room = b.reserved + (512 << 10);  // room for a block in the first step, not for growing
  uint64_t small = heap.alloc(256 << 10, 4096);
  ASSERT_NE(small, 0u);
  EXPECT_EQ(heap.alloc(4 << 20, 4096), 0u) << "growing needs bookkeeping, and blocks need room";
  EXPECT_EQ(heap.free_bytes(), initial - (256 << 10)) << "nothing lost by the failed growth";
  b.room = 1ull << 40;
  uint64_t grown = heap.alloc(4 << 20, 4096);
  EXPECT_NE(grown, 0u);
  heap.free(small);
  heap.free(grown);
  EXPECT_EQ(heap.free_bytes(), initial);
  std::vector<std::string> problems;
  heap.check(BigArena::kBytes, &problems);
  EXPECT_TRUE(problems.empty()) << problems[0];
}

// The heap audit (docs/design/reliability.md, "Process death").
TEST(HeapAudit, ABlockNoOneNamesIsLeakedAndGivenBack) {
  Arena a(4 << 20);
  ShmHeap heap = a.heap();
  uint64_t initial = heap.free_bytes();
  uint64_t x = heap.alloc(100, 64), y = heap.alloc(8192, 4096), z = heap.alloc(64, 64);
  uint64_t all[] = {x, y, z}, without_y[] = {x, z};
  EXPECT_EQ(heap.audit(all, 3, false).blocks, 0u);
  HeapLeaks leaks = heap.audit(without_y, 2, false);
  EXPECT_EQ(leaks.blocks, 1u);
  EXPECT_EQ(leaks.bytes, 8192u);
  EXPECT_EQ(heap.audit(without_y, 2, true).blocks, 1u);
  EXPECT_EQ(heap.audit(without_y, 2, false).blocks, 0u) << "given back";
  heap.free(x);
  heap.free(z);
  EXPECT_EQ(heap.free_bytes(), initial) << "the reclaimed block merged with its buddies";
}

// The states a death leaves (shm_heap.cpp's comments): a block taken without its order byte
// (killed inside alloc), and a block whose order byte a free cleared before giving it back.
TEST(HeapAudit, BlocksHalfAllocatedOrHalfFreedAreReclaimed) {
  Arena a(4 << 20);
  ShmHeap heap = a.heap();
  uint64_t initial = heap.free_bytes();
  uint64_t taken = heap.alloc(4096, 4096), half_freed = heap.alloc(256, 64);
  a.order_byte(taken) = 0;
  a.order_byte(half_freed) = 0;
  uint64_t named[] = {half_freed};  // its dying slot still names it
  HeapLeaks leaks = heap.audit(named, 1, true);
  EXPECT_EQ(leaks.bytes, 4096u + 256u);
  EXPECT_EQ(heap.free_bytes(), initial);
  EXPECT_EQ(heap.audit(nullptr, 0, false).blocks, 0u);
}
