// SPDX-License-Identifier: BSD-2-Clause
// One scheduled run's state (private to emu/sched): the actors' threads, their batons and
// positions, and the result being built. Every member is read and written only by the thread that
// holds the baton (an actor, or the runner before the first hand-over and after the run is over):
// the baton's release/acquire hand-over orders all of it.
//
// A program-wide run (EMU_SCHEDULE, emu/sched/program.h) has no runner and no scenario: the thread
// that starts it is actor 0, and a thread an actor creates is added by its creator under the baton
// (add_actor: appended, pointers so existing states do not move; Decision::actor_count grows and
// PCT gives the newcomer a priority when it first sees it). The new thread parks in enter() until
// chosen and leaves with leave(); the starting thread stops the run with finish_program(). A run
// that cannot go on (deadlock, fail()) calls the stuck handler, which does not return.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "emu/sched/sched.h"

namespace emu::sched {

namespace detail {
extern EMU_FAST_TLS constinit ActorId tl_actor;  // the calling thread's actor in tl_run
}  // namespace detail

// Thrown out of point()/wait_until()/fail() to unwind an actor whose run is over; caught by the
// actor's wrapper, never seen by scenario code that does not catch everything.
struct RunOver {};

class Run {
 public:
  Run(Scenario scenario, Strategy& strategy);
  RunResult execute();  // on the runner's thread; returns when every actor thread is joined

  // Program-wide runs (see above).
  using StuckHandler = std::function<void(RunResult)>;
  Run(Strategy& strategy, StuckHandler stuck);  // the calling thread becomes actor 0, "main"
  ActorId add_actor(std::string name);          // by the actor holding the baton
  bool enter(ActorId self);  // on the new thread: parks until chosen; false: the run is over
  void leave(ActorId self);  // the thread's function returned: it finishes, the baton moves on
  void drop(ActorId a) { actors_[a]->finished = true; }  // its thread could not be created
  RunResult finish_program(ActorId self);  // by actor 0: the run ends, the other actors stay parked
  bool finished(ActorId a) const { return a < actors_.size() && actors_[a]->finished; }
  // The run's logical clock (sched.h's logical_time_ns): a microsecond per step, and in a
  // program-wide run a millisecond more per idle round.
  uint64_t logical_time_ns() const {
    return result_.steps * uint64_t{1000} + idle_rounds_ * 1'000'000;
  }
  // A program-wide run that makes this many steps ends stuck ("step bound"): a livelock whose
  // actors keep moving (a poller that takes a lock each round) is never all-spinning.
  void set_step_bound(uint32_t steps) { step_bound_ = steps; }
  // Room for this many points' records, taken now: a run whose trace would otherwise grow by
  // reallocation (and free its old storage) inside a program whose allocator is hooked.
  void reserve(uint32_t steps) {
    result_.trace.reserve(steps);
    result_.choices.reserve(steps);
    result_.schedule.choices.reserve(steps);
  }

  // Called by the actor `self` holding the baton.
  void point(ActorId self, uint16_t kind, uint64_t addr, uint64_t value);
  void wait(ActorId self, const std::function<bool()>& ready, const char* what, uint16_t kind,
            uint64_t addr);
  void spin(ActorId self, uint16_t kind, uint64_t addr);
  bool all_finished_except(ActorId self) const;
  [[noreturn]] void fail(ActorId self, const std::string& signature);
  bool over() const { return over_; }
  uint32_t steps() const { return result_.steps; }

 private:
  struct ActorState {
    std::string name;
    std::function<void()> body;
    std::thread thread;
    std::atomic<uint32_t> baton{0};  // kParked, kGo or kAbort
    bool finished = false;
    const std::function<bool()>* ready = nullptr;  // set while it waits
    uint64_t spun_at = kNotSpinning;               // moves_ when it last spun
    ActorPosition position;
  };

  void actor_main(ActorId self);
  void record(ActorId self, uint16_t kind, uint64_t addr, uint64_t value);
  // Picks who moves next and hands it the baton; `self` parks unless it is leaving (it finished,
  // or it is the runner). Returns normally when `self` is chosen again; throws RunOver when the run
  // ends while `self` is parked or is the one that ends it.
  void switch_from(ActorId self, bool leaving);
  bool choose_next(ActorId self, ActorId* next);  // false: the run is over
  void resume(ActorId next);                      // clears its wait before it moves
  void end(ActorId ender, Outcome outcome, const std::string& signature);
  void collect_result();  // the hash and the positions, once the run is over

  static constexpr uint64_t kNotSpinning = ~0ull;
  bool enabled(const ActorState& a) const {
    return !a.finished && a.spun_at != moves_ && (!a.ready || (*a.ready)());
  }

  std::vector<std::unique_ptr<ActorState>> actors_;
  uint64_t moves_ = 0;  // points recorded other than spins: a spinner waits for this to change
  std::function<std::string()> final_check_;
  Strategy& strategy_;
  RunResult result_;
  std::vector<ActorId> enabled_;  // scratch for choose_next
  std::atomic<uint32_t> runner_baton_{0};
  bool over_ = false;
  ActorId ender_ = kNoActor;
  StuckHandler stuck_;  // set: a program-wide run
  uint32_t step_bound_ = ~0u;
  // Times every live actor of a program-wide run spun at once: instead of a livelock, time passed
  // (each spinner may move again), so a program's poll loop times out as it would unscheduled.
  uint64_t idle_rounds_ = 0;
};

}  // namespace emu::sched
