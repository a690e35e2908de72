// SPDX-License-Identifier: BSD-2-Clause
// One campaign of a scenario (random walk, PCT or bounded exhaustive search) over the rig, and
// what a failure turns into: the shrunk schedule, a report a person reads, the Perfetto trace.
// A benchmark is a loop over (scenario, strategy, master seed) calling run_campaign.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emu/sched/sched.h"
#include "emu/sched/seeds.h"
#include "emu/sched/shrink.h"
#include "scenario.h"

namespace race {

// kDfs: preemption-bounded exhaustive search; kDelays: delay-bounded (BoundKind in
// emu/sched/sched.h).
enum class Search { kRandom, kPct, kDfs, kDelays };
inline bool exhaustive(Search s) { return s == Search::kDfs || s == Search::kDelays; }
bool parse_search(const std::string& s, Search* out);
const char* search_name(Search s);

struct CampaignOptions {
  Search search = Search::kRandom;
  uint64_t master_seed = 1;
  uint64_t budget = 10000;  // schedules (this shard's share of runs 0..budget-1)
  uint32_t bound = 2;       // dfs: preemptions; delays: delays
  emu::sched::Shard shard;
  bool keep_going = false;  // random/pct: run the whole budget (totals), not stop at a failure
  bool shrink = true;
};

struct CampaignReport {
  emu::sched::CampaignTotals totals;
  bool failed = false;
  uint64_t failing_run = 0;   // random/pct: the run index (its seed: totals.first_failing_seed)
  uint64_t failing_seed = 0;  // its per-run seed
  emu::sched::RunResult failure;
  bool exhausted = false;  // dfs/delays: every schedule within the bound was run
  double seconds = 0;      // wall time of the runs (reported, never asserted)
  uint64_t points = 0;     // random/pct: scheduling points over every run
  emu::sched::Schedule shrunk;
  emu::sched::ShrinkStats shrink_stats;
  emu::sched::RunResult shrunk_run;  // the shrunk schedule's replay (its trace is the report's)
};

CampaignReport run_campaign(const ScenarioDef& def, Rig& rig, const CampaignOptions& o);

// One replay of a schedule.
emu::sched::RunResult replay(const ScenarioDef& def, Rig& rig, const emu::sched::Schedule& s);

// The run as text: who stored what, where, in which order, and what the device executed.
std::string describe_run(const emu::sched::RunResult& r, const std::vector<std::string>& races);
// Writes the run's Perfetto trace (one track per actor, the device's race events as instants).
bool write_trace(const std::string& path, const emu::sched::RunResult& r,
                 const std::vector<std::string>& races);

}  // namespace race
