// SPDX-License-Identifier: BSD-2-Clause
// EMU_ENGINE=thread: a per-process device thread that runs the engine asynchronously to the
// posting threads, as a NIC runs beside the CPU. Doorbells are queued to it; it sleeps on a futex
// when idle (no spinning: two busy pollers already fill a two-core machine), so a doorbell costs a
// wake-up system call only when the thread sleeps. It also retries stalled send queues (RNR and
// transport timers) of this process's QPs when no one polls.
#pragma once
#include <atomic>
#include <cstdint>

#include "device/engine.h"

namespace emu {

class ProgressThread {
 public:
  static ProgressThread* get(Engine* engine);  // started on first use
  void doorbell(uint64_t ctrl_head);
  // Doorbells queued and not yet taken by the thread.
  bool busy() const {
    return head_.load(std::memory_order_relaxed) != tail_.load(std::memory_order_relaxed);
  }

 private:
  explicit ProgressThread(Engine* engine);
  void run();
  bool pop(uint64_t* v);
  bool retry_stalled();

  static constexpr uint32_t kRing = 4096;
  Engine* engine_;
  std::atomic<uint64_t> head_{0};  // next slot to claim (producers)
  std::atomic<uint64_t> tail_{0};  // next slot to consume (the thread)
  std::atomic<uint64_t> slots_[kRing];
  std::atomic<uint32_t> seq_[kRing];
  std::atomic<uint32_t> wake_{0};  // futex word
  std::atomic<bool> sleeping_{false};
};

}  // namespace emu
