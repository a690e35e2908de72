// SPDX-License-Identifier: BSD-2-Clause
// The cost of one MMIO exit (verbs_provider/mmio/): stores into a trapped register window against
// the same stores into plain memory, per store form. A benchmark, not a test (bench/mmio_exit.sh).
// Usage: mmio-exit [-n STORES]   prints "form ns_per_store" lines.
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "mmio_trap.h"

namespace {

uint64_t g_reports = 0;
void count(void*, uint64_t, const uint8_t*, uint32_t) { ++g_reports; }
volatile sig_atomic_t g_signals = 0;
void on_usr1(int) { g_signals = g_signals + 1; }

double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

void store8(uint8_t* p, uint64_t v) { asm volatile("movq %0, (%1)" ::"r"(v), "r"(p) : "memory"); }
void store16(uint8_t* p, const uint8_t* v) {
  asm volatile("movdqu (%1), %%xmm0\n\tmovdqu %%xmm0, (%0)" ::"r"(p), "r"(v) : "xmm0", "memory");
}

// ns per call of body(i) over n calls.
template <class F>
double per_store(long n, F body) {
  double t0 = now_ns();
  for (long i = 0; i < n; ++i) body(i);
  return (now_ns() - t0) / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  long n = 200000;
  for (int c; (c = getopt(argc, argv, "n:")) != -1;)
    if (c == 'n') n = std::atol(optarg);
  const size_t len = 4096;
  int fd = memfd_create("mmio-exit-bench", 0);
  void *view, *dev;
  if (fd < 0 || ftruncate(fd, len) || emu::mmio::map_trapped_pages(fd, 0, len, &view, &dev) ||
      emu::mmio::trap_window_add(view, len, dev, count, nullptr) < 0) {
    std::perror("mmio-exit: trapped window");
    return 1;
  }
  auto* reg = static_cast<uint8_t*>(view);
  auto* plain = static_cast<uint8_t*>(dev);
  alignas(64) uint8_t src[256];
  std::memset(src, 0x5a, sizeof src);
  // The anchors: what the kernel charges for a system call and for a signal's round trip here
  // (an exit is one signal, a stepped store two, plus the fault).
  signal(SIGUSR1, on_usr1);
  std::printf("anchor_syscall %.1f\n", per_store(n / 4, [](long) { syscall(SYS_getppid); }));
  std::printf("anchor_signal %.1f\n", per_store(n / 4, [](long) { raise(SIGUSR1); }));
  std::printf("plain_store8 %.1f\n",
              per_store(n, [&](long i) { store8(plain + (i & 63) * 8, i); }));
  std::printf("exit_store8 %.1f\n", per_store(n, [&](long i) { store8(reg + (i & 63) * 8, i); }));
  std::printf("plain_store16 %.1f\n",
              per_store(n, [&](long i) { store16(plain + (i & 31) * 16, src); }));
  std::printf("exit_store16 %.1f\n",
              per_store(n, [&](long i) { store16(reg + (i & 31) * 16, src); }));
  // A 64-byte BlueFlame chunk copied with memcpy (glibc's choice of stores, as UCX's copy).
  std::printf("exit_memcpy64 %.1f\n",
              per_store(n / 4, [&](long i) { std::memcpy(reg + (i & 3) * 64, src, 64); }));
  std::printf("exits %llu\n", static_cast<unsigned long long>(g_reports));
  return 0;
}
