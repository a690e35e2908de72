// SPDX-License-Identifier: BSD-2-Clause
#include "device/progress.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#include <mutex>
#include <thread>

#include "emu/barriers.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

void futex_wait(std::atomic<uint32_t>* w, uint32_t v, const timespec* t) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT_PRIVATE, v, t, nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>* w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

// The process's device thread. A child of fork() has no copy of the thread, only of its queue:
// it starts a thread of its own on its first doorbell (the parent's queued doorbells are the
// parent's thread's to run).
std::atomic<ProgressThread*> g_progress{nullptr};
const int g_progress_fork_hook =
    pthread_atfork(nullptr, nullptr, [] { g_progress.store(nullptr); });

}  // namespace

ProgressThread* ProgressThread::get(Engine* engine) {
  if (ProgressThread* p = g_progress.load(std::memory_order_acquire)) return p;
  auto* fresh = new ProgressThread(engine);  // lives as long as the process
  ProgressThread* none = nullptr;
  if (!g_progress.compare_exchange_strong(none, fresh, std::memory_order_acq_rel)) {
    delete fresh;  // another thread's won (its thread is not started yet: nothing to stop)
    return none;
  }
  std::thread([fresh] { fresh->run(); }).detach();
  return fresh;
}

ProgressThread::ProgressThread(Engine* engine) : engine_(engine) {
  for (uint32_t i = 0; i < kRing; ++i) seq_[i].store(i, std::memory_order_relaxed);
}

// A bounded multi-producer queue (sequence numbers per slot); a full queue makes the producer run
// the engine itself, which is always correct.
void ProgressThread::doorbell(uint64_t ctrl_head) {
  uint64_t pos = head_.load(std::memory_order_relaxed);
  for (;;) {
    uint32_t s = seq_[pos % kRing].load(std::memory_order_acquire);
    int64_t diff = static_cast<int64_t>(s) - static_cast<int64_t>(static_cast<uint32_t>(pos));
    if (diff == 0) {
      if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
    } else if (diff < 0) {
      engine_->on_doorbell(ctrl_head);
      return;
    } else {
      pos = head_.load(std::memory_order_relaxed);
    }
  }
  slots_[pos % kRing].store(ctrl_head, std::memory_order_relaxed);
  seq_[pos % kRing].store(static_cast<uint32_t>(pos + 1), std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) futex_wake(&wake_);
}

bool ProgressThread::pop(uint64_t* v) {
  uint64_t pos = tail_.load(std::memory_order_relaxed);
  uint32_t s = seq_[pos % kRing].load(std::memory_order_acquire);
  if (s != static_cast<uint32_t>(pos + 1)) return false;
  *v = slots_[pos % kRing].load(std::memory_order_relaxed);
  seq_[pos % kRing].store(static_cast<uint32_t>(pos + kRing), std::memory_order_release);
  tail_.store(pos + 1, std::memory_order_relaxed);
  return true;
}

bool ProgressThread::retry_stalled() {
  Segment* seg = Segment::get();
  if (seg->hdr()->procs[seg->self()].stalled_qps.load(std::memory_order_relaxed) == 0) return false;
  EngineSection in_engine(seg);  // slots looked at here stay what they are until we are done
  bool any = false;
  each_qp(seg->hdr(), [&](QpSlot& q) {
    if (q.state.load(std::memory_order_relaxed) != kSlotLive || q.owner != seg->self()) return;
    if (q.stall.load(std::memory_order_relaxed) == kStallNone) return;
    engine_->kick_sq(q);
    any = any || q.stall.load(std::memory_order_relaxed) != kStallNone;
  });
  return any;
}

void ProgressThread::run() {
  constexpr uint32_t kIdleSpins = 20;  // tens of microseconds of yields
  uint32_t idle_spins = 0;
  for (;;) {
    uint32_t seen = wake_.load(std::memory_order_acquire);
    uint64_t v;
    bool did = false;
    while (pop(&v)) {
      engine_->on_doorbell(v);
      did = true;
    }
    bool stalled = retry_stalled();
    if (did) {
      idle_spins = 0;
      continue;
    }
    // A short look before sleeping keeps a busy poster from paying a wake-up per doorbell; it is
    // bounded, so an idle device costs nothing. It yields rather than spins: a poster that shares
    // this core gets it at once, and on a core of its own a yield returns at once.
    if (idle_spins++ < kIdleSpins) {
      sched_yield();
      continue;
    }
    idle_spins = 0;
    sleeping_.store(true, std::memory_order_seq_cst);
    if (wake_.load(std::memory_order_seq_cst) == seen) {
      timespec tick{0, 200000};  // stalled work is retried every 200 us; idle sleeps until woken
      futex_wait(&wake_, seen, stalled ? &tick : nullptr);
    }
    sleeping_.store(false, std::memory_order_relaxed);
  }
}

}  // namespace emu
