// SPDX-License-Identifier: BSD-2-Clause
// Shrinking a failing schedule: the smallest schedule we can find that still fails with the same
// signature, so a person reads a few switches instead of hundreds. It needs only a way to run a
// schedule (the replay), so it is tested with synthetic runners and used with the real scheduler.
//
// Order: truncate first (the choices after the failure, and most before it, are noise), then take
// preemptions away, in blocks of halving size and then one at a time (give the choice back to the
// actor that moved before, or delete it), and when none can go, delete other choices the same
// way; truncate again after each pass that changed something, until a pass changes nothing or the
// replay budget is spent.
// Every accepted step is a replay that failed with the same signature, so the result always fails.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "emu/sched/schedule.h"

namespace emu::sched {

// What one replay reports: the failure signature (empty when the run passed) and the decisions it
// made, which say where the preemptions are.
struct RunOutcome {
  std::string signature;
  std::vector<ChoiceRecord> record;
};
using ScheduleRunner = std::function<RunOutcome(const Schedule&)>;

struct ShrinkOptions {
  uint32_t max_runs = 1000;  // replays, counting the first one that confirms the failure
  // Stop as soon as the schedule held fails with at most this many preemptions: a shrink that need
  // only be good enough (a test's bound) leaves the rest of the budget unspent. kNoGoal: shrink
  // until no pass changes the schedule.
  static constexpr uint32_t kNoGoal = UINT32_MAX;
  uint32_t goal_preemptions = kNoGoal;
};

struct ShrinkStats {
  uint32_t runs = 0;  // replays used
  size_t choices_before = 0, choices_after = 0;
  uint32_t preemptions_before = 0, preemptions_after = 0;
  bool reproduced = false;        // the input failed with the signature when replayed
  bool budget_exhausted = false;  // stopped by max_runs, so a smaller schedule may exist
  bool goal_reached = false;      // stopped at goal_preemptions, so a smaller one may exist
};

struct ShrinkResult {
  Schedule schedule;
  ShrinkStats stats;
};

// `failing` is expected to fail with `signature` under `run`; if its replay does not (or the
// signature is empty, which is a pass), it is returned unchanged with stats.reproduced false.
ShrinkResult shrink_schedule(const Schedule& failing, const std::string& signature,
                             const ScheduleRunner& run, const ShrinkOptions& options = {});

}  // namespace emu::sched
