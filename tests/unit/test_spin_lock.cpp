// SPDX-License-Identifier: BSD-2-Clause
// emu::SpinLock (the provider's ModeLock): two threads never hold it at once. They take it in turns
// many times from a common start; each checks, inside, that it is alone, and adds to a counter
// that only the lock protects.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "emu/spin_lock.h"

namespace {

TEST(SpinLock, TwoThreadsNeverHoldItAtOnce) {
  constexpr int kRounds = 200000;
  emu::SpinLock lock;
  std::atomic<int> inside{0}, ready{0};
  int both = 0;          // times a thread found the other inside
  uint64_t counter = 0;  // plain: the lock alone keeps its increments whole
  auto body = [&] {
    ready.fetch_add(1);
    while (ready.load() < 2) emu::cpu_relax();  // start together
    for (int i = 0; i < kRounds; ++i) {
      lock.lock();
      if (inside.fetch_add(1, std::memory_order_relaxed) != 0) ++both;
      ++counter;
      inside.fetch_sub(1, std::memory_order_relaxed);
      lock.unlock();
    }
  };
  std::thread a(body), b(body);
  a.join();
  b.join();
  EXPECT_EQ(both, 0);
  EXPECT_EQ(counter, uint64_t{2} * kRounds);
}

}  // namespace
