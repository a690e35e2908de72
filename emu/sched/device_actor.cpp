// SPDX-License-Identifier: BSD-2-Clause
#include "emu/sched/device_actor.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "device/engine.h"

namespace emu::sched {
DeviceActor::DeviceActor() {
  DeviceActor* none = nullptr;
  if (!installed_.compare_exchange_strong(none, this)) {
    std::fprintf(stderr, "emu::sched::DeviceActor: one is installed already\n");
    std::abort();
  }
}

DeviceActor::~DeviceActor() { installed_.store(nullptr); }

Actor DeviceActor::actor(const char* name) {
  return Actor{name, [this] { body(); }};
}

void DeviceActor::body() {
  ActorId me = current_actor();
  Engine* eng = Engine::process_engine();
  for (;;) {
    // Taking a doorbell is the device's decision point; the engine's steps that follow are its
    // next ones.
    wait_until([this, me] { return !queue_.empty() || all_finished_except(me); }, "doorbell",
               kPointDevDoorbell);
    if (queue_.empty()) return;
    Work w = queue_.front();
    queue_.pop_front();
    if (w.qp)
      eng->kick_sq(*w.qp, w.force_retry);
    else
      eng->on_doorbell(w.head);
  }
}

}  // namespace emu::sched
