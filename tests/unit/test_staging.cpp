// SPDX-License-Identifier: BSD-2-Clause
// The receive staging area's slot map (emu/dma/staging.cpp): producers in several threads claim
// runs while a consumer releases them in another order; nothing is handed out twice, every slot
// comes back, and a full area refuses rather than waits.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "emu/staging.h"

using namespace emu;

namespace {

struct Area {
  std::vector<uint64_t> mem;
  explicit Area(uint64_t bytes) : mem(bytes / 8, 0) { staging_init(area(), bytes); }
  StagingArea* area() { return reinterpret_cast<StagingArea*>(mem.data()); }
};

TEST(Staging, SizesArePowersOfTwoWithinBounds) {
  EXPECT_EQ(staging_area_bytes(0), 0u);
  EXPECT_EQ(staging_area_bytes(1), kStagingMinBytes);
  EXPECT_EQ(staging_area_bytes(256 << 10), 256u << 10);
  EXPECT_EQ(staging_area_bytes((256 << 10) + 1), 512u << 10);
  EXPECT_EQ(staging_area_bytes(1ull << 40), kStagingMaxBytes);
}

TEST(Staging, RunsAreDisjointAndSlotZeroIsTheMap) {
  Area a(256 << 10);
  std::vector<StagedRef> refs;
  StagedRef r;
  // 3 KiB payloads: 3 slots each; 255 usable slots in 4 words of 64 (word 0 loses slot 0).
  while (staging_take(a.area(), 3000, &r)) refs.push_back(r);
  EXPECT_EQ(refs.size(), 21u + 3 * 21);
  uint8_t* base = reinterpret_cast<uint8_t*>(a.area());
  std::vector<int> owner(256, -1);
  for (size_t i = 0; i < refs.size(); ++i) {
    uint64_t slot = (staging_data(a.area(), refs[i]) - base) >> kStagingSlotShift;
    EXPECT_GE(slot, 1u);
    for (uint64_t s = slot; s < slot + 3; ++s) {
      ASSERT_LT(s, 256u);
      EXPECT_EQ(owner[s], -1) << "slot " << s << " handed out twice";
      owner[s] = static_cast<int>(i);
    }
  }
  EXPECT_EQ(staging_taken(a.area()), refs.size() * 3);
}

TEST(Staging, FullAreaRefusesAndOutOfOrderReleaseGivesEverythingBack) {
  Area a(64 << 10);  // one word: 63 slots
  StagedRef big;
  EXPECT_FALSE(staging_take(a.area(), 64 << 10, &big));  // never fits beside the map
  EXPECT_FALSE(staging_take(a.area(), (64 << 10) + 1, &big));
  std::vector<StagedRef> refs(63);
  for (auto& r : refs) ASSERT_TRUE(staging_take(a.area(), 1, &r));
  StagedRef more;
  EXPECT_FALSE(staging_take(a.area(), 1, &more));  // full: the caller places directly
  for (size_t i = 0; i < refs.size(); i += 2) staging_release(a.area(), refs[i]);
  EXPECT_FALSE(staging_take(a.area(), 2 * kStagingSlotBytes, &more));  // no run of two is free
  EXPECT_TRUE(staging_take(a.area(), kStagingSlotBytes, &more));
  staging_release(a.area(), more);
  for (size_t i = 1; i < refs.size(); i += 2) staging_release(a.area(), refs[i]);
  EXPECT_EQ(staging_taken(a.area()), 0u);
  EXPECT_TRUE(staging_take(a.area(), 63 * kStagingSlotBytes, &big));
}

TEST(Staging, ConcurrentProducersAndOneReleaser) {
  Area a(256 << 10);
  constexpr int kProducers = 3;
  constexpr int kPerProducer = 20000;
  // A single-producer queue per producer thread to the consumer, which releases in round-robin
  // order over producers: not the order of the claims.
  struct Queue {
    std::vector<StagedRef> refs = std::vector<StagedRef>(kPerProducer);
    std::atomic<int> pushed{0};
  };
  std::vector<Queue> qs(kProducers);
  std::atomic<int> refused{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer;) {
        StagedRef r;
        uint64_t len = 1 + (i * 977 + p * 131) % (8 * kStagingSlotBytes);
        if (!staging_take(a.area(), len, &r)) {
          refused.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::yield();
          continue;
        }
        std::memset(staging_data(a.area(), r), p * 64 + (i & 63), len);  // ours alone
        qs[p].refs[i] = r;
        qs[p].pushed.store(++i, std::memory_order_release);
      }
    });
  std::vector<int> done(kProducers, 0);
  for (int left = kProducers * kPerProducer; left;) {
    for (int p = 0; p < kProducers; ++p) {
      if (done[p] == qs[p].pushed.load(std::memory_order_acquire)) continue;
      const StagedRef& r = qs[p].refs[done[p]];
      EXPECT_EQ(staging_data(a.area(), r)[0], p * 64 + (done[p] & 63));
      staging_release(a.area(), r);
      ++done[p];
      --left;
    }
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(staging_taken(a.area()), 0u);
}

}  // namespace
