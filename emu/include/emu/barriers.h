// SPDX-License-Identifier: BSD-2-Clause
// Every ordering point between the driver (post path) and the device engine, named for its use.
// Mirrors the vocabulary of rdma-core's udma_barrier.h so a reader of mlx5 code recognises each
// one; a later deterministic scheduler hooks exactly these helpers (roadmap 1).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace emu {

// WQE stores must be visible to the device before the doorbell record that publishes them.
inline void to_device_barrier() { std::atomic_thread_fence(std::memory_order_release); }

// Device-written memory (CQE body) may be read only after the owner bit that published it.
inline void from_device_barrier() { std::atomic_thread_fence(std::memory_order_acquire); }

// Opens a write-combining burst (BlueFlame copy). On x86 WC stores need no fence before them.
inline void mmio_wc_start() { std::atomic_thread_fence(std::memory_order_release); }

// Drains write-combining buffers: after this the device sees every BlueFlame chunk written so far.
// The device takes them in this same thread (emu/mmio.h), so program order delivers them; other
// threads meet them through the chunk tags' release stores. No full fence (one per post).
inline void mmio_flush_writes() { std::atomic_thread_fence(std::memory_order_release); }

// The 8-byte doorbell: one store the device observes whole.
inline void mmio_write64(volatile uint64_t* reg, uint64_t value) {
  reinterpret_cast<std::atomic<uint64_t>*>(const_cast<uint64_t*>(reg))
      ->store(value, std::memory_order_release);
}

// Register memory (BlueFlame buffers, the device's copy of a WQE) is written and read as 8-byte
// words with relaxed atomics: plain moves on x86, and what device memory is — concurrent writers
// interleave word by word instead of being undefined behaviour, so a torn WQE is data the device
// reports, and ThreadSanitizer stays quiet about the emulator itself.
inline void mmio_words_store(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < bytes / 8; ++i) {
    uint64_t w;
    std::memcpy(&w, static_cast<const uint8_t*>(src) + i * 8, 8);
    std::atomic_ref<uint64_t>(d[i]).store(w, std::memory_order_relaxed);
  }
}
inline void mmio_words_load(void* dst, const void* src, size_t bytes) {
  auto* s = static_cast<uint64_t*>(const_cast<void*>(src));
  for (size_t i = 0; i < bytes / 8; ++i) {
    uint64_t w = std::atomic_ref<uint64_t>(s[i]).load(std::memory_order_relaxed);
    std::memcpy(static_cast<uint8_t*>(dst) + i * 8, &w, 8);
  }
}

// One 64-byte BlueFlame chunk. Real WC memory may tear a chunk into smaller bursts; the device
// model treats a chunk as the unit it receives.
inline void mmio_copy_chunk64(void* dst, const void* src) { mmio_words_store(dst, src, 64); }

// Device side: read a doorbell record written by the driver.
inline uint32_t device_load32(const uint32_t* p) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(p)->load(std::memory_order_acquire);
}

// Driver side: store a doorbell record the device reads.
inline void dbrec_store32(uint32_t* p, uint32_t v) {
  reinterpret_cast<std::atomic<uint32_t>*>(p)->store(v, std::memory_order_release);
}

// Device publishes a CQE by its last byte (owner bit); the driver reads that byte first.
inline void cqe_publish(uint8_t* op_own, uint8_t v) {
  reinterpret_cast<std::atomic<uint8_t>*>(op_own)->store(v, std::memory_order_release);
}
inline uint8_t cqe_owner_load(const uint8_t* op_own) {
  return reinterpret_cast<const std::atomic<uint8_t>*>(op_own)->load(std::memory_order_acquire);
}

inline void cpu_relax() { __builtin_ia32_pause(); }

// Takes a line this thread will soon store into, ahead of time: the ownership transfer from a
// core that read it then happens off the path that waits for it. prefetchw is a NOP on x86 CPUs
// without it, and the compiler's own builtin emits a read prefetch for the baseline target.
inline void prefetch_for_store(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

// Thread-local state on the post path: initial-exec, so an access is one %fs-relative load and
// not a __tls_get_addr call (the provider is a shared library, loaded at start by LD_PRELOAD).
// Only for small variables: a library dlopen()ed later has little static TLS to take them from.
#define EMU_FAST_TLS __attribute__((tls_model("initial-exec"))) thread_local

}  // namespace emu
