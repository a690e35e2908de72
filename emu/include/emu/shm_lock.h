// SPDX-License-Identifier: BSD-2-Clause
// A lock that lives in the shared segment and survives the death of its holder: the owner's process
// slot is stored in the word, and a waiter that finds the owner dead takes the lock over.
// Used only off the fast path (object tables, responder receive queue, atomics).
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "emu/barriers.h"

namespace emu {

// Whether a lock owner lives: a process slot, or kMaxProcs + pid for a process still attaching.
bool proc_slot_alive(uint32_t slot);  // defined in emu/shm/segment.cpp

struct ShmLock {
  std::atomic<uint32_t> word{0};  // 0 = free, else owner proc slot + 1

  bool try_lock(uint32_t self_slot) {
    uint32_t expected = 0;
    return word.compare_exchange_strong(expected, self_slot + 1, std::memory_order_acquire);
  }
  void lock(uint32_t self_slot) {
    for (unsigned spins = 0;; ++spins) {
      if (try_lock(self_slot)) return;
      if (spins < 64) {
        cpu_relax();
        continue;
      }
      // The holder may share our core or be dead: yield, and take over a dead holder's lock.
      uint32_t owner = word.load(std::memory_order_relaxed);
      if (owner != 0 && !proc_slot_alive(owner - 1)) {
        if (word.compare_exchange_strong(owner, self_slot + 1, std::memory_order_acquire)) return;
      }
      sched_yield();
    }
  }
  // A try that also takes over the lock of a dead holder (a NIC reset of that queue's context);
  // *took_over says it was a dead holder's, so what it guarded may be half done.
  bool try_lock_or_recover(uint32_t self_slot, bool* took_over) {
    *took_over = false;
    if (try_lock(self_slot)) return true;
    uint32_t owner = word.load(std::memory_order_relaxed);
    if (owner == 0 || proc_slot_alive(owner - 1)) return false;
    *took_over = word.compare_exchange_strong(owner, self_slot + 1, std::memory_order_acquire);
    return *took_over;
  }
  void unlock() { word.store(0, std::memory_order_release); }
};
static_assert(sizeof(ShmLock) == 4);

class ShmLockGuard {
 public:
  ShmLockGuard(ShmLock& l, uint32_t self) : l_(l) { l_.lock(self); }
  ~ShmLockGuard() { l_.unlock(); }
  ShmLockGuard(const ShmLockGuard&) = delete;
  ShmLockGuard& operator=(const ShmLockGuard&) = delete;

 private:
  ShmLock& l_;
};

// A try-lock held for a scope (taking over a dead holder's lock): owns() says whether it was taken.
class ShmTryLockGuard {
 public:
  ShmTryLockGuard(ShmLock& l, uint32_t self)
      : l_(l), owns_(l.try_lock_or_recover(self, &took_over_)) {}
  ~ShmTryLockGuard() {
    if (owns_) l_.unlock();
  }
  ShmTryLockGuard(const ShmTryLockGuard&) = delete;
  ShmTryLockGuard& operator=(const ShmTryLockGuard&) = delete;
  bool owns() const { return owns_; }
  bool took_over() const { return took_over_; }  // from a dead holder

 private:
  ShmLock& l_;
  bool took_over_ = false;  // (before owns_: the constructor writes it first)
  bool owns_;
};

}  // namespace emu
