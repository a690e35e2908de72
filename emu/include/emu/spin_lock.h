// SPDX-License-Identifier: BSD-2-Clause
// A spin lock for one process's threads (the provider's ModeLock: mlx5's spinlock around a queue,
// a CQ or a shared register). Inline, a load and an exchange to take, a store to drop:
// pthread_spin_lock and unlock were two calls per lock on the post and poll paths, which take four
// or five locks per message. As pthread's, it spins and never sleeps.
#pragma once
#include <atomic>
#include <cstdint>

#include "emu/barriers.h"

namespace emu {

class SpinLock {
 public:
  void lock() {
    while (held_.exchange(1, std::memory_order_acquire) != 0)
      while (held_.load(std::memory_order_relaxed) != 0) cpu_relax();  // read until it is dropped
  }
  void unlock() { held_.store(0, std::memory_order_release); }

 private:
  std::atomic<uint32_t> held_{0};
};

}  // namespace emu
