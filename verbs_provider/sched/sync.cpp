// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: a program's own synchronisation inside a scheduled run (emu/sched.h). An actor
// that blocks in the kernel on a mutex another parked actor holds, or spins on a flag another
// actor must set, would stop the run: the baton lets only one actor move. Interposed here, a
// mutex taken by an actor is a scheduling lock (the actor is not enabled while another actor holds
// it), and so is a spin lock (UCX's locks are pthread spin locks), and sched_yield is a spin point.
// Outside a run each call is the real one after a thread-local load. Loaded by programs that
// schedule threads (emu-race links it; emu-run preloads it under EMU_SCHEDULE); never part of
// libemu_verbs.so, so plain verbs programs keep libc's.
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <unordered_map>

#include "emu/sched.h"

namespace {

using MutexFn = int (*)(pthread_mutex_t*);

// libc's function of that name, found on first use (a constructor could run after another
// library's constructor has locked a mutex). dlsym takes the loader's own locks, not these.
template <typename Fn>
Fn real(std::atomic<Fn>& slot, const char* name) {
  Fn f = slot.load(std::memory_order_acquire);
  if (!f) {
    f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}
std::atomic<MutexFn> g_lock{nullptr}, g_trylock{nullptr}, g_unlock{nullptr};
int real_lock(pthread_mutex_t* m) { return real(g_lock, "pthread_mutex_lock")(m); }
int real_trylock(pthread_mutex_t* m) { return real(g_trylock, "pthread_mutex_trylock")(m); }
int real_unlock(pthread_mutex_t* m) { return real(g_unlock, "pthread_mutex_unlock")(m); }

using emu::sched::ActorId;

// Holders of mutexes taken by actors, touched only by the actor holding the baton. Entries stay
// (a wait condition keeps a pointer to its entry; unordered_map keeps them in place).
std::unordered_map<const void*, ActorId>& holders() {
  static auto* h = new std::unordered_map<const void*, ActorId>();
  return *h;
}

ActorId* holder_of(const void* m) {
  return &holders().try_emplace(m, emu::sched::kNoActor).first->second;
}

uint64_t addr_of(const void* m) { return reinterpret_cast<uintptr_t>(m); }

using SpinFn = int (*)(pthread_spinlock_t*);
std::atomic<SpinFn> g_spin_lock{nullptr}, g_spin_trylock{nullptr}, g_spin_unlock{nullptr};
const void* key_of(pthread_spinlock_t* l) { return const_cast<const int*>(l); }

}  // namespace

extern "C" {

// The schedule decides who takes it; then the real mutex too, which is free unless a thread
// outside the run holds it (briefly: it is not scheduled).
int pthread_mutex_lock(pthread_mutex_t* m) {
  if (!emu::sched::scheduled()) return real_lock(m);
  emu::sched::lock_acquire(holder_of(m), "mutex", addr_of(m));
  return real_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t* m) {
  if (!emu::sched::scheduled()) return real_trylock(m);
  emu::sched::point(emu::sched::kPointLock, addr_of(m));
  ActorId* h = holder_of(m);
  if (*h != emu::sched::kNoActor) return EBUSY;
  int rc = real_trylock(m);
  if (rc == 0) *h = emu::sched::current_actor();
  return rc;
}

int pthread_mutex_unlock(pthread_mutex_t* m) {
  if (!emu::sched::scheduled()) return real_unlock(m);
  int rc = real_unlock(m);
  emu::sched::lock_release(holder_of(m), addr_of(m));
  return rc;
}

// A spin lock is a scheduling lock too: an actor spinning on one a parked actor holds would keep
// the baton for ever.
int pthread_spin_lock(pthread_spinlock_t* l) {
  auto real_spin = real(g_spin_lock, "pthread_spin_lock");
  if (!emu::sched::scheduled()) return real_spin(l);
  emu::sched::lock_acquire(holder_of(key_of(l)), "spin lock", addr_of(key_of(l)));
  return real_spin(l);
}

int pthread_spin_trylock(pthread_spinlock_t* l) {
  auto real_try = real(g_spin_trylock, "pthread_spin_trylock");
  if (!emu::sched::scheduled()) return real_try(l);
  emu::sched::point(emu::sched::kPointLock, addr_of(key_of(l)));
  ActorId* h = holder_of(key_of(l));
  if (*h != emu::sched::kNoActor) return EBUSY;
  int rc = real_try(l);
  if (rc == 0) *h = emu::sched::current_actor();
  return rc;
}

int pthread_spin_unlock(pthread_spinlock_t* l) {
  auto real_unlock_spin = real(g_spin_unlock, "pthread_spin_unlock");
  if (!emu::sched::scheduled()) return real_unlock_spin(l);
  int rc = real_unlock_spin(l);
  emu::sched::lock_release(holder_of(key_of(l)), addr_of(key_of(l)));
  return rc;
}

int sched_yield() {
  emu::sched::spin(emu::sched::kPointSpin);
  return static_cast<int>(syscall(SYS_sched_yield));
}

}  // extern "C"
