// SPDX-License-Identifier: BSD-2-Clause
// Registered private memory moved into the registration file while an MR covers it, and back when
// none does (verbs_provider/memory/shared_mr.cpp, page_move.cpp; docs/design/registered-memory.md,
// "Registered memory shared for real"): the program's addresses, bytes and concurrent stores are
// kept, a child of fork() gets a private copy, and memory the program replaced itself is never
// taken for the old. Under EMU_SHARED_MR=0 (the *_private variant) nothing moves, and the same
// tests say so.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fork_check.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// The name /proc/self/maps gives the mapping holding p ("" for anonymous memory).
std::string mapping_name(const void* p) {
  uint64_t a = reinterpret_cast<uint64_t>(p);
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  std::string out = "(unmapped)";
  char line[512];
  while (f && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char name[256] = "";
    if (std::sscanf(line, "%lx-%lx %*s %*s %*s %*s %255[^\n]", &lo, &hi, name) < 2) continue;
    if (a >= lo && a < hi) {
      out = name;
      break;
    }
  }
  if (f) std::fclose(f);
  return out;
}

bool in_reg_file(const void* p) { return mapping_name(p).find("rdmaemu-mr") != std::string::npos; }

class SharedMr : public VerbsTest {
 protected:
  void TearDown() override {
    VerbsTest::TearDown();
    for (const auto& [p, len] : maps) munmap(p, len);
  }
  ibv_mr* reg(void* p, size_t len) { return ibv_reg_mr(pd, p, len, kAllAccess); }
  // len bytes of new private anonymous memory, unmapped at TearDown (nullptr: mmap failed).
  uint8_t* map_anon(size_t len) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    maps.emplace_back(static_cast<uint8_t*>(p), len);
    return static_cast<uint8_t*>(p);
  }
  // The same (*p) filled with the pattern (seed, step) and registered whole (*mr, which the test
  // deregisters).
  void map_filled_and_registered(size_t len, uint8_t seed, uint8_t step, uint8_t** p, ibv_mr** mr) {
    *p = map_anon(len);
    ASSERT_NE(*p, nullptr);
    fill_pattern(*p, len, seed, step);
    *mr = reg(*p, len);
    ASSERT_NE(*mr, nullptr);
  }
  std::vector<std::pair<uint8_t*, size_t>> maps;
};

// The pages are the file's exactly while registered; the bytes stay; afterwards the memory is
// private anonymous again (MADV_DONTNEED gives zeros, as for any private page).
TEST_F(SharedMr, PagesAreTheFilesWhileRegisteredAndPrivateAfter) {
  const size_t len = 16 * kPage;
  uint8_t* p = nullptr;
  ibv_mr* mr = nullptr;
  ASSERT_NO_FATAL_FAILURE(map_filled_and_registered(len, 3, 7, &p, &mr));
  EXPECT_EQ(in_reg_file(p), moving_on());
  EXPECT_EQ(in_reg_file(p + len - 1), moving_on());
  EXPECT_TRUE(has_pattern(p, len, 3, 7));
  fill_pattern(p, len, 9, 5);  // stores while registered
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(in_reg_file(p));
  EXPECT_TRUE(has_pattern(p, len, 9, 5));
  ASSERT_EQ(madvise(p, len, MADV_DONTNEED), 0);
  EXPECT_EQ(p[0], 0);
  EXPECT_EQ(p[len - 1], 0);
}

// Only the whole pages inside the MR move: the first and last page hold other data too.
TEST_F(SharedMr, OnlyWholePagesInsideTheRegionMove) {
  uint8_t* p = map_anon(4 * kPage);
  ASSERT_NE(p, nullptr);
  ibv_mr* mr = reg(p + 100, 3 * kPage);  // pages 0..3, whole only 1 and 2
  ASSERT_NE(mr, nullptr);
  EXPECT_FALSE(in_reg_file(p));
  EXPECT_EQ(in_reg_file(p + kPage), moving_on());
  EXPECT_EQ(in_reg_file(p + 2 * kPage), moving_on());
  EXPECT_FALSE(in_reg_file(p + 3 * kPage));
  // Page 0 is covered by an MR that did not move it (an engine may be writing it with a system
  // call): an MR over it whole may not move it either, and works without.
  ibv_mr* over = reg(p, kPage);
  ASSERT_NE(over, nullptr);
  EXPECT_FALSE(in_reg_file(p));
  ASSERT_EQ(ibv_dereg_mr(over), 0);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(in_reg_file(p + kPage));
}

// Two MRs over overlapping pages: the shared pages stay in the file until the last MR goes.
TEST_F(SharedMr, OverlappingMrsLeaveThePagesTheyShareToTheLast) {
  const size_t len = 12 * kPage;
  uint8_t* p = map_anon(len);
  ASSERT_NE(p, nullptr);
  fill_pattern(p, len, 1, 3);
  ibv_mr* a = reg(p, 8 * kPage);
  ibv_mr* b = reg(p + 4 * kPage, 8 * kPage);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (size_t pg = 0; pg < 12; ++pg) EXPECT_EQ(in_reg_file(p + pg * kPage), moving_on()) << pg;
  ASSERT_EQ(ibv_dereg_mr(a), 0);
  for (size_t pg = 0; pg < 4; ++pg) EXPECT_FALSE(in_reg_file(p + pg * kPage)) << pg;
  for (size_t pg = 4; pg < 12; ++pg) EXPECT_EQ(in_reg_file(p + pg * kPage), moving_on()) << pg;
  EXPECT_TRUE(has_pattern(p, len, 1, 3));
  ASSERT_EQ(ibv_dereg_mr(b), 0);
  for (size_t pg = 0; pg < 12; ++pg) EXPECT_FALSE(in_reg_file(p + pg * kPage)) << pg;
  EXPECT_TRUE(has_pattern(p, len, 1, 3));
}

