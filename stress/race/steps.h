// SPDX-License-Identifier: BSD-2-Clause
// A scenario given as data rather than code (what the Python harness hands over): a uctlite worker
// over some rig pairs in a thread mode and MMIO mode, a memory profile, and actors that are each a
// list of steps. Each step runs inside the actor's thread over the run's state of run_state.h, so
// the oracles are the built-in scenarios' own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "scenario.h"

namespace race {

enum class StepOp {
  kPost,   // one message of `len` bytes through endpoint `ep`
  kPoll,   // one poll of endpoint `ep`: up to 8 completions, none if its CQ is empty
  kFlush,  // mmio_flush_writes: this thread's write-combining buffers reach the device
  kYield,  // a plain scheduling point
};

struct Step {
  StepOp op = StepOp::kYield;
  uint32_t ep = 0;
  uint32_t len = 0;
};

struct StepActor {
  std::string name;
  std::vector<Step> steps;
};

struct StepSpec {
  std::string name;
  std::vector<uint32_t> pairs{0};      // endpoint i is on rig pair pairs[i]
  std::string thread_mode = "single";  // uctlite: single | serialized
  std::string mmio = "bf_post";        // uctlite: bf_post | bf_post_mt | db_lock
  std::string profile = "sc";          // sc | x86 | weak (store buffers, emu/sched/visibility.h)
  bool write_combining = false;        // not sc: BlueFlame chunks held in WC buffers too
  std::vector<StepActor> actors;
};

// Whether the spec can run (names known, endpoints and lengths in range, a target slot for every
// message); *err says what is wrong.
bool validate(const StepSpec& spec, std::string* err);
// The spec as a campaign's scenario definition (buggy: unknown, so none of its fields claim it).
ScenarioDef step_scenario(const StepSpec& spec);

}  // namespace race
