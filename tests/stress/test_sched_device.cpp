// SPDX-License-Identifier: BSD-2-Clause
// The scheduler over the real post path and the device: uctlite's direct endpoints on emu0, the
// device as an actor. Linked with the provider (its copy of the scheduler is the one its points
// call). A factory's runs share one loopback pair, reset between them (sched_rig::Objects).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "emu/sched/sched.h"
#include "sched_rig.h"

using namespace emu::sched;
using namespace uctlite;

namespace {

// Two threads post one inline WRITE each through one endpoint of a worker in `mode`.
struct TwoPosters : sched_rig::Rig {
  bool setup(ThreadMode mode, std::shared_ptr<sched_rig::Objects> shared) {
    WorkerConfig wc;
    wc.api = Api::direct;
    wc.mmio = MmioMode::bf_post;
    wc.thread_mode = mode;
    return Rig::setup(wc, std::move(shared));
  }
  std::string check() { return Rig::check(2); }
};

ScenarioFactory two_posters(ThreadMode mode, std::shared_ptr<TwoPosters>* keep) {
  auto objects = std::make_shared<sched_rig::Objects>();
  return [mode, keep, objects] {
    if (*keep) (*keep)->drain();
    *keep = nullptr;  // the previous run's worker goes before this run's is made
    auto s = std::make_shared<TwoPosters>();
    EXPECT_TRUE(s->setup(mode, objects));
    *keep = s;
    Scenario sc;
    sc.actors.push_back({"t0", [s] { s->post(0); }});
    sc.actors.push_back({"t1", [s] { s->post(1); }});
    sc.actors.push_back(s->device->actor());
    sc.final_check = [s] { return s->check(); };
    return sc;
  };
}

TEST(SchedDevice, SingleModeRaceIsFoundAndReplaysExactly) {
  std::shared_ptr<TwoPosters> keep;
  ScenarioFactory f = two_posters(ThreadMode::single, &keep);
  CampaignResult c = campaign(f, StrategyKind::kRandomWalk, 1, 500);
  ASSERT_TRUE(c.failed);
  EXPECT_EQ(c.failure.signature.rfind("race:", 0), 0u) << c.failure.signature;
  sched_rig::expect_exact_replays(f, c.failure, 5);
  keep = nullptr;
}

TEST(SchedDevice, SerializedModePassesEveryScheduleWithinTwoPreemptions) {
  std::shared_ptr<TwoPosters> keep;
  ExploreResult e = explore(two_posters(ThreadMode::serialized, &keep), 2, 20000);
  EXPECT_FALSE(e.failed) << e.failure.describe();
  EXPECT_TRUE(e.exhausted);
  keep = nullptr;
}

}  // namespace