// Other threads store into the region all the while it is registered and deregistered, over and
// over (each time its pages move into the file and back): every store is kept. Each writer checks,
// before every store, that its previous store into that word is still there.
TEST_F(SharedMr, StoresRacingTheMovesAreKept) {
  const size_t len = 64 * kPage;
  uint8_t* p = map_anon(len);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0, len);
  constexpr int kWriters = 2;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lost{0}, stores{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t)
    writers.emplace_back([&, t] {
      std::vector<uint64_t> last(len / kPage, 0);
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (size_t pg = 0; pg < len / kPage; ++pg) {
          auto* w = reinterpret_cast<volatile uint64_t*>(p + pg * kPage + 64 * t);
          if (*w != last[pg]) lost.fetch_add(1, std::memory_order_relaxed);
          *w = ++last[pg];
          ++n;
        }
      }
      stores.fetch_add(n);
    });
  for (int i = 0; i < 300; ++i) {
    ibv_mr* mr = reg(p, len);
    ASSERT_NE(mr, nullptr);
    ASSERT_EQ(ibv_dereg_mr(mr), 0);
  }
  stop = true;
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(lost.load(), 0u) << "of " << stores.load() << " stores";
  EXPECT_FALSE(in_reg_file(p));
}

// A child of fork() gets the registered pages as private memory with the bytes of the fork:
// its stores stay its own, the parent's its own, and the parent's MR keeps the parent's pages.
TEST_F(SharedMr, AForkChildGetsAPrivateCopy) {
  const size_t len = 8 * kPage;
  uint8_t* p = nullptr;
  ibv_mr* mr = nullptr;
  ASSERT_NO_FATAL_FAILURE(map_filled_and_registered(len, 5, 11, &p, &mr));
  int status = fork_and_check([&] {
    int bad = 0;
    if (!has_pattern(p, len, 5, 11)) bad |= 1;
    if (in_reg_file(p)) bad |= 2;
    fill_pattern(p, len, 200, 1);
    if (!has_pattern(p, len, 200, 1)) bad |= 4;
    return bad;
  });
  ASSERT_GE(status, 0) << "fork or waitpid failed";
  ASSERT_LT(status, 128) << "the child died of signal " << status - 128;
  EXPECT_EQ(status, 0) << "1: bytes, 2: still shared, 4: its stores";
  EXPECT_TRUE(has_pattern(p, len, 5, 11));  // the child's stores stayed in the child
  EXPECT_EQ(in_reg_file(p), moving_on());
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_TRUE(has_pattern(p, len, 5, 11));
}

// The program unmaps registered memory and maps new memory at the same address while the MR is
// still registered (legal: the MR keeps the old pages, as pinned pages are kept). A registration
// of the new memory must not take the old pages for it, and the old MR's going must not touch it.
TEST_F(SharedMr, MemoryMappedAnewWhileRegisteredIsNotTheOldPages) {
  const size_t len = 4 * kPage;
  uint8_t* p = nullptr;
  ibv_mr* old_mr = nullptr;
  ASSERT_NO_FATAL_FAILURE(map_filled_and_registered(len, 7, 7, &p, &old_mr));
  void* again =
      mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(again, p);
  EXPECT_EQ(p[0], 0);  // new memory
  fill_pattern(p, len, 40, 3);
  ibv_mr* new_mr = reg(p, len);
  ASSERT_NE(new_mr, nullptr);
  EXPECT_FALSE(in_reg_file(p));  // the file's pages at this address are the old MR's
  EXPECT_TRUE(has_pattern(p, len, 40, 3));
  ASSERT_EQ(ibv_dereg_mr(old_mr), 0);
  EXPECT_TRUE(has_pattern(p, len, 40, 3));
  ASSERT_EQ(ibv_dereg_mr(new_mr), 0);
  EXPECT_TRUE(has_pattern(p, len, 40, 3));
  // Once the old MR is gone the pages may move again.
  ibv_mr* third = reg(p, len);
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(in_reg_file(p), moving_on());
  EXPECT_TRUE(has_pattern(p, len, 40, 3));
  ASSERT_EQ(ibv_dereg_mr(third), 0);
}

// ODP MRs follow the page tables: their pages never move, and pages under one cannot move for
// another MR while it lives (an engine may be writing them with a system call).
TEST_F(SharedMr, PagesUnderAnOdpMrStayWhereTheyAre) {
  const size_t len = 4 * kPage;
  uint8_t* p = map_anon(len);
  ASSERT_NE(p, nullptr);
  ibv_mr* odp = ibv_reg_mr(pd, p, len, kAllAccess | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp, nullptr);
  EXPECT_FALSE(in_reg_file(p));
  ibv_mr* plain = reg(p, len);
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(in_reg_file(p));
  ASSERT_EQ(ibv_dereg_mr(plain), 0);
  ASSERT_EQ(ibv_dereg_mr(odp), 0);
}

}  // namespace
}  // namespace vt
