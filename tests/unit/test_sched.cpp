// SPDX-License-Identifier: BSD-2-Clause
// The deterministic scheduler on toy scenarios: a lost update found by every strategy and its
// locked counterpart clean, exact replay, deadlock reports, determinism of seeds.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "emu/sched/sched.h"

namespace emu::sched {
namespace {

uint64_t addr_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Two actors each add one to a shared counter with a load, a point, a store; `locked` puts the
// three under a sched::Mutex. The oracle: the counter ends at 2.
ScenarioFactory counter_scenario(bool locked) {
  return [locked] {
    struct State {
      int counter = 0;
      Mutex m{"counter lock"};
    };
    auto s = std::make_shared<State>();
    auto add_one = [s, locked] {
      if (locked) s->m.lock();
      int v = s->counter;
      point(kPointLoad, addr_of(&s->counter), v);
      s->counter = v + 1;
      point(kPointStore, addr_of(&s->counter), v + 1);
      if (locked) s->m.unlock();
    };
    return Scenario{{{"a", add_one}, {"b", add_one}},
                    [s] { return s->counter == 2 ? "" : "lost update"; }};
  };
}

// Two actors take two mutexes in opposite orders.
ScenarioFactory lock_order_scenario() {
  return [] {
    struct State {
      Mutex a{"mutex a"}, b{"mutex b"};
    };
    auto s = std::make_shared<State>();
    auto take = [](Mutex& first, Mutex& second) {
      std::lock_guard g1(first);
      std::lock_guard g2(second);
    };
    return Scenario{
        {{"ab", [s, take] { take(s->a, s->b); }}, {"ba", [s, take] { take(s->b, s->a); }}},
        nullptr};
  };
}

TEST(Sched, LostUpdateFoundByRandomWalkAndPct) {
  for (StrategyKind kind : {StrategyKind::kRandomWalk, StrategyKind::kPct}) {
    CampaignResult c = campaign(counter_scenario(false), kind, 7, 200);
    ASSERT_TRUE(c.failed);
    EXPECT_EQ(c.failure.outcome, Outcome::kFailed);
    EXPECT_EQ(c.failure.signature, "lost update");
    EXPECT_GE(count_preemptions(c.failure.choices), 1u);
  }
}

TEST(Sched, LockedCounterPassesACampaignAndTheBoundedSearch) {
  for (StrategyKind kind : {StrategyKind::kRandomWalk, StrategyKind::kPct}) {
    CampaignResult c = campaign(counter_scenario(true), kind, 7, 2000);
    EXPECT_FALSE(c.failed) << c.failure.describe();
    EXPECT_EQ(c.schedules, 2000u);
  }
  ExploreResult e = explore(counter_scenario(true), 2);
  EXPECT_FALSE(e.failed) << e.failure.describe();
  EXPECT_TRUE(e.exhausted);
  EXPECT_GT(e.schedules, 1u);
}

TEST(Sched, BoundedSearchFindsTheLostUpdateWithOnePreemption) {
  EXPECT_FALSE(explore(counter_scenario(false), 0).failed);
  ExploreResult e = explore(counter_scenario(false), 1);
  ASSERT_TRUE(e.failed);
  EXPECT_EQ(e.failure.signature, "lost update");
  EXPECT_EQ(count_preemptions(e.failure.choices), 1u);
}

// The lost update needs one preemption: PCT of depth 1 never preempts, depth 2 can.
TEST(Sched, PctDepthBoundsItsPreemptions) {
  bool depth2_found = false;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto d1 = pct_strategy(seed, 1, 12);
    ASSERT_EQ(run(counter_scenario(false), *d1).outcome, Outcome::kOk) << seed;
    auto d2 = pct_strategy(seed, 2, 12);
    depth2_found |= run(counter_scenario(false), *d2).outcome == Outcome::kFailed;
  }
  EXPECT_TRUE(depth2_found);
}

// Shrinking relies on this: a schedule cut short, or naming an actor that cannot move, still runs
// to the end by the default rule.
TEST(Sched, ReplayPastItsEndOrOfABadChoiceGoesOnByTheDefaultRule) {
  for (Schedule s : {Schedule{}, Schedule{{1}}, Schedule{{7, 7, 7}}}) {
    auto replay = replay_strategy(s);
    RunResult r = run(counter_scenario(false), *replay);
    EXPECT_EQ(r.outcome, Outcome::kOk) << format_schedule(s);
    EXPECT_EQ(count_preemptions(r.choices), 0u) << format_schedule(s);
  }
}

TEST(Sched, AnExceptionOutOfAnActorFailsTheRun) {
  auto walk = random_walk_strategy(1);
  RunResult r = run(
      [] {
        auto thrower = [] {
          point(kPointYield);
          throw std::runtime_error("bad state");
        };
        return Scenario{{{"thrower", thrower}, {"other", [] { point(kPointYield); }}}, nullptr};
      },
      *walk);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.signature, "exception: bad state");
}

