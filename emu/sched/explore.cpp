// Preemption-bounded exhaustive search (CHESS-style, depth first) and seeded campaigns.
#include "emu/sched.h"

namespace emu::sched {

namespace {

// One decision of the current path: what could move there and which alternatives are left.
struct Frame {
  std::vector<ActorId> enabled;
  ActorId previous;
  bool previous_enabled;
  ActorId first;         // the default choice the path first took here
  ActorId chosen;        // what the current path chooses here
  size_t next_alt = 0;   // the next index of `enabled` to try instead of `first`
  uint32_t preemptions;  // on the path up to here, this decision not included
  bool preempts(ActorId c) const {
    return previous != kNoActor && previous_enabled && c != previous;
  }
};

// Follows the frames already on the path, then extends it with default (non-preempting) choices.
class PathStrategy : public Strategy {
 public:
  explicit PathStrategy(std::vector<Frame>& frames) : frames_(frames) {}
  ActorId choose(const Decision& d) override {
    if (d.index < frames_.size()) return frames_[d.index].chosen;
    uint32_t before = 0;
    if (!frames_.empty()) {
      const Frame& last = frames_.back();
      before = last.preemptions + (last.preempts(last.chosen) ? 1 : 0);
    }
    ActorId c = default_choice(d);
    frames_.push_back({d.enabled, d.previous, d.previous_enabled, c, c, 0, before});
    return c;
  }

 private:
  std::vector<Frame>& frames_;
};

// Moves the deepest frame that has an alternative within the bound to it, dropping the frames
// below; false when none is left (the search is exhausted).
bool next_path(std::vector<Frame>& frames, uint32_t bound) {
  while (!frames.empty()) {
    Frame& f = frames.back();
    for (; f.next_alt < f.enabled.size(); ++f.next_alt) {
      ActorId alt = f.enabled[f.next_alt];
      if (alt == f.first || f.preemptions + (f.preempts(alt) ? 1 : 0) > bound) continue;
      f.chosen = alt;
      ++f.next_alt;
      return true;
    }
    frames.pop_back();
  }
  return false;
}

}  // namespace

ExploreResult explore(const ScenarioFactory& factory, uint32_t bound, uint64_t max_schedules) {
  ExploreResult out;
  std::vector<Frame> frames;
  while (out.schedules < max_schedules) {
    PathStrategy path(frames);
    RunResult r = run(factory, path);
    ++out.schedules;
    if (r.outcome != Outcome::kOk) {
      out.failed = true;
      out.failure = std::move(r);
      return out;
    }
    if (!next_path(frames, bound)) {
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
