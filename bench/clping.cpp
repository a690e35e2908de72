// SPDX-License-Identifier: BSD-2-Clause
// bench/clping: the vCPU placement of a benchmark round, as the round trip of one cache line
// bounced between two processes on two cores (this VM's host re-places its vCPUs: the same pair
// of cores is 120–160 ns apart for a while, 450–520 ns at other times; perf-anchors.md). The parent
// runs on core A and the child on core B; each waits for the other's value in a shared page and
// answers with the next, for at most 2 s. Prints "clping cores A B: rtt median N ns, p99 N ns (R
// round trips)".
//
// Usage: clping [-a CORE] [-b CORE] [-n ROUND_TRIPS]   (defaults 0, 1, 200000)
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "emu/cli.h"

namespace {

constexpr int kPerSample = 100;        // round trips between two clock reads
constexpr double kBudgetNs = 2e9;      // a busy machine stretches a round trip to milliseconds
constexpr uint64_t kStop = ~0ULL - 1;  // the parent's last store: the child ends

struct alignas(64) Line {
  std::atomic<uint64_t> value;
};

bool pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e9 * static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec);
}

// Waits until the line holds `want` (the other process's store), spinning with pause; false when
// it holds kStop instead.
bool await(Line& l, uint64_t want) {
  for (;;) {
    const uint64_t v = l.value.load(std::memory_order_acquire);
    if (v == want) return true;
    if (v == kStop) return false;
    __builtin_ia32_pause();
  }
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1;
  long trips = 200000;
  CLI::App app(
      "a cache line bounced between two processes on two cores: the round trip's time "
      "says how the vCPUs are placed",
      "clping");
  app.add_option("-a", a, "the first process's core")
      ->check(emu::cli::at_least(0))
      ->capture_default_str();
  app.add_option("-b", b, "the second process's core")
      ->check(emu::cli::at_least(0))
      ->capture_default_str();
  app.add_option("-n", trips, "round trips")->check(emu::cli::at_least(1))->capture_default_str();
  const int usage = emu::cli::parse(app, argc, argv);
  if (usage >= 0) return usage;
  const long samples = std::max(1L, trips / kPerSample);
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 1;
  Line& line = *new (page) Line{};
  line.value.store(~0ULL);  // neither side waits for it: the parent starts the bouncing with 0
  const pid_t child = fork();
  if (child == 0) {  // odd values are the child's answers
    // Ends with the parent (a timeout that kills the parent must not leave the child spinning).
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1 || !pin(b)) _exit(1);
    for (uint64_t v = 0; await(line, v); v += 2) line.value.store(v + 1, std::memory_order_release);
    _exit(0);
  }
  if (child < 0 || !pin(a)) return 1;
  std::vector<double> rtt;
  uint64_t v = 0;
  const double start = now_ns();
  for (long s = 0; s < samples && now_ns() - start < kBudgetNs; ++s) {
    const double t0 = now_ns();
    for (int i = 0; i < kPerSample; ++i, v += 2) {
      line.value.store(v, std::memory_order_release);
      await(line, v + 1);
    }
    rtt.push_back((now_ns() - t0) / kPerSample);
  }
  line.value.store(kStop, std::memory_order_release);
  int status = 0;
  waitpid(child, &status, 0);
  std::sort(rtt.begin(), rtt.end());
  printf("clping cores %d %d: rtt median %.0f ns, p99 %.0f ns (%ld round trips)\n", a, b,
         rtt[rtt.size() / 2], rtt[rtt.size() * 99 / 100],
         static_cast<long>(rtt.size()) * kPerSample);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
