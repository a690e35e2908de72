// SPDX-License-Identifier: BSD-2-Clause
// A program-wide scheduled run (EMU_SCHEDULE): the threads of an unmodified program are the actors
// of one run, which starts before main and ends when main returns. libemu_sched.so drives it from
// the program's own thread operations (pthread_create adds an actor in its creator's step,
// pthread_join and condition variables wait as scheduling waits); the provider's post path and the
// inline engine are its points. Every function here is called by the actor holding the baton,
// except enter(), which a new thread calls to wait for it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emu/sched/sched.h"

namespace emu::sched::program {

// EMU_SCHEDULE: "pct:seed=S[,depth=D][,k=K]", "random:seed=S" or "replay:<schedule text>"; any
// of them may add ",max_steps=N" (a replay: after the schedule text, which has no '=').
struct Spec {
  std::string strategy;  // "pct", "random" or "replay"
  uint64_t seed = 0;
  uint32_t depth = 1;  // PCT: 1..3
  uint32_t k = 2000;   // PCT: the expected steps of a run (change points fall in [1, k])
  uint32_t max_steps = 1'000'000;  // more: the run ends stuck ("step bound")
  Schedule replay;
};
bool parse_spec(std::string_view text, Spec* out, std::string* err);
std::string format_spec(const Spec& spec);  // as EMU_SCHEDULE spells it

// A race event the device recorded during the run (emudv_read_races), for the outcome.
struct RaceNote {
  std::string kind;  // "bf_torn", ...
  uint32_t qpn = 0;
  uint32_t slot = 0;
};
// The run's outcome as one JSON object (EMU_SCHEDULE_OUT): spec, outcome, signature, steps,
// decisions, preemptions, schedule, choice records, trace hash, races, replay command.
std::string outcome_json(const Spec& spec, const RunResult& r, const std::vector<RaceNote>& races,
                         const std::string& replay_command);

// Called when the run cannot go on (deadlock, livelock, fail()): reports and ends the process.
using StuckHandler = void (*)(const Spec& spec, const RunResult& result);

// Starts the run with the calling thread as actor 0. One per process.
void start(const Spec& spec, StuckHandler stuck);
bool active();  // started and not yet stopped
// Adds an actor for a thread the caller is about to create (then a kPointSpawn of the caller's).
ActorId add_thread();
void drop_thread(ActorId a);  // its thread could not be created after all: it counts as finished
// On the new thread, before its function: parks until the schedule chooses it. false: the run is
// over (the thread then runs unscheduled).
bool enter(ActorId self);
void leave();  // on that thread, after its function returned
bool finished(ActorId a);
// From now on the program's RDTSC and RDTSCP read the run's logical clock (what its
// clock_gettime reads): code that times itself with the instruction (UCX does) takes the same
// path in every replay. Defined by the provider's fault handling (verbs_provider/mmio/
// tsc_trap.cpp; the counter faults, PR_SET_TSC), which libemu_verbs.so exports with the rest of
// emu::sched. false when the kernel refuses.
bool trap_time_stamp_counter();

// By actor 0: ends the run (other actors stay parked) and returns what happened.
RunResult stop();

}  // namespace emu::sched::program
