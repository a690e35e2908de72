// SPDX-License-Identifier: BSD-2-Clause
// A campaign's seeds and shards. One master seed names a whole campaign of B runs; run i's seed is
// a function of the master seed and i only, so a run is the same run whichever machine or shard
// does it, and shard results add up to exactly what one machine running all B runs reports.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace emu::sched {

// splitmix64's output function: a bijection that scatters nearby inputs.
uint64_t splitmix64(uint64_t x);
// The seed of run `run_index` of the campaign of `master`.
uint64_t run_seed(uint64_t master, uint64_t run_index);

// Shard `index` of `count` (0 <= index < count) takes runs index, index + count, ... of a campaign.
struct Shard {
  uint32_t index = 0;
  uint32_t count = 1;
  // The first run of this shard at or after `run`; iterate with `r = next_run(r + 1)`.
  uint64_t next_run(uint64_t run) const;
  bool operator==(const Shard&) const = default;
};
// "i/N" as on a command line (--shard 1/4); false (and *out untouched) on malformed text.
bool parse_shard(std::string_view text, Shard* out);

constexpr uint64_t kNoRun = UINT64_MAX;

// What a campaign (or one shard of it) found.
struct CampaignTotals {
  uint64_t master_seed = 0;
  uint64_t schedules = 0;
  uint64_t failures = 0;
  std::map<std::string, uint64_t> failures_by_signature;
  uint64_t first_failing_run = kNoRun;  // the lowest failing run index
  uint64_t first_failing_seed = 0;      // its seed (run_seed(master_seed, first_failing_run))

  // One run's result; an empty signature is a pass.
  void add_run(uint64_t run_index, uint64_t seed, const std::string& signature);
  bool operator==(const CampaignTotals&) const = default;
};

// Adds `shard` into `*into`, as if one machine had run both sets of runs; false (and *into
// untouched) when they belong to different master seeds.
bool merge_totals(const CampaignTotals& shard, CampaignTotals* into);

// A JSON object, one line: {"master_seed":"0x..","schedules":..,"failures":..,
// "first_failing_run":..|null,"first_failing_seed":"0x..","failures_by_signature":{..}}.
std::string format_totals(const CampaignTotals& t);
// Reads what format_totals writes (keys in any order, whitespace between tokens); false (and *out
// untouched) otherwise. In the emu_tools library (the tools' merge of shards), not in emu's.
bool parse_totals(std::string_view text, CampaignTotals* out);

}  // namespace emu::sched
