// SPDX-License-Identifier: BSD-2-Clause
// What scenario code calls: points, waits, the mutex, fail; and the names of point kinds.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "emu/sched/visibility.h"
#include "sched/run.h"

namespace emu::sched {

const char* point_label(uint16_t kind) {
  static const char* const kLabels[] = {
      "yield",    "load",        "store",       "lock",      "unlock",       "wait",
      "finish",   "index load",  "index store", "wqe store", "dbrec store",  "db64",
      "bf chunk", "flush",       "poll",        "spin",      "dev doorbell", "dev dbrec",
      "dev wqe",  "dev execute", "dev cqe",     "drain",     "spawn",        "signal",
      "fd wait",  "mmio store"};
  static_assert(std::size(kLabels) == kPointMmioStore + 1);
  return kind < std::size(kLabels) ? kLabels[kind] : "user";
}

namespace detail {

// An actor whose run is over is unwound by RunOver; a point reached while it unwinds (a
// destructor that unlocks, say) must not throw again, so it does nothing.
static bool unwinding(Run* r) {
  if (!r->over()) return false;
  if (std::uncaught_exceptions() > 0) return true;
  throw RunOver{};
}

// Set while the actor is inside the scheduler's own bookkeeping. Code the bookkeeping calls back
// into (an allocator's hook: UCX's memory events take its spin lock when the trace grows) is part
// of the step being taken: its points are not points, and it is not switched out in the middle.
static EMU_FAST_TLS bool tl_busy;

class Busy {
 public:
  Busy() { tl_busy = true; }
  ~Busy() { tl_busy = false; }
};

void point_slow(uint16_t kind, uint64_t addr, uint64_t value) {
  if (tl_busy || unwinding(tl_run)) return;
  Busy busy;
  tl_run->point(tl_actor, kind, addr, value);
}

void spin_slow(uint16_t kind, uint64_t addr) {
  if (tl_busy || unwinding(tl_run)) return;
  Busy busy;
  tl_run->spin(tl_actor, kind, addr);
}

}  // namespace detail

uint64_t logical_time_ns() { return detail::tl_run ? detail::tl_run->logical_time_ns() : 0; }

Unscheduled::Unscheduled() : was_(detail::tl_busy) { detail::tl_busy = true; }
Unscheduled::~Unscheduled() { detail::tl_busy = was_; }

ActorId current_actor() { return detail::tl_run ? detail::tl_actor : kNoActor; }

bool all_finished_except(ActorId self) {
  return detail::tl_run && detail::tl_run->all_finished_except(self);
}

void lock_acquire(ActorId* holder, const char* what, uint64_t addr) {
  wait_until([holder] { return *holder == kNoActor; }, what, kPointLock, addr);
  *holder = detail::tl_actor;
}

void lock_release(ActorId* holder, uint64_t addr) {
  drain_stores();  // a release: the holder's stores reach the device before the next holder's
  *holder = kNoActor;
  point(kPointUnlock, addr);
}

void wait_until(const std::function<bool()>& ready, const char* what, uint16_t kind,
                uint64_t addr) {
  Run* r = detail::tl_run;
  if (!r || detail::tl_busy) {
    while (!ready()) std::this_thread::yield();
    return;
  }
  if (detail::unwinding(r)) return;
  detail::Busy busy;
  r->wait(detail::tl_actor, ready, what, kind, addr);
}

void fail(const std::string& signature) {
  Run* r = detail::tl_run;
  if (!r) {
    std::fprintf(stderr, "emu::sched::fail outside a scheduled run: %s\n", signature.c_str());
    std::abort();
  }
  if (r->over()) throw RunOver{};
  r->fail(detail::tl_actor, signature);
}

// Inside a scheduled run the baton already lets one actor move at a time, so the real mutex is
// left alone: an unwound deadlock then never blocks in the kernel, and no lock order is reported
// for it. An actor locks and unlocks in the same mode, since a thread's run does not change.
void Mutex::lock() {
  if (!scheduled()) {
    real_.lock();
    return;
  }
  lock_acquire(&holder_, name_, reinterpret_cast<uintptr_t>(this));
}

void Mutex::unlock() {
  if (!scheduled()) {
    real_.unlock();
    return;
  }
  lock_release(&holder_, reinterpret_cast<uintptr_t>(this));
}

std::string RunResult::describe() const {
  static const char* const kOutcomes[] = {"ok", "failed", "deadlock"};
  std::string out = std::string(kOutcomes[static_cast<int>(outcome)]);
  if (!signature.empty() && outcome == Outcome::kFailed) out += " (" + signature + ")";
  out += " after " + std::to_string(steps) + " steps, schedule " + format_schedule(schedule) + "\n";
  for (size_t i = 0; i < positions.size(); ++i) {
    const ActorPosition& p = positions[i];
    char line[256];
    if (p.finished)
      std::snprintf(line, sizeof line, "  actor %zu %s: finished after %u steps\n", i,
                    p.name.c_str(), p.steps);
    else
      std::snprintf(line, sizeof line, "  actor %zu %s: at %s 0x%llx after %u steps%s%s\n", i,
                    p.name.c_str(), point_label(p.last_kind),
                    static_cast<unsigned long long>(p.last_addr), p.steps,
                    p.waits_on ? ", waiting on " : "", p.waits_on ? p.waits_on : "");
    out += line;
  }
  return out;
}

}  // namespace emu::sched