TEST(Sched, ReplayOfAFailingScheduleIsExact) {
  CampaignResult c = campaign(counter_scenario(false), StrategyKind::kRandomWalk, 11, 200);
  ASSERT_TRUE(c.failed);
  Schedule text;
  ASSERT_TRUE(parse_schedule(format_schedule(c.failure.schedule), &text));
  // Live allocations between replays move the scenario's objects, as another process would.
  std::vector<std::unique_ptr<char[]>> ballast;
  for (int i = 0; i < 100; ++i) {
    ballast.push_back(std::make_unique<char[]>(48));
    auto replay = replay_strategy(text);
    RunResult r = run(counter_scenario(false), *replay);
    ASSERT_EQ(r.trace_hash, c.failure.trace_hash) << i;
    ASSERT_EQ(r.signature, "lost update");
    ASSERT_EQ(r.schedule, c.failure.schedule);
  }
  // The same run again from its campaign seed alone.
  auto again = random_walk_strategy(c.failing_seed);
  EXPECT_EQ(run(counter_scenario(false), *again).trace_hash, c.failure.trace_hash);
}

TEST(Sched, OppositeLockOrderIsReportedAsADeadlockWithBothPositions) {
  ExploreResult e = explore(lock_order_scenario(), 2);
  ASSERT_TRUE(e.failed);
  const RunResult& r = e.failure;
  EXPECT_EQ(r.outcome, Outcome::kDeadlock);
  ASSERT_EQ(r.positions.size(), 2u);
  for (const ActorPosition& p : r.positions) {
    EXPECT_FALSE(p.finished);
    EXPECT_EQ(p.last_kind, kPointLock);
    ASSERT_NE(p.waits_on, nullptr);
  }
  EXPECT_STREQ(r.positions[0].waits_on, "mutex b");
  EXPECT_STREQ(r.positions[1].waits_on, "mutex a");
  std::string text = r.describe();
  EXPECT_NE(text.find("ab: at lock"), std::string::npos) << text;
  EXPECT_NE(text.find("waiting on mutex a"), std::string::npos) << text;
  // The stuck actors were unwound: the same scheduler runs on cleanly.
  auto replay = replay_strategy(r.schedule);
  EXPECT_EQ(run(lock_order_scenario(), *replay).trace_hash, r.trace_hash);
}

TEST(Sched, SingleActorHasNoChoices) {
  auto walk = random_walk_strategy(1);
  RunResult r = run(
      [] {
        return Scenario{{{"only",
                          [] {
                            for (int i = 0; i < 10; ++i) point(kPointYield, i);
                          }}},
                        nullptr};
      },
      *walk);
  EXPECT_EQ(r.outcome, Outcome::kOk);
  EXPECT_TRUE(r.schedule.choices.empty());
  EXPECT_EQ(r.steps, 11u);  // ten points and the finish
  EXPECT_EQ(r.trace.back().kind, kPointFinish);
}

TEST(Sched, SameSeedSameSchedule) {
  for (StrategyKind kind : {StrategyKind::kRandomWalk, StrategyKind::kPct}) {
    auto s1 = campaign_strategy(kind, 42, 1, 12);
    auto s2 = campaign_strategy(kind, 42, 1, 12);
    RunResult a = run(counter_scenario(true), *s1);
    RunResult b = run(counter_scenario(true), *s2);
    EXPECT_EQ(a.schedule, b.schedule);
    EXPECT_EQ(a.trace_hash, b.trace_hash);
    EXPECT_FALSE(a.schedule.choices.empty());
  }
}

// A device actor waits for a doorbell; it is not enabled before, so it never reads a stale value.
TEST(Sched, WaitUntilHoldsAnActorBackUntilItsConditionHolds) {
  auto factory = [] {
    struct State {
      int payload = 0;
      bool doorbell = false;
    };
    auto s = std::make_shared<State>();
    auto host = [s] {
      s->payload = 42;
      point(kPointStore, addr_of(&s->payload), 42);
      s->doorbell = true;
      point(kPointStore, addr_of(&s->doorbell), 1);
    };
    auto device = [s] {
      wait_until([s] { return s->doorbell; }, "doorbell");
      if (s->payload != 42) fail("stale payload");
    };
    return Scenario{{{"host", host}, {"device", device}}, nullptr};
  };
  CampaignResult c = campaign(factory, StrategyKind::kRandomWalk, 3, 300);
  EXPECT_FALSE(c.failed) << c.failure.describe();
  EXPECT_TRUE(explore(factory, 2).exhausted);
}

TEST(Sched, FailEndsTheRunWithItsSignatureAndUnwindsTheOthers) {
  auto factory = [] {
    auto stop = std::make_shared<bool>(false);
    auto waiter = [stop] { wait_until([stop] { return *stop; }, "never"); };
    auto checker = [] {
      point(kPointYield);
      fail("oracle said no");
    };
    return Scenario{{{"waiter", waiter}, {"checker", checker}}, nullptr};
  };
  auto walk = random_walk_strategy(5);
  RunResult r = run(factory, *walk);
  EXPECT_EQ(r.outcome, Outcome::kFailed);
  EXPECT_EQ(r.signature, "oracle said no");
}

