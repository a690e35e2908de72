// SPDX-License-Identifier: BSD-2-Clause
#include "campaign.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

namespace race {

using namespace emu::sched;

bool parse_search(const std::string& s, Search* out) {
  if (s == "random")
    *out = Search::kRandom;
  else if (s == "pct")
    *out = Search::kPct;
  else if (s == "dfs")
    *out = Search::kDfs;
  else if (s == "delays")
    *out = Search::kDelays;
  else
    return false;
  return true;
}

const char* search_name(Search s) {
  switch (s) {
    case Search::kRandom:
      return "random";
    case Search::kPct:
      return "pct";
    case Search::kDfs:
      return "dfs";
    case Search::kDelays:
      return "delays";
  }
  return "?";
}

RunResult replay(const ScenarioDef& def, Rig& rig, const Schedule& s) {
  auto strategy = replay_strategy(s);
  return run(factory_of(def, rig), *strategy);
}

namespace {

void note_failure(CampaignReport* rep, uint64_t index, uint64_t seed, RunResult&& r) {
  if (rep->failed) return;
  rep->failed = true;
  rep->failing_run = index;
  rep->failing_seed = seed;
  rep->failure = std::move(r);
}

void seeded_runs(const ScenarioDef& def, Rig& rig, const CampaignOptions& o, CampaignReport* rep) {
  ScenarioFactory f = factory_of(def, rig);
  StrategyKind kind = o.search == Search::kPct ? StrategyKind::kPct : StrategyKind::kRandomWalk;
  uint32_t k = 0;
  if (kind == StrategyKind::kPct) k = replay(def, rig, Schedule{}).steps;  // PCT's k
  for (uint64_t r = o.shard.next_run(0); r < o.budget; r = o.shard.next_run(r + 1)) {
    uint64_t seed = run_seed(o.master_seed, r);
    auto strategy = campaign_strategy(kind, seed, r, k);
    RunResult res = run(f, *strategy);
    rep->points += res.steps;
    rep->totals.add_run(r, seed, res.signature);
    if (res.outcome != Outcome::kOk) {
      note_failure(rep, r, seed, std::move(res));
      if (!o.keep_going) return;
    }
  }
}

}  // namespace

CampaignReport run_campaign(const ScenarioDef& def, Rig& rig, const CampaignOptions& o) {
  CampaignReport rep;
  rep.totals.master_seed = o.master_seed;
  auto t0 = std::chrono::steady_clock::now();
  if (exhaustive(o.search)) {
    BoundKind kind = o.search == Search::kDfs ? BoundKind::kPreemptions : BoundKind::kDelays;
    ExploreResult e = explore(factory_of(def, rig), o.bound, o.budget, kind);
    rep.totals.schedules = e.schedules;
    rep.exhausted = e.exhausted;
    if (e.failed) {
      rep.totals.add_run(e.schedules - 1, 0, e.failure.signature);
      --rep.totals.schedules;  // add_run counted the failing run again
      note_failure(&rep, e.schedules - 1, 0, std::move(e.failure));
    }
  } else {
    seeded_runs(def, rig, o, &rep);
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!rep.failed) return rep;
  rep.shrunk = rep.failure.schedule;
  if (o.shrink) {
    ScheduleRunner runner = [&](const Schedule& s) {
      RunResult r = replay(def, rig, s);
      return RunOutcome{r.signature, r.choices};
    };
    ShrinkResult sr = shrink_schedule(rep.failure.schedule, rep.failure.signature, runner);
    rep.shrunk = sr.schedule;
    rep.shrink_stats = sr.stats;
  }
  rep.shrunk_run = replay(def, rig, rep.shrunk);
  return rep;
}

namespace {

// What a point did, for people.
std::string event_text(const TraceEvent& e) {
  char buf[160];
  const char* label = e.label ? e.label : point_label(e.kind);
  struct IndexPoint {
    uint16_t load, store;
    const char* what;
  };
  static const IndexPoint kIndexPoints[] = {
      {kPointIndexLoad, kPointIndexStore, "the producer index"},
      {kPointCqIndexLoad, kPointCqIndexStore, "the CQ consumer index"}};
  for (const IndexPoint& p : kIndexPoints)
    if (e.kind == p.load || e.kind == p.store) {
      snprintf(buf, sizeof buf, "%s %s %" PRIu64, e.kind == p.load ? "reads" : "writes", p.what,
               e.value);
      return buf;
    }
  switch (e.kind) {
    case kPointWqeStore:
      snprintf(buf, sizeof buf,
               "stores the WQE at ring position %" PRIu64 " (offset 0x%" PRIx64 ")", e.value,
               e.addr);
      break;
    case kPointDbrecStore:
      snprintf(buf, sizeof buf, "stores the doorbell record: producer %" PRIu64, e.value);
      break;
    case kPointBfChunk:
      snprintf(buf, sizeof buf, "BlueFlame chunk into the register buffer at 0x%" PRIx64, e.addr);
      break;
    case kPointPoll:
      snprintf(buf, sizeof buf, "reads the owner byte of the CQE at consumer index %" PRIu64,
               e.value);
      break;
    case kPointDb64:
      snprintf(buf, sizeof buf, "8-byte doorbell, head 0x%" PRIx64, e.value);
      break;
    default:
      snprintf(buf, sizeof buf, "%s 0x%" PRIx64 " (value %" PRIu64 ")", label, e.addr, e.value);
  }
  return buf;
}

}  // namespace

std::string describe_run(const RunResult& r, const std::vector<std::string>& races) {
  std::string out;
  ActorId last = kNoActor;
  for (const TraceEvent& e : r.trace) {
    const std::string& who =
        e.actor < r.positions.size() ? r.positions[e.actor].name : std::string("?");
    char line[256];
    snprintf(line, sizeof line, "  %4u %s%-7s %s\n", e.step, e.actor != last ? "> " : "  ",
             who.c_str(), event_text(e).c_str());
    out += line;
    last = e.actor;
  }
  for (const std::string& l : races) out += "  " + l + "\n";
  out += "  result: " + (r.signature.empty() ? std::string("pass") : r.signature) + "\n";
  return out;
}

bool write_trace(const std::string& path, const RunResult& r,
                 const std::vector<std::string>& races) {
  std::vector<std::string> names;
  for (const ActorPosition& p : r.positions) names.push_back(p.name);
  std::vector<TraceInstant> instants;
  ActorId device = names.empty() ? 0 : static_cast<ActorId>(names.size() - 1);
  uint32_t end = r.trace.empty() ? 0 : r.trace.back().step;
  for (const std::string& l : races) instants.push_back({end, device, "race", l});
  if (!r.signature.empty()) instants.push_back({end, device, r.signature, r.describe()});
  return write_trace_json(path, TraceInput{r.trace, names, instants});
}

}  // namespace race
