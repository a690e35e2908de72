// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: a program's own synchronisation inside a scheduled run (emu/sched/sched.h). An
// actor that blocks in the kernel on a mutex another parked actor holds, or spins on a flag another
// actor must set, would stop the run: the baton lets only one actor move. Interposed here, a
// mutex taken by an actor is a scheduling lock (the actor is not enabled while another actor holds
// it), and so are a spin lock (UCX's locks are pthread spin locks) and a reader-writer lock, and
// sched_yield is a spin point.
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

#include "emu/sched/sched.h"
#include "emu/sched/visibility.h"

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

// A reader-writer lock taken by actors (UCX's registration cache has one): its writer, if any,
// and how many actors hold it to read. Touched only under the baton; entries stay in place.
struct RwHolders {
  ActorId writer = emu::sched::kNoActor;
  uint32_t readers = 0;
};
RwHolders* rw_holders_of(const void* l) {
  static auto* m = new std::unordered_map<const void*, RwHolders>();
  return &(*m)[l];
}
using RwFn = int (*)(pthread_rwlock_t*);
std::atomic<RwFn> g_rdlock{nullptr}, g_wrlock{nullptr}, g_tryrdlock{nullptr}, g_trywrlock{nullptr},
    g_rwunlock{nullptr};

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

// A reader waits while an actor writes; a writer while any actor holds it. Then the real lock,
// which is free unless a thread outside the run holds it.
int pthread_rwlock_rdlock(pthread_rwlock_t* l) {
  auto real_rd = real(g_rdlock, "pthread_rwlock_rdlock");
  if (!emu::sched::scheduled()) return real_rd(l);
  RwHolders* h = rw_holders_of(l);
  emu::sched::wait_until([h] { return h->writer == emu::sched::kNoActor; }, "rwlock (read)",
                         emu::sched::kPointLock, addr_of(l));
  ++h->readers;
  return real_rd(l);
}

int pthread_rwlock_wrlock(pthread_rwlock_t* l) {
  auto real_wr = real(g_wrlock, "pthread_rwlock_wrlock");
  if (!emu::sched::scheduled()) return real_wr(l);
  RwHolders* h = rw_holders_of(l);
  emu::sched::wait_until([h] { return h->writer == emu::sched::kNoActor && h->readers == 0; },
                         "rwlock (write)", emu::sched::kPointLock, addr_of(l));
  h->writer = emu::sched::current_actor();
  return real_wr(l);
}

int pthread_rwlock_tryrdlock(pthread_rwlock_t* l) {
  auto real_try = real(g_tryrdlock, "pthread_rwlock_tryrdlock");
  if (!emu::sched::scheduled()) return real_try(l);
  emu::sched::point(emu::sched::kPointLock, addr_of(l));
  RwHolders* h = rw_holders_of(l);
  if (h->writer != emu::sched::kNoActor) return EBUSY;
  int rc = real_try(l);
  if (rc == 0) ++h->readers;
  return rc;
}

int pthread_rwlock_trywrlock(pthread_rwlock_t* l) {
  auto real_try = real(g_trywrlock, "pthread_rwlock_trywrlock");
  if (!emu::sched::scheduled()) return real_try(l);
  emu::sched::point(emu::sched::kPointLock, addr_of(l));
  RwHolders* h = rw_holders_of(l);
  if (h->writer != emu::sched::kNoActor || h->readers) return EBUSY;
  int rc = real_try(l);
  if (rc == 0) h->writer = emu::sched::current_actor();
  return rc;
}

int pthread_rwlock_unlock(pthread_rwlock_t* l) {
  auto real_unlock_rw = real(g_rwunlock, "pthread_rwlock_unlock");
  if (!emu::sched::scheduled()) return real_unlock_rw(l);
  int rc = real_unlock_rw(l);
  RwHolders* h = rw_holders_of(l);
  if (h->writer == emu::sched::current_actor())
    h->writer = emu::sched::kNoActor;
  else if (h->readers)
    --h->readers;
  emu::sched::drain_stores();
  emu::sched::point(emu::sched::kPointUnlock, addr_of(l));
  return rc;
}

int sched_yield() {
  emu::sched::spin(emu::sched::kPointSpin);
  return static_cast<int>(syscall(SYS_sched_yield));
}

}  // extern "C"
