// SPDX-License-Identifier: BSD-2-Clause
// Shrinking a failing schedule (emu/sched/shrink.h).
#include "emu/sched/shrink.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <utility>

namespace emu::sched {

namespace {

// Failure need not be monotone in the prefix length (a shorter prefix hands the run to the replay
// default earlier, which can bring the failure back), so after the binary search a few lengths
// below its answer are tried one by one; this many passing lengths in a row end that walk.
constexpr size_t kTightenWindow = 4;

bool is_preemption(const ChoiceRecord& r) {
  return r.previous != kNoActor && r.previous_enabled && r.chosen != r.previous;
}

// A choice of another actor than the one that moved before. Deleting a choice that is not one only
// shifts the choices after it onto other decisions: worth a replay one at a time, not in blocks
// (a program's set-up is hundreds of them in a row).
bool is_switch(const ChoiceRecord& r) { return r.chosen != r.previous; }

Schedule prefix(const Schedule& s, size_t len) {
  return Schedule{{s.choices.begin(), s.choices.begin() + static_cast<std::ptrdiff_t>(len)}};
}

// Holds the smallest failing schedule so far and the record of its replay; every change goes
// through try_accept, so the schedule it holds has always been seen failing with the signature.
class Shrinker {
 public:
  Shrinker(const std::string& signature, const ScheduleRunner& run, const ShrinkOptions& options)
      : signature_(signature), run_(run), options_(options) {}

  bool try_accept(Schedule s) {
    if (done()) return false;
    if (runs_ >= options_.max_runs) {
      exhausted_ = true;
      return false;
    }
    ++runs_;
    RunOutcome o = run_(s);
    if (o.signature != signature_) return false;
    current_ = std::move(s);
    record_ = std::move(o.record);
    // Choices past the run's last decision were never consumed: without them it replays the same.
    if (current_.choices.size() > record_.size()) current_.choices.resize(record_.size());
    goal_reached_ = options_.goal_preemptions != ShrinkOptions::kNoGoal &&
                    count_preemptions(record_) <= options_.goal_preemptions;
    return true;
  }

  void truncate() {
    const Schedule whole = current_;  // every probe below is a prefix of it
    std::set<size_t> passing;
    size_t lo = 0, hi = current_.choices.size();
    while (lo < hi && !done()) {
      const size_t mid = lo + (hi - lo) / 2;
      if (try_accept(prefix(whole, mid))) {
        hi = current_.choices.size();
      } else {
        passing.insert(mid);
        lo = mid + 1;
      }
    }
    size_t passes_in_a_row = 0;
    for (size_t len = hi; len-- > 0 && passes_in_a_row < kTightenWindow && !done();) {
      if (passing.count(len)) {
        ++passes_in_a_row;
      } else if (try_accept(prefix(whole, len))) {
        len = current_.choices.size();
        passes_in_a_row = 0;
      } else {
        ++passes_in_a_row;
      }
    }
  }

  // One pass over the schedule; true when it changed it. The preemption pass gives each
  // preempting choice back to the actor that moved before (as replay's default would) or deletes
  // it; the deletion pass deletes any choice, for the switches that are not preemptions but still
  // lead to one (a first choice of another actor, which the next preemption then undoes).
  bool edit_pass(bool preemptions_only) {
    bool changed = false;
    for (size_t i = 0; i < current_.choices.size() && !done();) {
      const bool preempts = is_preemption(record_[i]);
      if (preemptions_only && !preempts) {
        ++i;
        continue;
      }
      Schedule yield = current_;
      yield.choices[i] = record_[i].previous;
      Schedule drop = current_;
      drop.choices.erase(drop.choices.begin() + static_cast<std::ptrdiff_t>(i));
      if ((preempts && try_accept(std::move(yield))) || try_accept(std::move(drop))) {
        changed = true;  // index i now holds a yield or the next choice: look at it again
      } else {
        ++i;
      }
    }
    return changed;
  }

  // The same edits on blocks of choices, halving the block down to 2 (one is edit_pass's): a long
  // run of choices that do not matter (a program's set-up, a thread spinning while the others
  // move) goes in a few replays instead of one each. Giving back the preemptions of a block keeps
  // the block's other choices; deleting drops them all (a block without a switch is left to
  // edit_pass). True when it changed the schedule.
  bool block_pass(bool preemptions_only) {
    bool changed = false;
    for (size_t block = current_.choices.size() / 2; block >= 2 && !done(); block /= 2) {
      for (size_t start = 0; start < current_.choices.size() && !done();) {
        const size_t end = std::min(start + block, current_.choices.size());
        Schedule edited = current_;
        bool any = false;
        if (preemptions_only) {
          for (size_t i = start; i < end; ++i)
            if (is_preemption(record_[i])) {
              edited.choices[i] = record_[i].previous;
              any = true;
            }
        } else {
          for (size_t i = start; i < end && !any; ++i) any = is_switch(record_[i]);
          edited.choices.erase(edited.choices.begin() + static_cast<std::ptrdiff_t>(start),
                               edited.choices.begin() + static_cast<std::ptrdiff_t>(end));
        }
        if (any && try_accept(std::move(edited)))
          changed = true;  // the block now holds other choices, or none to give back
        else
          start = end;
      }
    }
    return changed;
  }

  const Schedule& current() const { return current_; }
  const std::vector<ChoiceRecord>& record() const { return record_; }
  uint32_t runs() const { return runs_; }
  bool exhausted() const { return exhausted_; }
  bool goal_reached() const { return goal_reached_; }
  bool done() const { return exhausted_ || goal_reached_; }

 private:
  const std::string& signature_;
  const ScheduleRunner& run_;
  const ShrinkOptions options_;
  uint32_t runs_ = 0;
  bool exhausted_ = false;
  bool goal_reached_ = false;
  Schedule current_;
  std::vector<ChoiceRecord> record_;
};

}  // namespace

ShrinkResult shrink_schedule(const Schedule& failing, const std::string& signature,
                             const ScheduleRunner& run, const ShrinkOptions& options) {
  ShrinkResult out{failing, {}};
  out.stats.choices_before = failing.choices.size();
  Shrinker shrinker(signature, run, options);
  if (!signature.empty() && shrinker.try_accept(failing)) {
    out.stats.reproduced = true;
    out.stats.preemptions_before = count_preemptions(shrinker.record());
    while (!shrinker.done()) {
      shrinker.truncate();
      if (!(shrinker.block_pass(true) || shrinker.edit_pass(true) || shrinker.block_pass(false) ||
            shrinker.edit_pass(false)))
        break;
    }
    out.schedule = shrinker.current();
    out.stats.preemptions_after = count_preemptions(shrinker.record());
  }
  out.stats.runs = shrinker.runs();
  out.stats.budget_exhausted = shrinker.exhausted();
  out.stats.goal_reached = shrinker.goal_reached();
  out.stats.choices_after = out.schedule.choices.size();
  return out;
}

}  // namespace emu::sched
