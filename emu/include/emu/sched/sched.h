// SPDX-License-Identifier: BSD-2-Clause
// The deterministic scheduler: a scenario's actors are real OS threads that pass one baton, so
// exactly one of them runs between two scheduling points. At each point the scheduler picks the
// next actor with a Strategy; a run is a function of the scenario and the strategy's choices only
// (no wall clock, no unseeded randomness), so a Schedule (emu/sched/schedule.h) replays it exactly.
//
// Actor side (any code, any thread): point(), wait_until(), Mutex, fail(). Outside a scheduled
// run they cost one thread_local load (point) or behave as their plain counterparts, so the
// provider's post path and the engine can call them unconditionally.
// Runner side: run() one schedule, explore() every schedule within a preemption bound, campaign()
// many seeded schedules.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu/barriers.h"  // EMU_FAST_TLS
#include "emu/sched/schedule.h"
#include "emu/sched/seeds.h"  // run_seed, splitmix64
#include "emu/sched/trace.h"  // TraceEvent, trace_hash

namespace emu::sched {

// What a scheduling point is; numbers above kUser are the caller's own (label "user").
enum PointKind : uint16_t {
  kPointYield = 0,
  kPointLoad,
  kPointStore,
  kPointLock,    // sched::Mutex::lock, before it is taken
  kPointUnlock,  // sched::Mutex::unlock, after it is released
  kPointWait,    // wait_until
  kPointFinish,  // an actor's body returned
  // The driver's post and poll path (emu/mmio.h and the provider), in the order a post makes them.
  kPointIndexLoad,   // a producer index read by the driver (addr: the index)
  kPointIndexStore,  // a producer index written by the driver
  kPointWqeStore,    // a WQE written into a send ring (addr: the ring slot's segment offset)
  kPointDbrecStore,  // the send doorbell record (value: the producer it publishes)
  kPointDb64,        // the 8-byte MMIO doorbell (value: the control segment's head)
  kPointBfChunk,     // one 64-byte BlueFlame chunk into a register buffer
  kPointFlush,       // mmio_flush_writes: the thread's write-combining buffers reach the device
  kPointPoll,        // the driver reads a CQE's owner byte
  kPointSpin,        // found nothing to do: not enabled again until another actor moves
  // The device's steps (emu/device/engine.h); the device is an actor like the threads.
  kPointDevDoorbell,  // takes a queued doorbell (a scheduled run's device actor)
  kPointDevDbrec,     // reads a send doorbell record
  kPointDevWqe,       // fetches a WQE (addr: the ring slot's segment offset)
  kPointDevExecute,   // executes it
  kPointDevCqe,       // writes a CQE
  kPointDrain,        // a buffered store reaches the device (the visibility model)
  // A program-wide run (emu/sched/program.h): the program's own thread operations.
  kPointSpawn,   // an actor created a thread (value: the new actor)
  kPointSignal,  // a condition variable was signalled or broadcast (addr: it)
  kPointFdWait,  // a wait on file descriptors found none ready (addr: the first descriptor)
  // A store by any code to a trapped device register (verbs_provider/mmio/): addr, its offset in
  // the register pages; value, the code it came from (the first frame
  // outside the emulation and the C library).
  kPointMmioStore,
  kPointUser = 64,
};
const char* point_label(uint16_t kind);  // a static string

class Run;
namespace detail {
// The run the calling thread is an actor of, else null. Initial-exec TLS: the provider's post path
// reads it at every point, and a general-dynamic access would be a call.
// constinit: no dynamic initialisation, so an access is the load itself, not a call to the
// thread_local's init wrapper through the PLT (what a plain extern thread_local costs).
extern EMU_FAST_TLS constinit Run* tl_run;
void point_slow(uint16_t kind, uint64_t addr, uint64_t value);
void spin_slow(uint16_t kind, uint64_t addr);
void wait_slow(const std::function<bool()>& ready, uint16_t kind, uint64_t addr, const char* what);
}  // namespace detail

// A scheduling point: the calling actor may be switched out here.
inline void point(uint16_t kind, uint64_t addr = 0, uint64_t value = 0) {
  if (detail::tl_run) detail::point_slow(kind, addr, value);
}

// A point where the caller found nothing to do (an empty CQ, a lock it polls): the actor stays
// out of the choice until another actor has moved, so a strategy that favours it (PCT) cannot
// spin it forever. A run whose every live actor spins ends as a deadlock ("livelock"); in a
// program-wide run (emu/sched/program.h) time passes instead and the spinners move again.
inline void spin(uint16_t kind = kPointSpin, uint64_t addr = 0) {
  if (detail::tl_run) detail::spin_slow(kind, addr);
}

// Blocks the calling actor (it is not enabled) until ready() holds; ready() is evaluated at each
// decision by whichever actor decides, so it must only read scenario state. `what` names the wait
// in a deadlock report. Outside a scheduled run: spins on ready() with yields.
void wait_until(const std::function<bool()>& ready, const char* what = "condition",
                uint16_t kind = kPointWait, uint64_t addr = 0);

// Ends the run as failed with this signature (a scenario's oracle); does not return when called
// from an actor (the actor is unwound). Outside a scheduled run: aborts the process.
[[noreturn]] void fail(const std::string& signature);

// Whether the calling thread is an actor of a scheduled run.
inline bool scheduled() { return detail::tl_run != nullptr; }

// A scheduled run's clock: one microsecond per step so far. The device's timers (retry, RNR, CQE
// timestamps) read it inside a run, so that no wall clock decides anything there.
uint64_t logical_time_ns();

// The calling actor's id in its run (kNoActor outside a run).
ActorId current_actor();
// Whether every actor of the caller's run other than `self` has finished (a device actor's cue to
// stop once its queue is empty). Callable from a wait_until condition.
bool all_finished_except(ActorId self);

// Within its scope the calling actor takes no scheduling point and its waits do not wait: for a
// call into code that must not be switched out in the middle, such as libc creating a thread the
// run has already counted as an actor (UCX hooks the stack's mmap and takes a lock there). Nests.
class Unscheduled {
 public:
  Unscheduled();
  ~Unscheduled();
  Unscheduled(const Unscheduled&) = delete;
  Unscheduled& operator=(const Unscheduled&) = delete;

