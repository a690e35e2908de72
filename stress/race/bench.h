// SPDX-License-Identifier: BSD-2-Clause
// emu-race bench: the measurement protocol of concurrency-testing.md over the built-in scenarios.
// Every buggy scenario x strategy x master seed: schedules to the first failure (median, p95) and
// the hit rate with its Wilson 95% interval beside PCT's bound; the fixed scenarios' failures over
// a large budget; schedules per second and ns per scheduling point. A benchmark, not a test: its
// figures go to docs/perf.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rig.h"

namespace race {

struct BenchOptions {
  uint32_t seeds = 100;              // master seeds per (buggy scenario, strategy)
  uint64_t budget = 3750;            // schedules per seed before it counts as a miss
  uint64_t control_budget = 100000;  // schedules of the fixed scenarios, in all
  std::vector<std::string> only;     // scenario names (empty: all)
};

// Prints the tables (markdown) to stdout; returns 0.
int run_bench(Rig& rig, const BenchOptions& o);

}  // namespace race
