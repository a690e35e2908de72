// SPDX-License-Identifier: BSD-2-Clause
// Preemption-bounded exhaustive search (CHESS-style, depth first) and seeded campaigns.
#include <algorithm>

#include "emu/sched/sched.h"

namespace emu::sched {

namespace {

// One decision of the current path: the actors that could move there, in the order the bound's
// deterministic scheduler ranks them (order[0] is its own choice), and what each costs.
struct Frame {
  std::vector<ActorId> order;
  ActorId previous;
  bool previous_enabled;
  size_t chosen = 0;  // index into order of what the current path chooses here
  uint32_t spent;     // the bound's budget used on the path up to here, this decision not included
};

// The deterministic scheduler each bound measures against, and the price of deviating from it.
// Preemptions: the previous actor if it can move, else the lowest enabled; choosing another actor
// while the previous one could move is one preemption, any choice after a block or a finish is
// free. Delays: round robin from the previous actor (it first if it can move, then the next ids
// cyclically); the j-th actor of that order costs j delays, free choices included.
std::vector<ActorId> rank(const Decision& d, BoundKind kind) {
  std::vector<ActorId> order;
  order.reserve(d.enabled.size());
  if (kind == BoundKind::kPreemptions) {
    ActorId first = default_choice(d);
    order.push_back(first);
    for (ActorId a : d.enabled)
      if (a != first) order.push_back(a);
    return order;
  }
  ActorId from = d.previous == kNoActor ? 0 : d.previous;
  auto it = std::lower_bound(d.enabled.begin(), d.enabled.end(), from);
  order.insert(order.end(), it, d.enabled.end());
  order.insert(order.end(), d.enabled.begin(), it);
  return order;
}

uint32_t cost(const Frame& f, size_t j, BoundKind kind) {
  if (kind == BoundKind::kDelays) return static_cast<uint32_t>(j);
  ActorId c = f.order[j];
  return f.previous != kNoActor && f.previous_enabled && c != f.previous ? 1 : 0;
}

// Follows the frames already on the path, then extends it with the scheduler's own choices.
class PathStrategy : public Strategy {
 public:
  PathStrategy(std::vector<Frame>& frames, BoundKind kind) : frames_(frames), kind_(kind) {}
  ActorId choose(const Decision& d) override {
    if (d.index < frames_.size()) {
      const Frame& f = frames_[d.index];
      return f.order[f.chosen];
    }
    uint32_t before = 0;
    if (!frames_.empty()) {
      const Frame& last = frames_.back();
      before = last.spent + cost(last, last.chosen, kind_);
    }
    frames_.push_back({rank(d, kind_), d.previous, d.previous_enabled, 0, before});
    return frames_.back().order[0];
  }

 private:
  std::vector<Frame>& frames_;
  BoundKind kind_;
};

// Moves the deepest frame that has an alternative within the bound to it, dropping the frames
// below; false when none is left (the search is exhausted).
bool next_path(std::vector<Frame>& frames, uint32_t bound, BoundKind kind) {
  while (!frames.empty()) {
    Frame& f = frames.back();
    while (++f.chosen < f.order.size())
      if (f.spent + cost(f, f.chosen, kind) <= bound) return true;
    frames.pop_back();
  }
  return false;
}

}  // namespace

ExploreResult explore(const ScenarioFactory& factory, uint32_t bound, uint64_t max_schedules,
                      BoundKind kind) {
  ExploreResult out;
  std::vector<Frame> frames;
  while (out.schedules < max_schedules) {
    PathStrategy path(frames, kind);
    RunResult r = run(factory, path);
    ++out.schedules;
    if (r.outcome != Outcome::kOk) {
      out.failed = true;
      out.failure = std::move(r);
      return out;
    }
    if (!next_path(frames, bound, kind)) {
      out.exhausted = true;
      return out;
    }
  }
  return out;
}

std::unique_ptr<Strategy> campaign_strategy(StrategyKind kind, uint64_t run_seed, uint64_t index,
                                            uint32_t k) {
  if (kind == StrategyKind::kPct) return pct_strategy(run_seed, 1 + index % 3, k);
  return random_walk_strategy(run_seed);
}

CampaignResult campaign(const ScenarioFactory& factory, StrategyKind kind, uint64_t master_seed,
                        uint64_t budget) {
  CampaignResult out;
  uint32_t k = 0;
  if (kind == StrategyKind::kPct) {
    // PCT's k: the steps of one run under the default rule (a first run, not counted).
    auto first = replay_strategy({});
    k = run(factory, *first).steps;
  }
  for (uint64_t i = 0; i < budget; ++i) {
    uint64_t seed = run_seed(master_seed, i);
    auto strategy = campaign_strategy(kind, seed, i, k);
    RunResult r = run(factory, *strategy);
    ++out.schedules;
    if (r.outcome != Outcome::kOk) {
      out.failed = true;
      out.failing_seed = seed;
      out.failure = std::move(r);
      return out;
    }
  }
  return out;
}

}  // namespace emu::sched
