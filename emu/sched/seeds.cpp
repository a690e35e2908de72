// SPDX-License-Identifier: BSD-2-Clause
// Seeds, shards and campaign totals (emu/sched/seeds.h).
#include "emu/sched/seeds.h"

#include "sched/json_text.h"

namespace emu::sched {

namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;  // splitmix64's increment
}  // namespace

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + kGolden;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The run_index-th output of the splitmix64 generator seeded with `master`, computed directly so
// that no run depends on the runs before it.
uint64_t run_seed(uint64_t master, uint64_t run_index) {
  return splitmix64(master + run_index * kGolden);
}

uint64_t Shard::next_run(uint64_t run) const { return run + (index + count - run % count) % count; }

bool parse_shard(std::string_view t, Shard* out) {
  uint64_t i = 0, n = 0;
  if (!read_uint(&t, &i) || t.empty() || t[0] != '/') return false;
  t.remove_prefix(1);
  if (!read_uint(&t, &n) || !t.empty() || n == 0 || n > UINT32_MAX || i >= n) return false;
  *out = Shard{static_cast<uint32_t>(i), static_cast<uint32_t>(n)};
  return true;
}

void CampaignTotals::add_run(uint64_t run_index, uint64_t seed, const std::string& signature) {
  ++schedules;
  if (signature.empty()) return;
  ++failures;
  ++failures_by_signature[signature];
  if (run_index < first_failing_run) {
    first_failing_run = run_index;
    first_failing_seed = seed;
  }
}

bool merge_totals(const CampaignTotals& shard, CampaignTotals* into) {
  if (shard.master_seed != into->master_seed) return false;
  into->schedules += shard.schedules;
  into->failures += shard.failures;
  for (const auto& [signature, n] : shard.failures_by_signature)
    into->failures_by_signature[signature] += n;
  if (shard.first_failing_run < into->first_failing_run) {
    into->first_failing_run = shard.first_failing_run;
    into->first_failing_seed = shard.first_failing_seed;
  }
  return true;
}

std::string format_totals(const CampaignTotals& t) {
  std::string out = "{\"master_seed\":" + json_hex(t.master_seed) +
                    ",\"schedules\":" + std::to_string(t.schedules) +
                    ",\"failures\":" + std::to_string(t.failures) + ",\"first_failing_run\":" +
                    (t.first_failing_run == kNoRun ? "null" : std::to_string(t.first_failing_run)) +
                    ",\"first_failing_seed\":" + json_hex(t.first_failing_seed) +
                    ",\"failures_by_signature\":{";
  bool first = true;
  for (const auto& [signature, n] : t.failures_by_signature) {
    out += (first ? "" : ",") + json_quote(signature) + ":" + std::to_string(n);
    first = false;
  }
  return out + "}}";
}

}  // namespace emu::sched
