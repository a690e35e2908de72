// One scheduled run's state (private to emu/sched): the actors' threads, their batons and
// positions, and the result being built. Every member is read and written only by the thread that
// holds the baton (an actor, or the runner before the first hand-over and after the run is over):
// the baton's release/acquire hand-over orders all of it.
//
// Room for threads that join late (EMU_SCHEDULE over an unmodified program, not built yet): a
// thread that reaches point() while a program-wide run is active and has no tl_run would register
// itself under the baton, appending to actors_ (pointers, so existing states do not move);
// Decision::actor_count grows with it and PCT gives a newcomer a priority when it first sees it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "emu/sched.h"

namespace emu::sched {

namespace detail {
extern EMU_FAST_TLS ActorId tl_actor;  // the calling thread's actor in tl_run
}  // namespace detail

// Thrown out of point()/wait_until()/fail() to unwind an actor whose run is over; caught by the
// actor's wrapper, never seen by scenario code that does not catch everything.
struct RunOver {};

class Run {
 public:
  Run(Scenario scenario, Strategy& strategy);
  RunResult execute();  // on the runner's thread; returns when every actor thread is joined

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
};

}  // namespace emu::sched
