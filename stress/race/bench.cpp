// SPDX-License-Identifier: BSD-2-Clause
#include "bench.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "campaign.h"
#include "emu/sched/campaign_stats.h"
#include "scenario.h"

namespace race {

using namespace emu::sched;

namespace {

bool wanted(const BenchOptions& o, const ScenarioDef& d) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), d.name) != o.only.end();
}

struct Throughput {
  uint64_t schedules = 0, points = 0;
  double seconds = 0;
  void add(const CampaignReport& r) {
    schedules += r.totals.schedules;
    points += r.points;
    seconds += r.seconds;
  }
};

// One row per (buggy scenario, strategy).
void bench_buggy(Rig& rig, const BenchOptions& o, const ScenarioDef& d, Throughput* tp) {
  RunResult def_run = replay(d, rig, Schedule{});
  uint32_t n = static_cast<uint32_t>(def_run.positions.size()), k = def_run.steps;
  for (Search s : {Search::kRandom, Search::kPct}) {
    std::vector<uint64_t> first;
    for (uint32_t seed = 1; seed <= o.seeds; ++seed) {
      CampaignOptions c;
      c.search = s;
      c.master_seed = seed;
      c.budget = o.budget;
      c.shrink = false;
      CampaignReport r = run_campaign(d, rig, c);
      tp->add(r);
      first.push_back(r.failed ? r.failing_run + 1 : 0);
    }
    HitStats h = hit_stats(first, o.budget);
    double bound = pct_bound(n, k, 2);
    std::printf("| %s | %s | %u | %u | %" PRIu64 " | %" PRIu64
                " | %u/%u = %.2f [%.2f, %.2f] | 1/%.0f (n=%u, k=%u, d=2): %" PRIu64 " |\n",
                d.name.c_str(), search_name(s), n, k, h.median, h.p95, h.hits, h.seeds, h.rate,
                h.wilson_low, h.wilson_high, 1 / bound, n, k, schedules_for(bound));
  }
}

void bench_fixed(Rig& rig, const ScenarioDef& d, uint64_t budget, Throughput* tp) {
  uint64_t failures = 0, schedules = 0;
  for (Search s : {Search::kRandom, Search::kPct}) {
    CampaignOptions c;
    c.search = s;
    c.master_seed = 1;
    c.budget = budget / 2;
    c.keep_going = true;
    c.shrink = false;
    CampaignReport r = run_campaign(d, rig, c);
    tp->add(r);
    failures += r.totals.failures;
    schedules += r.totals.schedules;
  }
  std::printf("| %s | %" PRIu64 " | %" PRIu64 " |\n", d.name.c_str(), schedules, failures);
}

}  // namespace

int run_bench(Rig& rig, const BenchOptions& o) {
  Throughput tp;
  std::printf("Buggy scenarios: %u master seeds per strategy, budget %" PRIu64
              " schedules per seed (a miss counts as budget + 1)\n\n",
              o.seeds, o.budget);
  std::printf(
      "| scenario | strategy | actors n | steps k | median | p95 | hit rate [Wilson 95%%] | PCT "
      "bound per run: schedules for 95%% |\n|---|---|---|---|---|---|---|---|\n");
  uint32_t fixed = 0;
  for (const ScenarioDef& d : scenarios())
    if (wanted(o, d)) d.buggy ? bench_buggy(rig, o, d, &tp) : void(++fixed);
  if (fixed) {
    uint64_t each = std::max<uint64_t>(2, o.control_budget / fixed);
    std::printf("\nFixed scenarios: %" PRIu64
                " schedules in all (random walk and PCT, half each)\n\n"
                "| scenario | schedules | failures |\n|---|---|---|\n",
                each * fixed);
    for (const ScenarioDef& d : scenarios())
      if (wanted(o, d) && !d.buggy) bench_fixed(rig, d, each, &tp);
  }
  std::printf(
      "\nThroughput (one core, every schedule above): %.0f schedules/s, %.0f ns per "
      "scheduling point\n",
      tp.schedules / tp.seconds, tp.seconds * 1e9 / double(tp.points));
  return 0;
}

}  // namespace race
