// SPDX-License-Identifier: BSD-2-Clause
// What a benchmark of a race search reports over many master seeds (concurrency-testing.md's
// measurement protocol): schedules to the first failure (median, p95), the hit rate with its
// Wilson 95% interval, and the PCT bound to compare with. Pure functions, unit-tested, in the
// emu_tools library: a program that reports them links it (libemu_verbs.so does not carry them).
#pragma once
#include <cstdint>
#include <vector>

namespace emu::sched {

struct HitStats {
  uint32_t seeds = 0;  // master seeds tried
  uint32_t hits = 0;   // seeds whose campaign failed within the budget
  double rate = 0, wilson_low = 0, wilson_high = 0;
  // Schedules to the first failure over the seeds that hit; a seed that missed counts as
  // budget + 1 (so a median above the budget says "not found by most seeds").
  uint64_t median = 0, p95 = 0;
};

// first_failure[i]: the schedules seed i ran up to and including its first failure, 0 if none
// within `budget`.
HitStats hit_stats(const std::vector<uint64_t>& first_failure, uint64_t budget);

// The Wilson score interval (z = 1.96) of `hits` successes in `n` trials.
void wilson_interval(uint32_t hits, uint32_t n, double* low, double* high);

// PCT's guarantee for one run: a bug of depth d among n threads and k steps is found with
// probability at least 1 / (n * k^(d-1)).
double pct_bound(uint32_t n, uint32_t k, uint32_t d);

// Schedules a campaign needs so that a per-run probability p finds the bug with probability q.
uint64_t schedules_for(double p, double q = 0.95);

}  // namespace emu::sched
