// SPDX-License-Identifier: BSD-2-Clause
// A scheduled run: real OS threads, one baton (a futex word per actor), one mover at a time.
#include "sched/run.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <unordered_map>

namespace emu::sched {

namespace detail {
EMU_FAST_TLS constinit Run* tl_run = nullptr;
EMU_FAST_TLS constinit ActorId tl_actor = kNoActor;
}  // namespace detail

namespace {

constexpr uint32_t kParked = 0, kGo = 1, kAbort = 2;

// Parks the calling thread until its baton is given; returns what it was given (kGo or kAbort).
// tl_run is cleared around the wait: libemu_sched.so interposes syscall() and makes an actor's
// futex wait a scheduling wait, which the baton's own wait must not be.
uint32_t take_baton(std::atomic<uint32_t>& baton) {
  uint32_t v;
  Run* run = detail::tl_run;
  detail::tl_run = nullptr;
  while ((v = baton.load(std::memory_order_acquire)) == kParked)
    syscall(SYS_futex, &baton, FUTEX_WAIT_PRIVATE, kParked, nullptr, nullptr, 0);
  baton.store(kParked, std::memory_order_relaxed);
  detail::tl_run = run;
  return v;
}

// The release store publishes everything the giver did to the taker's acquire load.
void give_baton(std::atomic<uint32_t>& baton, uint32_t v) {
  baton.store(v, std::memory_order_release);
  syscall(SYS_futex, &baton, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

Run::Run(Scenario scenario, Strategy& strategy)
    : final_check_(std::move(scenario.final_check)), strategy_(strategy) {
  for (Actor& a : scenario.actors) {
    actors_.push_back(std::make_unique<ActorState>());
    actors_.back()->name = std::move(a.name);
    actors_.back()->body = std::move(a.body);
  }
}

void Run::actor_main(ActorId self) {
  detail::tl_run = this;
  detail::tl_actor = self;
  ActorState& me = *actors_[self];
  try {
    if (take_baton(me.baton) == kAbort) throw RunOver{};
    me.body();
    // A body that swallowed RunOver returns into a run that is over: it must not decide again.
    if (over_) throw RunOver{};
    record(self, kPointFinish, 0, 0);
    me.finished = true;
    switch_from(self, /*leaving=*/true);
  } catch (const RunOver&) {
  } catch (const std::exception& e) {
    end(self, Outcome::kFailed, std::string("exception: ") + e.what());
  } catch (...) {
    end(self, Outcome::kFailed, "exception");
  }
  detail::tl_run = nullptr;
  detail::tl_actor = kNoActor;
}

void Run::record(ActorId self, uint16_t kind, uint64_t addr, uint64_t value) {
  uint32_t step = result_.steps++;
  // A spin (of any kind: a timed wait spins as a wait) is not a move; spin() marks it first.
  if (actors_[self]->spun_at != moves_) ++moves_;
  result_.trace.push_back({step, self, kind, addr, value, point_label(kind)});
  ActorPosition& p = actors_[self]->position;
  p.last_kind = kind;
  p.last_addr = addr;
  ++p.steps;
  if (result_.steps >= step_bound_) end(self, Outcome::kDeadlock, "step bound");
}

bool Run::choose_next(ActorId self, ActorId* next) {
  enabled_.clear();
  bool all_finished = true, all_spin = true;
  for (ActorId i = 0; i < actors_.size(); ++i) {
    const ActorState& a = *actors_[i];
    all_finished &= a.finished;
    if (!a.finished && !a.ready && a.spun_at != moves_) all_spin = false;
    if (enabled(a)) enabled_.push_back(i);
  }
  if (enabled_.empty() && stuck_ && !all_finished && all_spin) {
    // A program's actors all spin (poll, sleep, timed wait): time passes, and they may move again.
    ++idle_rounds_;
    for (ActorId i = 0; i < actors_.size(); ++i)
      if (!actors_[i]->finished && !actors_[i]->ready) enabled_.push_back(i);
    for (ActorId i : enabled_) actors_[i]->spun_at = kNotSpinning;
  }
  if (enabled_.empty()) {
    if (all_finished)
      end(self, Outcome::kOk, "");
    else
      end(self, Outcome::kDeadlock, all_spin ? "livelock" : "deadlock");
    return false;
  }
  if (enabled_.size() == 1) {
    *next = enabled_[0];
    return true;
  }
  bool self_enabled = std::binary_search(enabled_.begin(), enabled_.end(), self);
  Decision d{enabled_,
             self,
             self_enabled,
             result_.steps,
             static_cast<uint32_t>(result_.schedule.choices.size()),
             static_cast<uint32_t>(actors_.size())};
  ActorId c = strategy_.choose(d);
  if (!std::binary_search(enabled_.begin(), enabled_.end(), c)) c = default_choice(d);
  result_.schedule.choices.push_back(c);
  result_.choices.push_back({c, self, self_enabled});
  *next = c;
  return true;
}

void Run::switch_from(ActorId self, bool leaving) {
  ActorId next;
  if (!choose_next(self, &next)) {
    if (leaving) return;
    throw RunOver{};
  }
  if (next == self) {
    resume(self);
    return;
  }
  resume(next);
  give_baton(actors_[next]->baton, kGo);
  if (leaving) return;
  if (take_baton(actors_[self]->baton) == kAbort) throw RunOver{};
}

void Run::resume(ActorId next) {
  ActorState& n = *actors_[next];
  n.ready = nullptr;  // its condition held when it was chosen, and nothing has run since
  n.spun_at = kNotSpinning;
  n.position.waits_on = nullptr;
}

void Run::end(ActorId ender, Outcome outcome, const std::string& signature) {
  if (over_) return;
  over_ = true;
  ender_ = ender;
  result_.outcome = outcome;
  result_.signature = signature;
  if (stuck_) {
    collect_result();
    stuck_(std::move(result_));  // does not return
  }
  if (ender != kNoActor) give_baton(runner_baton_, kGo);
}

void Run::point(ActorId self, uint16_t kind, uint64_t addr, uint64_t value) {
  record(self, kind, addr, value);
  switch_from(self, /*leaving=*/false);
}

void Run::wait(ActorId self, const std::function<bool()>& ready, const char* what, uint16_t kind,
               uint64_t addr) {
  ActorState& me = *actors_[self];
  me.ready = &ready;
  me.position.waits_on = what;
  point(self, kind, addr, 0);
}

void Run::spin(ActorId self, uint16_t kind, uint64_t addr) {
  actors_[self]->spun_at = moves_;
  point(self, kind, addr, 0);
}

bool Run::all_finished_except(ActorId self) const {
  for (ActorId i = 0; i < actors_.size(); ++i)
    if (i != self && !actors_[i]->finished) return false;
  return true;
}

void Run::fail(ActorId self, const std::string& signature) {
  end(self, Outcome::kFailed, signature);
  throw RunOver{};
}

RunResult Run::execute() {
  // One actor moves at a time, so one CPU loses nothing; on one CPU a hand-over is a plain
  // context switch instead of a wake-up on another core (measured 2-10x faster under load).
  cpu_set_t cpu;
  CPU_ZERO(&cpu);
  int here = sched_getcpu();
  if (here >= 0) CPU_SET(here, &cpu);
  for (ActorId i = 0; i < actors_.size(); ++i) {
    actors_[i]->thread = std::thread([this, i] { actor_main(i); });
    if (here >= 0) pthread_setaffinity_np(actors_[i]->thread.native_handle(), sizeof cpu, &cpu);
  }
  // The runner makes the first decision, then parks until the run is over.
  ActorId first;
  if (choose_next(kNoActor, &first)) {
    resume(first);
    give_baton(actors_[first]->baton, kGo);
    take_baton(runner_baton_);
  }
  // Unwind the stuck actors one at a time (the ender first), so scenario destructors never run
  // two at once.
  if (ender_ != kNoActor) actors_[ender_]->thread.join();
  for (ActorId i = 0; i < actors_.size(); ++i) {
    ActorState& a = *actors_[i];
    if (!a.thread.joinable()) continue;
    if (!a.finished) give_baton(a.baton, kAbort);
    a.thread.join();
  }
  if (result_.outcome == Outcome::kOk && final_check_) {
    std::string sig = final_check_();
    if (!sig.empty()) {
      result_.outcome = Outcome::kFailed;
      result_.signature = std::move(sig);
    }
  }
  collect_result();
  return std::move(result_);
}

void Run::collect_result() {
  result_.trace_hash = canonical_trace_hash(result_.trace);
  for (auto& a : actors_) {
    a->position.name = a->name;
    a->position.finished = a->finished;
    result_.positions.push_back(a->position);
  }
}

Run::Run(Strategy& strategy, StuckHandler stuck) : strategy_(strategy), stuck_(std::move(stuck)) {
  detail::tl_run = this;
  detail::tl_actor = add_actor("main");
}

ActorId Run::add_actor(std::string name) {
  actors_.push_back(std::make_unique<ActorState>());
  actors_.back()->name = std::move(name);
  return static_cast<ActorId>(actors_.size() - 1);
}

bool Run::enter(ActorId self) {
  detail::tl_run = this;
  detail::tl_actor = self;
  if (take_baton(actors_[self]->baton) == kGo) return true;
  detail::tl_run = nullptr;
  detail::tl_actor = kNoActor;
  return false;
}

void Run::leave(ActorId self) {
  record(self, kPointFinish, 0, 0);
  actors_[self]->finished = true;
  switch_from(self, /*leaving=*/true);
  detail::tl_run = nullptr;
  detail::tl_actor = kNoActor;
}

RunResult Run::finish_program(ActorId self) {
  record(self, kPointFinish, 0, 0);
  actors_[self]->finished = true;
  over_ = true;
  detail::tl_run = nullptr;
  detail::tl_actor = kNoActor;
  collect_result();
  return std::move(result_);
}

uint64_t canonical_trace_hash(const std::vector<TraceEvent>& events) {
  std::vector<TraceEvent> canonical = events;
  std::unordered_map<uint64_t, uint64_t> order;
  for (TraceEvent& e : canonical) e.addr = order.try_emplace(e.addr, order.size()).first->second;
  return trace_hash(canonical);
}

RunResult run(const ScenarioFactory& factory, Strategy& strategy) {
  Run r(factory(), strategy);
  return r.execute();
}

}  // namespace emu::sched