// A poller that spins on a flag another actor sets: under PCT the spinner may hold the highest
// priority, yet a spin point leaves it out until the setter has moved, so every run ends.
ScenarioFactory spin_wait_scenario(bool nobody_sets) {
  return [nobody_sets] {
    auto flag = std::make_shared<int>(0);
    auto spinner = [flag] {
      while (*flag == 0) spin(kPointSpin, addr_of(flag.get()));
    };
    auto setter = [flag, nobody_sets] {
      point(kPointYield);
      if (!nobody_sets) *flag = 1;
      point(kPointStore, addr_of(flag.get()), 1);
    };
    return Scenario{{{"spinner", spinner}, {"setter", setter}}, nullptr};
  };
}

TEST(Sched, ASpinningActorWaitsForAnotherToMove) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    auto pct = pct_strategy(seed, 2, 10);
    RunResult r = run(spin_wait_scenario(false), *pct);
    ASSERT_EQ(r.outcome, Outcome::kOk) << r.describe();
  }
  ExploreResult e = explore(spin_wait_scenario(false), 2);
  EXPECT_FALSE(e.failed);
  EXPECT_TRUE(e.exhausted);
}

TEST(Sched, EveryActorSpinningIsALivelock) {
  auto rw = random_walk_strategy(3);
  RunResult r = run(spin_wait_scenario(true), *rw);
  EXPECT_EQ(r.outcome, Outcome::kDeadlock);
  EXPECT_EQ(r.signature, "livelock");
  EXPECT_FALSE(r.positions[0].finished);
  EXPECT_EQ(r.positions[0].last_kind, kPointSpin);
}

TEST(Sched, OutsideARunPointsAreNoOpsAndTheMutexIsAMutex) {
  EXPECT_FALSE(scheduled());
  point(kPointStore, 1);
  Mutex m;
  m.lock();
  m.unlock();
  bool ready = true;
  wait_until([&] { return ready; });
}

// Prints (does not assert) the scheduler's speed: schedules/s and ns per point over `runs` runs.
void print_throughput(const char* what, const ScenarioFactory& factory, int runs) {
  uint64_t points = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) {
    auto walk = random_walk_strategy(i);
    points += run(factory, *walk).steps;
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("sched, %s: %.0f schedules/s, %.0f ns per scheduling point\n", what, runs / s,
              s * 1e9 / static_cast<double>(points));
}

ScenarioFactory yielders(int actors, int points) {
  return [actors, points] {
    Scenario sc;
    for (int a = 0; a < actors; ++a)
      sc.actors.push_back({"t" + std::to_string(a), [points] {
                             for (int i = 0; i < points; ++i) point(kPointYield, i % 16);
                           }});
    return sc;
  };
}

// Actors that each run to their end: a preemption bound leaves every order of them free (5! at
// bound 0), a delay bound counts each skipped actor, so bound 0 is the one round-robin run.
TEST(Sched, ADelayBoundDoesNotGrowWithTheOrdersOfActors) {
  ExploreResult p0 = explore(yielders(5, 2), 0, 1'000'000, BoundKind::kPreemptions);
  EXPECT_TRUE(p0.exhausted);
  EXPECT_EQ(p0.schedules, 120u);
  ExploreResult d0 = explore(yielders(5, 2), 0, 1'000'000, BoundKind::kDelays);
  EXPECT_TRUE(d0.exhausted);
  EXPECT_EQ(d0.schedules, 1u);
  ExploreResult d1 = explore(yielders(5, 2), 1, 1'000'000, BoundKind::kDelays);
  EXPECT_TRUE(d1.exhausted);
  EXPECT_GT(d1.schedules, 1u);
  EXPECT_LT(d1.schedules, p0.schedules);
}

TEST(Sched, DelayBoundedSearchFindsTheLostUpdateAndPassesTheLockedCounter) {
  EXPECT_FALSE(explore(counter_scenario(false), 0, 1'000'000, BoundKind::kDelays).failed);
  ExploreResult e = explore(counter_scenario(false), 1, 1'000'000, BoundKind::kDelays);
  ASSERT_TRUE(e.failed);
  EXPECT_EQ(e.failure.signature, "lost update");
  // The failing run replays.
  auto replay = replay_strategy(e.failure.schedule);
  EXPECT_EQ(run(counter_scenario(false), *replay).trace_hash, e.failure.trace_hash);
  ExploreResult ok = explore(counter_scenario(true), 2, 1'000'000, BoundKind::kDelays);
  EXPECT_FALSE(ok.failed) << ok.failure.describe();
  EXPECT_TRUE(ok.exhausted);
}

TEST(Sched, ThroughputIsPrinted) {
  print_throughput("4 actors x 50 points, random walk", yielders(4, 50), 300);
  print_throughput("1 actor x 100000 points (no hand-over)", yielders(1, 100000), 3);
}

}  // namespace
}  // namespace emu::sched