 private:
  bool was_;
};

// A lock word owned by code that is not scenario code (the provider's locks): inside a run the
// lock's holder is kept in *holder and taking a held lock blocks the actor (not enabled) instead
// of spinning; outside a run these are not called (the caller takes its real lock).
void lock_acquire(ActorId* holder, const char* what, uint64_t addr);
void lock_release(ActorId* holder, uint64_t addr);

// A mutex whose lock and unlock are scheduling points; an actor waiting for it is not enabled, so
// the scheduler sees blocking (and deadlock) instead of a thread stuck in the kernel. Outside a
// scheduled run it is an ordinary mutex (a real std::mutex).
class Mutex {
 public:
  explicit Mutex(const char* name = "mutex") : name_(name) {}
  void lock();
  void unlock();
  const char* name() const { return name_; }

 private:
  std::mutex real_;
  ActorId holder_ = kNoActor;  // only meaningful inside a scheduled run (read under the baton)
  const char* name_;
};

// ---- runner side ----

struct Actor {
  std::string name;
  std::function<void()> body;
};
// One run's fresh actors and the check of its final state ("" = pass, else a failure signature),
// run on the runner's thread after every actor finished.
struct Scenario {
  std::vector<Actor> actors;
  std::function<std::string()> final_check;
};
using ScenarioFactory = std::function<Scenario()>;

enum class Outcome { kOk, kFailed, kDeadlock };

// Where an actor stood when the run ended (the deadlock report).
struct ActorPosition {
  std::string name;
  uint16_t last_kind = kPointYield;
  uint64_t last_addr = 0;
  uint32_t steps = 0;
  bool finished = false;
  const char* waits_on = nullptr;  // the wait's `what`, or null when it was not waiting
};

struct RunResult {
  Outcome outcome = Outcome::kOk;
  std::string signature;  // kFailed: the oracle's; kDeadlock: "deadlock"
  Schedule schedule;      // the non-forced choices, in order
  std::vector<ChoiceRecord> choices;
  uint32_t steps = 0;
  uint64_t trace_hash = 0;  // canonical_trace_hash(trace)
  std::vector<TraceEvent> trace;
  std::vector<ActorPosition> positions;  // one per actor, by ActorId
  std::string describe() const;          // a line per actor, for people
};

// trace_hash (emu/sched/trace.h) of the events with each address replaced by its order of first
// appearance: addresses differ between processes (ASLR, allocators), so a replay in another
// process, or under ASan, hashes the same.
uint64_t canonical_trace_hash(const std::vector<TraceEvent>& events);

// A decision: more than one actor can move. `enabled` is sorted ascending.
struct Decision {
  const std::vector<ActorId>& enabled;
  ActorId previous;  // the actor that moved last (kNoActor at the start)
  bool previous_enabled;
  uint32_t step;         // points so far in this run
  uint32_t index;        // decisions so far in this run
  uint32_t actor_count;  // actors in the run so far
};

// Chosen once per run; a choice outside `enabled` is replaced by the default rule.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual ActorId choose(const Decision& d) = 0;
};
// The default rule of schedule.h: the previous actor if it can move, else the lowest enabled.
ActorId default_choice(const Decision& d);

