// SPDX-License-Identifier: BSD-2-Clause
// The strategies: replay, uniform random walk, PCT (Burckhardt et al., ASPLOS 2010).
#include <algorithm>

#include "emu/sched/sched.h"

namespace emu::sched {

ActorId default_choice(const Decision& d) {
  return d.previous_enabled ? d.previous : d.enabled.front();
}

namespace {

class Replay : public Strategy {
 public:
  explicit Replay(Schedule s) : s_(std::move(s)) {}
  // Every decision appends one choice, so decision i replays choice i; an actor that cannot move
  // there is replaced by the default rule in the scheduler.
  ActorId choose(const Decision& d) override {
    return d.index < s_.choices.size() ? s_.choices[d.index] : default_choice(d);
  }

 private:
  Schedule s_;
};

class RandomWalk : public Strategy {
 public:
  explicit RandomWalk(uint64_t seed) : rng_{seed} {}
  ActorId choose(const Decision& d) override { return d.enabled[rng_.below(d.enabled.size())]; }

 private:
  SplitMix64 rng_;
};

// The highest-priority enabled actor moves. Initial priorities are random and above `depth`; at
// each of depth-1 random change steps in [1, k], the actor that moved last drops to priority i
// (the i-th change), below every initial one. A bug of depth d is then hit per run with
// probability >= 1/(n * k^(d-1)).
class Pct : public Strategy {
 public:
  Pct(uint64_t seed, uint32_t depth, uint32_t k) : rng_{seed} {
    for (uint32_t i = 1; i < depth; ++i)
      change_steps_.push_back(1 + static_cast<uint32_t>(rng_.below(std::max(k, 1u))));
    std::sort(change_steps_.begin(), change_steps_.end());
  }
  ActorId choose(const Decision& d) override {
    // Actors appear as the run meets them (a program's threads may register late).
    while (priority_.size() < d.actor_count)
      priority_.push_back(kInitialFloor + (rng_.next() >> 2));
    // Steps between decisions were forced, so a change step passed since the last decision falls
    // on the actor that moved last.
    while (next_change_ < change_steps_.size() && change_steps_[next_change_] <= d.step) {
      ++next_change_;
      if (d.previous != kNoActor) priority_[d.previous] = next_change_;
    }
    return *std::max_element(d.enabled.begin(), d.enabled.end(),
                             [&](ActorId a, ActorId b) { return priority_[a] < priority_[b]; });
  }

 private:
  static constexpr uint64_t kInitialFloor = 16;  // above every change priority (depth <= 15)
  SplitMix64 rng_;
  std::vector<uint32_t> change_steps_;
  size_t next_change_ = 0;
  std::vector<uint64_t> priority_;
};

}  // namespace

std::unique_ptr<Strategy> replay_strategy(Schedule s) {
  return std::make_unique<Replay>(std::move(s));
}
std::unique_ptr<Strategy> random_walk_strategy(uint64_t seed) {
  return std::make_unique<RandomWalk>(seed);
}
std::unique_ptr<Strategy> pct_strategy(uint64_t seed, uint32_t depth, uint32_t k) {
  return std::make_unique<Pct>(seed, std::clamp(depth, 1u, 15u), k);
}

}  // namespace emu::sched
