// SPDX-License-Identifier: BSD-2-Clause
// The program-wide run (emu/sched/program.h) without libemu_sched.so: the test's thread is actor 0
// and starts its threads by hand as pthread_create's interposer would.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "emu/sched/program.h"

using namespace emu::sched;
namespace program = emu::sched::program;

namespace {

TEST(SchedProgram, ParsesEachStrategy) {
  program::Spec s;
  std::string err;
  ASSERT_TRUE(program::parse_spec("pct:seed=7,depth=2", &s, &err)) << err;
  EXPECT_EQ(s.strategy, "pct");
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.depth, 2u);
  ASSERT_TRUE(program::parse_spec("random:seed=0x10,max_steps=99", &s, &err)) << err;
  EXPECT_EQ(s.seed, 16u);
  EXPECT_EQ(s.max_steps, 99u);
  ASSERT_TRUE(program::parse_spec("replay:s1:0x3,1,2,max_steps=50", &s, &err)) << err;
  EXPECT_EQ(format_schedule(s.replay), "s1:0x3,1,2");
  EXPECT_EQ(s.max_steps, 50u);
  ASSERT_TRUE(program::parse_spec("replay:s1:1x2,0", &s, &err)) << err;
  EXPECT_EQ(format_schedule(s.replay), "s1:1x2,0");
}

TEST(SchedProgram, RefusesMalformedSpecs) {
  program::Spec s;
  std::string err;
  EXPECT_FALSE(program::parse_spec("dfs:seed=1", &s, &err));
  EXPECT_FALSE(program::parse_spec("pct:seed=1,depth=4", &s, &err));
  EXPECT_FALSE(program::parse_spec("random:seed", &s, &err));
  EXPECT_FALSE(program::parse_spec("replay:s1:x", &s, &err));
}

// Two threads bump a shared counter in two steps each (a lost update when they interleave).
RunResult two_threads(const program::Spec& spec, int* counter) {
  program::start(spec, [](const program::Spec&, const RunResult& r) {
    ADD_FAILURE() << r.describe();
    std::abort();
  });
  std::vector<std::thread> threads;
  std::vector<ActorId> ids;
  for (int t = 0; t < 2; ++t) {
    ActorId id = program::add_thread();
    ids.push_back(id);
    threads.emplace_back([id, counter] {
      if (!program::enter(id)) return;
      int seen = *counter;
      point(kPointLoad, 1);
      *counter = seen + 1;
      point(kPointStore, 1);
      program::leave();
    });
    point(kPointSpawn, 0, id);
  }
  for (ActorId id : ids) wait_until([id] { return program::finished(id); }, "join");
  RunResult r = program::stop();
  for (std::thread& t : threads) t.join();
  return r;
}

TEST(SchedProgram, ThreadsJoinTheRunAndAReplayRepeatsIt) {
  program::Spec spec;
  std::string err;
  ASSERT_TRUE(program::parse_spec("random:seed=3", &spec, &err));
  int counter = 0;
  RunResult first = two_threads(spec, &counter);
  EXPECT_EQ(first.outcome, Outcome::kOk);
  ASSERT_EQ(first.positions.size(), 3u);
  for (const ActorPosition& p : first.positions) EXPECT_TRUE(p.finished) << p.name;
  int first_counter = counter;
  ASSERT_TRUE(program::parse_spec("replay:" + format_schedule(first.schedule), &spec, &err));
  counter = 0;
  RunResult again = two_threads(spec, &counter);
  EXPECT_EQ(again.trace_hash, first.trace_hash);
  EXPECT_EQ(again.schedule, first.schedule);
  EXPECT_EQ(counter, first_counter);
}

}  // namespace
