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

// The verbs objects of a test's schedules: a loopback pair on emu0 and its target buffer, made by
// the first schedule and handed on (a context made and released per schedule was most of a
// schedule's time). Each later schedule finds them as the first did: the pair through RESET and
// connected again (PSNs from 0), its send ring, doorbell record and the target zeroed; the
// schedule before drained its completions (Rig::drain).
struct Objects {
  stress::Fabric fabric;
  bool made = false;

  bool ready() {
    if (!made) {
      stress::FabricConfig fc;
      fc.device = "emu0";
      fc.sq_depth = 16;
      fc.target_bytes = 4096;
      std::string err;
      bool td_missing;
      made = fabric.setup(fc, &err, &td_missing);
      EXPECT_TRUE(made) << err;
      return made;
    }
    std::string err;
    const stress::QpPair& p = fabric.pairs()[0];
    EXPECT_TRUE(fabric.reconnect(0, &err)) << err;
    emudv_qp q;
    if (!err.empty() || uctlite::emudv_fns()->init_qp(p.initiator, &q) != 0) return false;
    std::memset(q.sq_buf, 0, size_t{q.sq_wqe_cnt} * q.sq_stride);
    q.dbrec[1] = 0;
    std::memset(fabric.target(), 0, 4096);
    return true;
  }
};

struct Rig {
  std::shared_ptr<Objects> objects;
  std::unique_ptr<uctlite::Worker> worker;
  uctlite::Ep* ep = nullptr;
  std::unique_ptr<emu::sched::DeviceActor> device;
  std::unique_ptr<stress::RaceCollector> races;
  uint8_t payload[4][kSlotBytes];

  // `shared`: the objects of the schedules before this one (made now if none has yet).
  bool setup(const uctlite::WorkerConfig& wc, std::shared_ptr<Objects> shared) {
    objects = std::move(shared);
    if (!objects->ready()) return false;
    stress::Fabric& fabric = objects->fabric;
    std::string err;
    worker = uctlite::Worker::create(fabric.initiator_ctx(), wc, &err);
    if (!worker) return false;
    const stress::QpPair& p = fabric.pairs()[0];
    ep = worker->add_ep(p.initiator, p.initiator_cq, &err);
    races = std::make_unique<stress::RaceCollector>(uctlite::emudv_fns(), 4);
    races->start();
    device = std::make_unique<emu::sched::DeviceActor>();
    return ep != nullptr;
  }

  // The run is over: its completions polled, so that the next schedule's CQ holds none of them.
  void drain() {
    uctlite::Completion c[8];
    if (ep)
      while (ep->poll(c, 8) > 0) {
      }
  }

  // One inline WRITE of slot n (0..3).
  void post(int n) {
    std::memset(payload[n], 'a' + n, sizeof payload[n]);
    uctlite::PostArgs a;
    a.payload = payload[n];
    a.length = sizeof payload[n];
    a.raddr = reinterpret_cast<uintptr_t>(objects->fabric.target() + kSlotBytes * n);
    a.rkey = objects->fabric.target_rkey();
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
        if (objects->fabric.target()[kSlotBytes * t + i] != 'a' + t) return "payload";
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
