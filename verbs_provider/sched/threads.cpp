// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so in a program-wide run (EMU_SCHEDULE, emu/sched/program.h): the program's threads
// are actors, and nothing an actor does while it holds the baton may block in the kernel or read
// the wall clock. A thread an actor creates joins the run in its creator's step and parks until
// chosen; pthread_join, condition variables and futex waits (std::latch, std::atomic::wait) are
// scheduling waits; a timed wait or a sleep is a spin point (time passes when others move); the
// monotonic clocks read the run's step count. Outside a run each call is libc's.
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <unordered_map>

#include "emu/sched/program.h"
#include "libc.h"

namespace {

namespace sched = emu::sched;
namespace program = emu::sched::program;
using emu::sched::ActorId;
using emu_sched::libc_next;

bool in_program_run() { return sched::scheduled() && program::active(); }
uint64_t addr_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// ---- threads ----

struct Start {
  void* (*fn)(void*);
  void* arg;
  ActorId id;
};

void* start_actor(void* p) {
  Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  if (!program::enter(s.id)) return s.fn(s.arg);
  void* ret = s.fn(s.arg);
  program::leave();
  return ret;
}

// The actor of each thread created in the run, for pthread_join (touched under the baton).
std::unordered_map<pthread_t, ActorId>& actor_of_thread() {
  static auto* m = new std::unordered_map<pthread_t, ActorId>();
  return *m;
}

// Generations of the condition variables signalled in the run: a waiter waits for a change.
uint64_t* generation(const void* cond) {
  static auto* m = new std::unordered_map<const void*, uint64_t>();
  return &(*m)[cond];
}

// One CPU for every actor: one moves at a time, and a hand-over is then a plain context switch.
void pin_here(pthread_t t) {
  int cpu = sched_getcpu();
  if (cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(t, sizeof one, &one);
}

using CreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
using JoinFn = int (*)(pthread_t, void**);
using CondWaitFn = int (*)(pthread_cond_t*, pthread_mutex_t*);
using CondTimedFn = int (*)(pthread_cond_t*, pthread_mutex_t*, const timespec*);
using CondClockFn = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*);
using CondWakeFn = int (*)(pthread_cond_t*);
using ClockFn = int (*)(clockid_t, timespec*);
using SleepFn = int (*)(const timespec*, timespec*);
using ClockSleepFn = int (*)(clockid_t, int, const timespec*, timespec*);
using SyscallFn = long (*)(long, ...);
std::atomic<CreateFn> g_create{nullptr};
std::atomic<JoinFn> g_join{nullptr};
std::atomic<CondWaitFn> g_cond_wait{nullptr};
std::atomic<CondTimedFn> g_cond_timed{nullptr};
std::atomic<CondClockFn> g_cond_clock{nullptr};
std::atomic<CondWakeFn> g_signal{nullptr}, g_broadcast{nullptr};
std::atomic<ClockFn> g_clock{nullptr};
std::atomic<SleepFn> g_nanosleep{nullptr};
std::atomic<ClockSleepFn> g_clock_nanosleep{nullptr};
std::atomic<SyscallFn> g_syscall{nullptr};
constexpr const char* kCondVersion = "GLIBC_2.3.2";

// A condition variable's wait: the mutex is released (a scheduling unlock), the actor waits for a
// signal (untimed) or spins once (timed: it returns as timed out unless signalled meanwhile), and
// takes the mutex again. Spurious wake-ups are allowed, so a signal wakes every waiter.
int cond_wait_scheduled(pthread_cond_t* c, pthread_mutex_t* m, bool timed) {
  uint64_t* gen = generation(c);
  uint64_t seen = *gen;
  pthread_mutex_unlock(m);
  if (timed)
    sched::spin(sched::kPointSpin, addr_of(c));
  else
    sched::wait_until([gen, seen] { return *gen != seen; }, "condition variable", sched::kPointWait,
                      addr_of(c));
  bool signalled = *gen != seen;
  pthread_mutex_lock(m);
  return signalled ? 0 : ETIMEDOUT;
}

int cond_wake(pthread_cond_t* c, std::atomic<CondWakeFn>& slot, const char* name) {
  if (in_program_run()) {
    ++*generation(c);
    sched::point(sched::kPointSignal, addr_of(c));
  }
  return libc_next(slot, name, kCondVersion)(c);  // a waiter outside the run waits in libc
}

// A sleep is a spin point: the actor moves again once another has.
int sleep_scheduled() {
  sched::spin(sched::kPointSpin);
  return 0;
}

}  // namespace

