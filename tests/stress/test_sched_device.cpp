// The scheduler over the real post path and the device: uctlite's direct endpoints on emu0, the
// device as an actor. Linked with the provider (its copy of the scheduler is the one its points
// call). Each run builds its own loopback pair, so runs share nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "emu/sched.h"
#include "emu/sched_device.h"
#include "emudv_link.h"
#include "fabric.h"
#include "races.h"
#include "uctlite.h"

using namespace emu::sched;
using namespace uctlite;

namespace {

// Two threads post one inline WRITE each through one endpoint of a worker in `mode`.
struct TwoPosters {
  stress::Fabric fabric;
  std::unique_ptr<Worker> worker;
  Ep* ep = nullptr;
  std::unique_ptr<DeviceActor> device;
  std::unique_ptr<stress::RaceCollector> races;
  uint8_t payload[2][64];

  bool setup(ThreadMode mode) {
    stress::FabricConfig fc;
    fc.device = "emu0";
    fc.sq_depth = 16;
    fc.target_bytes = 4096;
    std::string err;
    bool td_missing;
    if (!fabric.setup(fc, &err, &td_missing)) return false;
    WorkerConfig wc;
    wc.api = Api::direct;
    wc.mmio = MmioMode::bf_post;
    wc.thread_mode = mode;
    worker = Worker::create(fabric.initiator_ctx(), wc, &err);
    if (!worker) return false;
    const stress::QpPair& p = fabric.pairs()[0];
    ep = worker->add_ep(p.initiator, p.initiator_cq, &err);
    races = std::make_unique<stress::RaceCollector>(emudv_fns(), 4);
    races->start();
    device = std::make_unique<DeviceActor>();
    return ep != nullptr;
  }

  void post(int t) {
    std::memset(payload[t], 'a' + t, sizeof payload[t]);
    PostArgs a;
    a.payload = payload[t];
    a.length = sizeof payload[t];
    a.raddr = reinterpret_cast<uintptr_t>(fabric.target() + 64 * t);
    a.rkey = fabric.target_rkey();
    a.wr_id = t;
    ep->post(a);
  }

  std::string check() {
    races->collect();
    for (uint32_t k = 0; k < EMUDV_RACE_KINDS; ++k)
      if (races->count(k)) return std::string("race:") + stress::race_kind_name(k);
    for (int t = 0; t < 2; ++t)
      for (int i = 0; i < 64; ++i)
        if (fabric.target()[64 * t + i] != 'a' + t) return "payload";
    return "";
  }
};

ScenarioFactory two_posters(ThreadMode mode, std::shared_ptr<TwoPosters>* keep) {
  return [mode, keep] {
    *keep = nullptr;  // the previous run's objects go before this run's are made
    auto s = std::make_shared<TwoPosters>();
    EXPECT_TRUE(s->setup(mode));
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
  for (int i = 0; i < 5; ++i) {
    auto replay = replay_strategy(c.failure.schedule);
    RunResult r = run(f, *replay);
    EXPECT_EQ(r.signature, c.failure.signature);
    EXPECT_EQ(r.trace_hash, c.failure.trace_hash);
  }
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
