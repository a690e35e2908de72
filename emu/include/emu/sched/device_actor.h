// SPDX-License-Identifier: BSD-2-Clause
// The device as an actor of a scheduled run. While one is installed, the doorbells and kicks that
// the run's actors give the device are queued here instead of running the engine in the poster's
// thread; the device actor takes them one at a time, and the engine's steps are its scheduling
// points (kPointDev*), so "the device fetches the doorbell record now" is a decision of the
// schedule like any thread's store.
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>

#include "emu/layout.h"
#include "emu/sched/sched.h"

namespace emu::sched {

class DeviceActor {
 public:
  DeviceActor();   // installs itself: one per process at a time
  ~DeviceActor();  // uninstalls
  DeviceActor(const DeviceActor&) = delete;
  DeviceActor& operator=(const DeviceActor&) = delete;

  // The actor to add to a Scenario: it takes queued work until every other actor has finished and
  // the queue is empty.
  Actor actor(const char* name = "device");

  // Queued work not yet taken (a scenario's oracle may require none at the end).
  size_t pending() const { return queue_.size(); }

  // The installed device when the calling thread is an actor of a scheduled run, else null:
  // device_doorbell() and device_kick_sq() then queue here.
  // Inline: device_doorbell asks on every doorbell (one thread-local load outside a run).
  static DeviceActor* for_caller() {
    return scheduled() ? installed_.load(std::memory_order_relaxed) : nullptr;
  }
  void doorbell(uint64_t ctrl_head) { queue_.push_back({nullptr, ctrl_head, false}); }
  void kick(QpSlot& qp, bool force_retry) { queue_.push_back({&qp, 0, force_retry}); }

 private:
  struct Work {
    QpSlot* qp;  // a kick; null: a doorbell with this head
    uint64_t head;
    bool force_retry;
  };
  void body();

  static inline std::atomic<DeviceActor*> installed_{nullptr};
  // Touched only by actors holding the baton (and the runner between runs): no lock.
  std::deque<Work> queue_;
};

}  // namespace emu::sched