extern "C" {

int pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  if (!in_program_run()) return libc_next(g_create, "pthread_create")(t, attr, fn, arg);
  ActorId id = program::add_thread();
  auto* start = new Start{fn, arg, id};
  int rc;
  {
    // The new actor is counted but its thread does not exist yet: nothing libc does to make it
    // (the stack's mmap, which UCX hooks and locks around) may hand the baton over.
    sched::Unscheduled inside_create;
    rc = libc_next(g_create, "pthread_create")(t, attr, start_actor, start);
  }
  if (rc) {
    delete start;
    program::drop_thread(id);
    return rc;
  }
  pin_here(*t);
  actor_of_thread()[*t] = id;
  sched::point(sched::kPointSpawn, 0, id);
  return 0;
}

int pthread_join(pthread_t t, void** ret) {
  if (in_program_run()) {
    auto it = actor_of_thread().find(t);
    if (it != actor_of_thread().end()) {
      ActorId a = it->second;
      actor_of_thread().erase(it);
      // The thread has left the run once finished; libc's join then waits only for its exit.
      sched::wait_until([a] { return program::finished(a); }, "pthread_join", sched::kPointWait, a);
    }
  }
  return libc_next(g_join, "pthread_join")(t, ret);
}

int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  if (!in_program_run()) return libc_next(g_cond_wait, "pthread_cond_wait", kCondVersion)(c, m);
  return cond_wait_scheduled(c, m, false);
}

int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
  if (!in_program_run())
    return libc_next(g_cond_timed, "pthread_cond_timedwait", kCondVersion)(c, m, abs);
  return cond_wait_scheduled(c, m, true);
}

int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clk,
                           const timespec* abs) {
  if (!in_program_run()) return libc_next(g_cond_clock, "pthread_cond_clockwait")(c, m, clk, abs);
  return cond_wait_scheduled(c, m, true);
}

int pthread_cond_signal(pthread_cond_t* c) { return cond_wake(c, g_signal, "pthread_cond_signal"); }

int pthread_cond_broadcast(pthread_cond_t* c) {
  return cond_wake(c, g_broadcast, "pthread_cond_broadcast");
}

// The monotonic clocks of an actor read the run's logical clock (emu/sched/sched.h): a program's
// timeouts are then a function of the schedule. CLOCK_REALTIME stays real (dates in a report).
int clock_gettime(clockid_t clk, timespec* ts) {
  if (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || !in_program_run())
    return libc_next(g_clock, "clock_gettime")(clk, ts);
  uint64_t ns = 1'000'000'000 + sched::logical_time_ns();  // not 0: a program may mean "unset"
  ts->tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts->tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return 0;
}

int nanosleep(const timespec* req, timespec* rem) {
  if (!in_program_run()) return libc_next(g_nanosleep, "nanosleep")(req, rem);
  return sleep_scheduled();
}

int clock_nanosleep(clockid_t clk, int flags, const timespec* req, timespec* rem) {
  if (!in_program_run())
    return libc_next(g_clock_nanosleep, "clock_nanosleep")(clk, flags, req, rem);
  return sleep_scheduled();
}

int usleep(useconds_t us) {
  if (!in_program_run()) {
    timespec ts{static_cast<time_t>(us / 1'000'000), static_cast<long>(us % 1'000'000) * 1000};
    return libc_next(g_nanosleep, "nanosleep")(&ts, nullptr);
  }
  return sleep_scheduled();
}

// std::latch and std::atomic::wait wait with syscall(SYS_futex): an actor's FUTEX_WAIT waits for
// the word to change (a timed one spins once); every other call is libc's.
long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  int cmd = static_cast<int>(a[1]) & FUTEX_CMD_MASK;
  if (nr == SYS_futex && (cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET) && in_program_run()) {
    auto* word = reinterpret_cast<const std::atomic<uint32_t>*>(a[0]);
    uint32_t seen = static_cast<uint32_t>(a[2]);
    if (a[3])
      sched::spin(sched::kPointSpin, addr_of(word));
    else
      sched::wait_until([word, seen] { return word->load(std::memory_order_acquire) != seen; },
                        "futex", sched::kPointWait, addr_of(word));
    return 0;
  }
  return libc_next(g_syscall, "syscall")(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

}  // extern "C"
