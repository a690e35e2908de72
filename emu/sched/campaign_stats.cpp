// SPDX-License-Identifier: BSD-2-Clause
#include "emu/sched/campaign_stats.h"

#include <algorithm>
#include <cmath>

namespace emu::sched {

namespace {
// The q-quantile by the nearest-rank rule (sorted, non-empty).
uint64_t nearest_rank(const std::vector<uint64_t>& sorted, double q) {
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(rank, 1) - 1];
}
}  // namespace

void wilson_interval(uint32_t hits, uint32_t n, double* low, double* high) {
  if (n == 0) {
    *low = 0;
    *high = 1;
    return;
  }
  const double z = 1.96, nn = n, p = hits / nn;
  double centre = (p + z * z / (2 * nn)) / (1 + z * z / nn);
  double half = z / (1 + z * z / nn) * std::sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn));
  *low = std::max(0.0, centre - half);
  *high = std::min(1.0, centre + half);
}

HitStats hit_stats(const std::vector<uint64_t>& first_failure, uint64_t budget) {
  HitStats s;
  s.seeds = static_cast<uint32_t>(first_failure.size());
  if (first_failure.empty()) return s;
  std::vector<uint64_t> sorted;
  for (uint64_t f : first_failure) {
    s.hits += f != 0;
    sorted.push_back(f != 0 ? f : budget + 1);
  }
  std::sort(sorted.begin(), sorted.end());
  s.rate = double(s.hits) / s.seeds;
  wilson_interval(s.hits, s.seeds, &s.wilson_low, &s.wilson_high);
  s.median = nearest_rank(sorted, 0.5);
  s.p95 = nearest_rank(sorted, 0.95);
  return s;
}

double pct_bound(uint32_t n, uint32_t k, uint32_t d) {
  return 1.0 / (double(n) * std::pow(double(k), double(d) - 1));
}

uint64_t schedules_for(double p, double q) {
  if (p >= 1) return 1;
  if (p <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(std::ceil(std::log(1 - q) / std::log(1 - p)));
}

}  // namespace emu::sched
