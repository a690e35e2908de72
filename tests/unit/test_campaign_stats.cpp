// SPDX-License-Identifier: BSD-2-Clause
// The benchmark's statistics: Wilson intervals, quantiles with misses, the PCT bound.
#include <gtest/gtest.h>

#include "emu/sched/campaign_stats.h"

using namespace emu::sched;

TEST(CampaignStats, WilsonIntervalMatchesTheTextbookValues) {
  double lo, hi;
  wilson_interval(50, 100, &lo, &hi);  // p = 0.5, n = 100: [0.404, 0.596]
  EXPECT_NEAR(lo, 0.4038, 1e-3);
  EXPECT_NEAR(hi, 0.5962, 1e-3);
  wilson_interval(100, 100, &lo, &hi);  // all hits: the upper bound is 1, the lower 0.963
  EXPECT_NEAR(lo, 0.9630, 1e-3);
  EXPECT_DOUBLE_EQ(hi, 1.0);
  wilson_interval(0, 100, &lo, &hi);
  EXPECT_DOUBLE_EQ(lo, 0.0);
  EXPECT_NEAR(hi, 0.0370, 1e-3);
}

TEST(CampaignStats, MissesCountAsBeyondTheBudget) {
  // Ten seeds: eight found the bug, two missed within a budget of 1000.
  std::vector<uint64_t> f = {5, 1, 40, 7, 0, 3, 0, 12, 9, 2};
  HitStats s = hit_stats(f, 1000);
  EXPECT_EQ(s.seeds, 10u);
  EXPECT_EQ(s.hits, 8u);
  EXPECT_DOUBLE_EQ(s.rate, 0.8);
  EXPECT_EQ(s.median, 7u);  // sorted: 1 2 3 5 7 9 12 40 1001 1001; rank 5
  EXPECT_EQ(s.p95, 1001u);  // rank 10: a miss
  EXPECT_LT(s.wilson_low, 0.8);
  EXPECT_GT(s.wilson_high, 0.8);
}

TEST(CampaignStats, PctBoundAndTheSchedulesItImplies) {
  // concurrency-testing.md: n = 5, k = 250, d = 2 gives 1/1250 and about 3,750 schedules for 95%.
  EXPECT_DOUBLE_EQ(pct_bound(5, 250, 2), 1.0 / 1250);
  EXPECT_DOUBLE_EQ(pct_bound(5, 250, 1), 1.0 / 5);
  uint64_t n = schedules_for(1.0 / 1250);
  EXPECT_GE(n, 3700u);
  EXPECT_LE(n, 3760u);
}
