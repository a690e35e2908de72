// SPDX-License-Identifier: BSD-2-Clause
// The scheduler's tools over data: shrinking against a synthetic runner, the Perfetto trace JSON
// and the trace hash, seeds and shards merging to one machine's totals.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "emu/sched/seeds.h"
#include "emu/sched/shrink.h"
#include "emu/sched/trace.h"

namespace emu::sched {
namespace {

// ---- shrinking ----

// A synthetic scenario: three actors of ten steps each, replayed as the scheduler replays (a choice
// per non-forced decision; where the schedule runs out or names a finished actor, the last mover
// goes on if it can, else the lowest that can). It fails when actor 1 steps between actor 0's 3rd
// and 4th step, and stops there as a scheduler stops at a failure.
constexpr int kActors = 3, kSteps = 10;
const std::string kSignature = "actor 1 inside actor 0's steps 3..4";

RunOutcome run_synthetic(const Schedule& s) {
  RunOutcome out;
  int done[kActors] = {};
  ActorId last = kNoActor;
  size_t next_choice = 0;
  for (;;) {
    std::vector<ActorId> can;
    for (int a = 0; a < kActors; ++a)
      if (done[a] < kSteps) can.push_back(static_cast<ActorId>(a));
    if (can.empty()) return out;
    auto movable = [&](ActorId a) { return a < kActors && done[a] < kSteps; };
    ActorId pick = movable(last) ? last : can[0];
    if (can.size() > 1) {
      if (next_choice < s.choices.size() && movable(s.choices[next_choice]))
        pick = s.choices[next_choice];
      ++next_choice;
      out.record.push_back({pick, last, movable(last)});
    }
    if (pick == 1 && done[0] == 3) {
      out.signature = kSignature;
      return out;
    }
    ++done[pick];
    last = pick;
  }
}

// Random schedules (seeded) of 60 choices that fail with the signature.
std::vector<Schedule> failing_schedules(size_t want) {
  std::vector<Schedule> found;
  for (uint64_t seed = 1; found.size() < want; ++seed) {
    Schedule s;
    for (uint64_t i = 0; i < 60; ++i) s.choices.push_back(splitmix64(seed * 1000 + i) % kActors);
    if (run_synthetic(s).signature == kSignature) found.push_back(s);
  }
  return found;
}

TEST(Shrink, LeavesTheFewSwitchesThatMatterWithinBudget) {
  for (const Schedule& failing : failing_schedules(20)) {
    const ShrinkResult r = shrink_schedule(failing, kSignature, run_synthetic);
    const std::string text = format_schedule(failing);
    EXPECT_TRUE(r.stats.reproduced) << text;
    EXPECT_FALSE(r.stats.budget_exhausted) << text;
    EXPECT_LE(r.stats.runs, 1000u) << text;
    EXPECT_EQ(run_synthetic(r.schedule).signature, kSignature) << text;
    // The bug's depth is 2 (0's 3rd step before 1's, 1's before 0's 4th): at most d + 1 = 3.
    EXPECT_LE(r.stats.preemptions_after, 2u) << text << " -> " << format_schedule(r.schedule);
    EXPECT_LE(r.stats.preemptions_after, r.stats.preemptions_before);
    // Here the smallest failing schedule is known: 0 takes three steps, then 1 preempts it.
    EXPECT_EQ(format_schedule(r.schedule), "s1:0x3,1") << text;
    EXPECT_EQ(r.stats.choices_before, failing.choices.size());
    EXPECT_EQ(r.stats.choices_after, r.schedule.choices.size());
    EXPECT_EQ(r.stats.preemptions_after, count_preemptions(run_synthetic(r.schedule).record));
  }
}

TEST(Shrink, StopsAtTheBudgetWithAScheduleThatStillFails) {
  const Schedule failing = failing_schedules(1)[0];
  const ShrinkResult r = shrink_schedule(failing, kSignature, run_synthetic, {.max_runs = 3});
  EXPECT_TRUE(r.stats.budget_exhausted);
  EXPECT_EQ(r.stats.runs, 3u);
  EXPECT_EQ(run_synthetic(r.schedule).signature, kSignature);
}

TEST(Shrink, StopsAtTheGoalWithAScheduleThatStillFailsWithinIt) {
  int shrunk = 0;
  for (const Schedule& failing : failing_schedules(5)) {
    const ShrinkResult whole = shrink_schedule(failing, kSignature, run_synthetic);
    if (whole.stats.preemptions_before <= 3) continue;  // the goal would hold before any edit
    ++shrunk;
    const ShrinkResult r =
        shrink_schedule(failing, kSignature, run_synthetic, {.goal_preemptions = 3});
    EXPECT_TRUE(r.stats.goal_reached);
    EXPECT_FALSE(r.stats.budget_exhausted);
    EXPECT_LT(r.stats.runs, whole.stats.runs) << "the goal leaves replays unspent";
    EXPECT_LE(r.stats.preemptions_after, 3u);
    EXPECT_EQ(run_synthetic(r.schedule).signature, kSignature);
    EXPECT_EQ(r.stats.preemptions_after, count_preemptions(run_synthetic(r.schedule).record));
  }
  EXPECT_GE(shrunk, 2) << "failing schedules with more than 3 preemptions to shrink";
}

TEST(Shrink, ReturnsAScheduleThatDoesNotReproduceUnchanged) {
  const Schedule passing{{0, 0, 0}};
  const ShrinkResult r = shrink_schedule(passing, kSignature, run_synthetic);
  EXPECT_FALSE(r.stats.reproduced);
  EXPECT_EQ(r.schedule, passing);
  EXPECT_EQ(r.stats.runs, 1u);
  // Another signature is another failure: not accepted either.
  EXPECT_FALSE(shrink_schedule(failing_schedules(1)[0], "other", run_synthetic).stats.reproduced);
}

// ---- the trace JSON and the trace hash ----

const std::vector<std::string> kNames = {"thread 0", "thread 1", "device"};
const std::vector<TraceEvent> kEvents = {
    {0, 0, 1, 0x1000, 7, "wqe store"},
    {1, 1, 2, 0x2000, 0x1f, "dbr \"store\"\n"},  // a label that needs escaping
    {2, 2, 3, 0x2000, 0x1f, nullptr},            // an unlabelled kind
    {3, 0, 4, 0xffffffffffffffc0ull, 0, "bf chunk"},
};
const std::vector<TraceInstant> kInstants = {{2, 2, "race: dbr before wqe", "qp 0x12 \\ wqe 3"}};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The file this writes is checked by a JSON reader in the ctest sched_trace_json
// (tests/unit/check_trace_json.py), which sets EMU_SCHED_TRACE_OUT.
TEST(SchedTrace, WritesPerfettoJson) {
  const char* env = std::getenv("EMU_SCHED_TRACE_OUT");
  const std::string path = env ? env : ::testing::TempDir() + "/sched_trace.json";
  ASSERT_TRUE(write_trace_json(path, {kEvents, kNames, kInstants}));
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  const std::string json = text.str();
  EXPECT_EQ(json, format_trace_json({kEvents, kNames, kInstants}));
  EXPECT_EQ(json.rfind("{\"traceEvents\":[", 0), 0u);
  EXPECT_EQ(count(json, "\"thread_name\""), kNames.size());
  EXPECT_EQ(count(json, "\"ph\":\"X\""), kEvents.size());
  EXPECT_EQ(count(json, "\"ph\":\"i\",\"s\":\"t\""), kInstants.size());
  EXPECT_NE(json.find("\"dbr \\\"store\\\"\\u000a\""), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"kind 3\""), std::string::npos);
  EXPECT_NE(json.find("\"addr\":\"0xffffffffffffffc0\""), std::string::npos);
  EXPECT_NE(json.find("qp 0x12 \\\\ wqe 3"), std::string::npos);
  if (!env)
    std::remove(path.c_str());  // the ctest's reader keeps its own file; nothing left behind
}

TEST(SchedTrace, UnnamedActorsGetATrackToo) {
  const std::vector<TraceEvent> events = {{0, 4, 1, 0, 0, "x"}};
  const std::string json = format_trace_json({events, kNames, {}});
  EXPECT_EQ(count(json, "\"thread_name\""), 5u);
  EXPECT_NE(json.find("\"actor 4\""), std::string::npos);
}

TEST(SchedTrace, HashCoversStepActorKindAddrOnly) {
  EXPECT_EQ(trace_hash({}), 0xcbf29ce484222325ull);  // FNV-1a's offset basis
  const uint64_t h = trace_hash(kEvents);
  EXPECT_EQ(trace_hash(kEvents), h);
  auto changed = [](auto edit) {
    std::vector<TraceEvent> e = kEvents;
    edit(e[1]);
    return trace_hash(e);
  };
  EXPECT_NE(changed([](TraceEvent& e) { ++e.step; }), h);
  EXPECT_NE(changed([](TraceEvent& e) { e.actor = 2; }), h);
  EXPECT_NE(changed([](TraceEvent& e) { ++e.kind; }), h);
  EXPECT_NE(changed([](TraceEvent& e) { e.addr ^= 1ull << 63; }), h);
  EXPECT_EQ(changed([](TraceEvent& e) { ++e.value; }), h);
  EXPECT_EQ(changed([](TraceEvent& e) { e.label = "other"; }), h);
}

// ---- seeds, shards, totals ----

TEST(Seeds, RunSeedsAreSplitmix64sStream) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);  // splitmix64's first output from seed 0
  EXPECT_EQ(run_seed(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_NE(run_seed(7, 1), run_seed(7, 0));
  EXPECT_NE(run_seed(8, 0), run_seed(7, 0));
}

TEST(Seeds, ShardTextAndRuns) {
  Shard s;
  ASSERT_TRUE(parse_shard("1/4", &s));
  EXPECT_EQ(s, (Shard{1, 4}));
  EXPECT_EQ(s.next_run(0), 1u);
  EXPECT_EQ(s.next_run(2), 5u);
  EXPECT_EQ(s.next_run(5), 5u);
  for (const char* bad : {"", "1", "4/4", "0/0", "-1/2", "1/", "/2", "1/2x", "0/4294967296"}) {
    EXPECT_FALSE(parse_shard(bad, &s)) << bad;
    EXPECT_EQ(s, (Shard{1, 4})) << bad;
  }
}

CampaignTotals totals_of(uint64_t master) {
  CampaignTotals t;
  t.master_seed = master;
  return t;
}

// A synthetic campaign: run i fails iff splitmix64(seed_i) % 50 == 0, with one of three
// signatures; each shard's totals go through their text form, as a merge step reads them.
CampaignTotals sharded_campaign(uint64_t master, uint64_t runs, uint32_t shards) {
  CampaignTotals merged = totals_of(master);
  for (uint32_t i = 0; i < shards; ++i) {
    const Shard shard{i, shards};
    CampaignTotals t = totals_of(master);
    for (uint64_t r = shard.next_run(0); r < runs; r = shard.next_run(r + 1)) {
      const uint64_t seed = run_seed(master, r), h = splitmix64(seed);
      t.add_run(r, seed, h % 50 ? "" : "sig " + std::to_string(h / 50 % 3));
    }
    CampaignTotals read;
    EXPECT_TRUE(parse_totals(format_totals(t), &read)) << format_totals(t);
    EXPECT_EQ(read, t);
    EXPECT_TRUE(merge_totals(read, &merged));
  }
  return merged;
}

TEST(Seeds, ShardsMergeToOneMachinesTotals) {
  const CampaignTotals one = sharded_campaign(0x5eed, 2000, 1);
  EXPECT_EQ(one.schedules, 2000u);
  EXPECT_GT(one.failures, 10u);
  EXPECT_EQ(one.failures_by_signature.size(), 3u);
  ASSERT_NE(one.first_failing_run, kNoRun);
  EXPECT_EQ(one.first_failing_seed, run_seed(0x5eed, one.first_failing_run));
  EXPECT_EQ(sharded_campaign(0x5eed, 2000, 2), one);
  EXPECT_EQ(sharded_campaign(0x5eed, 2000, 4), one);
  EXPECT_EQ(sharded_campaign(0x5eed, 2000, 7), one);
}

TEST(Seeds, MergeRefusesAnotherMasterSeed) {
  CampaignTotals a = totals_of(1), b = totals_of(2);
  b.add_run(0, 5, "x");
  EXPECT_FALSE(merge_totals(b, &a));
  EXPECT_EQ(a, totals_of(1));
}

TEST(Seeds, TotalsTextRoundTripsAndRefusesMalformedText) {
  CampaignTotals t = totals_of(0xfedcba9876543210ull);
  t.add_run(3, 99, "");
  t.add_run(9, 42, "quote \" slash \\ newline \n tab \t é");
  CampaignTotals back;
  ASSERT_TRUE(parse_totals(format_totals(t), &back)) << format_totals(t);
  EXPECT_EQ(back, t);
  ASSERT_TRUE(parse_totals(format_totals(CampaignTotals{}), &back));
  EXPECT_EQ(back, CampaignTotals{});
  ASSERT_TRUE(
      parse_totals(" { \"failures_by_signature\" : { \"\\u0041\\/\" : 1 } , "
                   "\"failures\":1,\"schedules\":1,\"first_failing_run\":0,"
                   "\"first_failing_seed\":\"0x2\",\"master_seed\":\"0x1\"}\n",
                   &back));
  EXPECT_EQ(back.failures_by_signature.at("A/"), 1u);

  const CampaignTotals keep = back;
  const std::string good = format_totals(t);
  for (const std::string& bad :
       {std::string(), std::string("{}"), good + "x", good.substr(0, good.size() - 1),
        std::string("{\"master_seed\":1}"),
        // failures disagree with the signatures / the first failing run
        std::string("{\"master_seed\":\"0x1\",\"schedules\":1,\"failures\":1,"
                    "\"first_failing_run\":null,\"first_failing_seed\":\"0x0\","
                    "\"failures_by_signature\":{\"a\":1}}"),
        std::string("{\"master_seed\":\"0x1\",\"schedules\":1,\"failures\":2,"
                    "\"first_failing_run\":0,\"first_failing_seed\":\"0x0\","
                    "\"failures_by_signature\":{\"a\":1}}")}) {
    EXPECT_FALSE(parse_totals(bad, &back)) << bad;
    EXPECT_EQ(back, keep) << bad;
  }
  std::string repeated = good;
  repeated.insert(1, "\"schedules\":1,");
  EXPECT_FALSE(parse_totals(repeated, &back));
  std::string repeated_signature = good;
  const size_t signatures = repeated_signature.find("\"failures_by_signature\":{") + 25;
  repeated_signature.insert(signatures, "\"x\":0,\"x\":0,");
  EXPECT_FALSE(parse_totals(repeated_signature, &back)) << repeated_signature;
  EXPECT_EQ(back, keep);
}

}  // namespace
}  // namespace emu::sched