std::unique_ptr<Strategy> replay_strategy(Schedule s);
std::unique_ptr<Strategy> random_walk_strategy(uint64_t seed);
// PCT with `depth` d (1..3) and `k` the expected number of steps of a run.
std::unique_ptr<Strategy> pct_strategy(uint64_t seed, uint32_t depth, uint32_t k);

RunResult run(const ScenarioFactory& factory, Strategy& strategy);

// Every schedule within a bound, depth first, up to `max_schedules` runs. The bound counts
// deviations from a deterministic scheduler:
// - kPreemptions (CHESS): switching away from an actor that could go on. Choices after a block or
//   a finish are free, so n actors that each finish or block have up to n! schedules even at
//   bound 0: for a few actors.
// - kDelays (delay bounding, Emmi, Qadeer and Rakamaric, POPL 2011): round robin, each actor it
//   skips one delay, free choices included. Bound d has at most (decisions x actors)^d schedules
//   whatever the number of actors: the bounded search of scenarios with many.
enum class BoundKind { kPreemptions, kDelays };
struct ExploreResult {
  bool failed = false;
  RunResult failure;       // the first failing (or deadlocking) run
  uint64_t schedules = 0;  // runs made
  bool exhausted = false;  // every schedule within the bound was run (no failure within bound)
};
ExploreResult explore(const ScenarioFactory& factory, uint32_t bound,
                      uint64_t max_schedules = 1'000'000, BoundKind kind = BoundKind::kPreemptions);

enum class StrategyKind { kRandomWalk, kPct };
struct CampaignResult {
  bool failed = false;
  uint64_t failing_seed = 0;  // the per-run seed of the first failure
  uint64_t schedules = 0;     // runs made, the failing one included
  RunResult failure;
};
// Runs up to `budget` schedules with per-run seeds from `master_seed`, stopping at the first
// failure. kPct measures k from a first default-rule run and cycles depth 1, 2, 3.
CampaignResult campaign(const ScenarioFactory& factory, StrategyKind kind, uint64_t master_seed,
                        uint64_t budget);
// The strategy campaign() builds for run `index` from its seed (run_seed of seeds.h), so one
// run of a campaign can be repeated alone.
std::unique_ptr<Strategy> campaign_strategy(StrategyKind kind, uint64_t run_seed, uint64_t index,
                                            uint32_t k);

// The splitmix64 generator: the one PRNG of scheduled runs (seeded; no std::random_device, no
// time). Its i-th output from `state` is run_seed(state, i).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t out = splitmix64(state);
    state += 0x9e3779b97f4a7c15ull;
    return out;
  }
  uint64_t below(uint64_t n) { return next() % n; }  // n > 0; the bias is negligible here
};

}  // namespace emu::sched
