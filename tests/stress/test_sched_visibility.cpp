// SPDX-License-Identifier: BSD-2-Clause
// The visibility model (emu/sched/visibility.h) over the real post path: one poster, two inline
// WRITEs through a uctlite direct endpoint, the device as an actor, and store buffers of a profile.
// The poster that leaves out the barrier between the WQE and the doorbell record is the mutant:
// under `weak` the record can reach the device before the WQE it publishes, and the device, still
// busy with the first WRITE, reads the second record and a slot that holds no WQE yet.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "emu/sched/sched.h"
#include "emu/sched/visibility.h"
#include "sched_rig.h"

using namespace emu::sched;
using namespace uctlite;

namespace {

constexpr int kPosts = 2;

struct Poster : sched_rig::Rig {
  std::unique_ptr<StoreBuffers> buffers;

  bool setup(Visibility profile, bool fence, std::shared_ptr<sched_rig::Objects> shared) {
    WorkerConfig wc;
    wc.api = Api::direct;
    wc.mmio = MmioMode::bf_post;
    wc.thread_mode = ThreadMode::single;  // one thread: no lock, nothing else to drain
    wc.dbrec_fence = fence;
    if (!Rig::setup(wc, std::move(shared))) return false;
    buffers = std::make_unique<StoreBuffers>(profile);
    return true;
  }

  void post_all() {
    for (int n = 0; n < kPosts; ++n) post(n);
  }

  std::string check() {
    return buffers->pending() ? "stores left in a buffer" : Rig::check(kPosts);
  }
};

// Every schedule of the factory's posts over the same verbs objects (sched_rig::Objects), handed
// from one run to the next.
ScenarioFactory poster(Visibility profile, bool fence, std::shared_ptr<Poster>* keep) {
  auto objects = std::make_shared<sched_rig::Objects>();
  return [profile, fence, keep, objects] {
    if (*keep) (*keep)->drain();
    *keep = nullptr;  // the previous run's worker goes before this run's is made
    auto s = std::make_shared<Poster>();
    EXPECT_TRUE(s->setup(profile, fence, objects));
    *keep = s;
    Scenario sc;
    s->buffers->add_posters(sc, {{"poster", [s] { s->post_all(); }}});
    sc.actors.push_back(s->device->actor());
    sc.final_check = [s] { return s->check(); };
    return sc;
  };
}

TEST(SchedVisibility, WeakFindsTheRecordAheadOfItsWqeAndReplaysExactly) {
  std::shared_ptr<Poster> keep;
  ScenarioFactory f = poster(Visibility::kWeak, /*fence=*/false, &keep);
  CampaignResult c = campaign(f, StrategyKind::kRandomWalk, 1, 500);
  ASSERT_TRUE(c.failed) << c.schedules;
  // The device fetches a slot whose control segment does not name this index: it reports the
  // stale WQE (and completes it with a local QP operation error).
  EXPECT_EQ(c.failure.signature, "race:stale_wqe") << c.failure.describe();
  sched_rig::expect_exact_replays(f, c.failure, 3);
  keep = nullptr;
}

void expect_clean_within_two(Visibility profile, bool fence) {
  std::shared_ptr<Poster> keep;
  ExploreResult e = explore(poster(profile, fence, &keep), 2, 200000);
  EXPECT_FALSE(e.failed) << e.failure.signature << "\n" << e.failure.describe();
  EXPECT_TRUE(e.exhausted);
  EXPECT_GT(e.schedules, 1u);
  std::printf("%llu schedules, every one clean\n", static_cast<unsigned long long>(e.schedules));
  keep = nullptr;
}

TEST(SchedVisibility, X86KeepsTheUnfencedPosterCorrect) {
  expect_clean_within_two(Visibility::kX86, false);
}

// 130,480 schedules: four actors, two of them drain actors. Run by itself (ALONE in
// tests/stress/CMakeLists.txt).
TEST(SchedVisibility, WeakWithTheBarrierPasses) {
  expect_clean_within_two(Visibility::kWeak, true);
}

TEST(SchedVisibility, ScSeesEveryStoreAtOnce) { expect_clean_within_two(Visibility::kSc, false); }

}  // namespace
