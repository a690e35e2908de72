// SPDX-License-Identifier: BSD-2-Clause
// One scheduled run's shared state over the rig, for the scenarios that post messages: the
// messages (each an inline RDMA WRITE of `len` bytes of one fill byte into a target slot of its
// own), the uctlite worker and endpoints, the ledger, and the final check that runs the oracles in
// order: the device's race events, every completion taken exactly once, every payload whole at the
// target. Used by the built-in scenarios (scenarios.cpp) and by step scenarios (steps.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "emu/sched/sched.h"
#include "emu/sched/visibility.h"
#include "rig.h"

namespace race {

struct Msg {
  uint32_t pair;  // rig pair
  uint32_t slot;  // target slot on that pair
  uint8_t fill;
  uint32_t len;
};

struct RunState {
  Rig* rig = nullptr;
  std::vector<uint32_t> pairs;
  std::unique_ptr<uctlite::Worker> worker;  // uctlite scenarios
  std::vector<uctlite::Ep*> eps;            // eps[i] on pairs[i]
  std::vector<Msg> msgs;
  Ledger ledger;
  bool drain = true;  // the final check takes the completions left (posting scenarios)
  std::unique_ptr<emu::sched::StoreBuffers> buffers;  // a memory profile other than sc

  // A new message on `pair` (the next free slot there; its fill byte from its index).
  Msg& add(uint32_t pair, uint32_t len);
  std::string check();
  // Every completion left: through the endpoints, or the raw CQs when there are none.
  void take_all();
  // Up to 8 completions of endpoint `ep` into the ledger; how many.
  int poll_ep(size_t ep);
};

using Shared = std::shared_ptr<RunState>;

Shared start(Rig& rig, const std::vector<uint32_t>& pairs);
// The run's scenario: the actors, then the device actor, the final check the state's.
emu::sched::Scenario finish(const Shared& s, std::vector<emu::sched::Actor> actors);
// Posts msgs[m] through eps[ep] (uctlite), its wr_id m; the ledger notes it if the post took.
// note_first: noted before the post (and forgotten if it did not take), for scenarios whose actors
// poll: another actor may take the completion before the poster returns from the post.
void uct_post(const Shared& s, size_t ep, size_t m, bool note_first = false);

}  // namespace race
