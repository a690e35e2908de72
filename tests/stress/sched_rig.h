// SPDX-License-Identifier: BSD-2-Clause
// What the scheduled post-path tests share: a loopback pair on emu0, one uctlite direct endpoint,
// the device as an actor, the race log, and inline WRITEs of 'a' + n into slot n of the target.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "emu/sched/device_actor.h"
#include "emu/sched/sched.h"
#include "emudv_link.h"
#include "fabric.h"
#include "races.h"
#include "uctlite.h"

namespace sched_rig {

constexpr int kSlotBytes = 64;  // two blocks per WQE with the control and address segments

struct Rig {
  stress::Fabric fabric;
  std::unique_ptr<uctlite::Worker> worker;
  uctlite::Ep* ep = nullptr;
  std::unique_ptr<emu::sched::DeviceActor> device;
  std::unique_ptr<stress::RaceCollector> races;
  uint8_t payload[4][kSlotBytes];

  bool setup(const uctlite::WorkerConfig& wc) {
    stress::FabricConfig fc;
    fc.device = "emu0";
    fc.sq_depth = 16;
    fc.target_bytes = 4096;
    std::string err;
    bool td_missing;
    if (!fabric.setup(fc, &err, &td_missing)) return false;
    worker = uctlite::Worker::create(fabric.initiator_ctx(), wc, &err);
    if (!worker) return false;
    const stress::QpPair& p = fabric.pairs()[0];
    ep = worker->add_ep(p.initiator, p.initiator_cq, &err);
    races = std::make_unique<stress::RaceCollector>(uctlite::emudv_fns(), 4);
    races->start();
    device = std::make_unique<emu::sched::DeviceActor>();
    return ep != nullptr;
  }

  // One inline WRITE of slot n (0..3).
  void post(int n) {
    std::memset(payload[n], 'a' + n, sizeof payload[n]);
    uctlite::PostArgs a;
    a.payload = payload[n];
    a.length = sizeof payload[n];
    a.raddr = reinterpret_cast<uintptr_t>(fabric.target() + kSlotBytes * n);
    a.rkey = fabric.target_rkey();
    a.wr_id = n;
    ep->post(a);
  }

  // "" when the device reported no race and slots 0..n-1 hold their WRITEs.
  std::string check(int n) {
    races->collect();
    for (uint32_t k = 0; k < EMUDV_RACE_KINDS; ++k)
      if (races->count(k)) return std::string("race:") + stress::race_kind_name(k);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < kSlotBytes; ++i)
        if (fabric.target()[kSlotBytes * t + i] != 'a' + t) return "payload";
    return "";
  }
};

// A failing run replayed `times` times from its schedule: the same signature and trace hash.
inline void expect_exact_replays(const emu::sched::ScenarioFactory& f,
                                 const emu::sched::RunResult& failure, int times) {
  for (int i = 0; i < times; ++i) {
    auto replay = emu::sched::replay_strategy(failure.schedule);
    emu::sched::RunResult r = emu::sched::run(f, *replay);
    EXPECT_EQ(r.signature, failure.signature);
    EXPECT_EQ(r.trace_hash, failure.trace_hash);
  }
}

}  // namespace sched_rig
