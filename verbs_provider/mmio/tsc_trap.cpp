// SPDX-License-Identifier: BSD-2-Clause
// Under EMU_SCHEDULE the time-stamp counter reads the run's logical clock. UCX times its
// progress engine's slow paths with RDTSC (ucs_get_time is the instruction, inlined): read from
// the CPU, the same schedule took different paths from one run to the next. With PR_SET_TSC set
// to PR_TSC_SIGSEGV, RDTSC and RDTSCP fault; the handler here completes them with the clock the
// program's clock_gettime reads inside the run (emu/sched/sched.h's logical time, from 1 s), and
// with CLOCK_MONOTONIC in nanoseconds for a thread that is not an actor (or once the run is over),
// so the counter never goes backwards for any thread. Never armed outside a scheduled program.
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>

#include "emu/sched/program.h"
#include "fault_signals.h"

namespace {

constexpr uint64_t kRunClockBase = 1'000'000'000;  // as the program's clock_gettime reads it

uint64_t counter_now() {
  if (emu::sched::scheduled() && emu::sched::program::active())
    return kRunClockBase + emu::sched::logical_time_ns();
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

// RDTSC is 0F 31, RDTSCP 0F 01 F9 (which also loads IA32_TSC_AUX into ECX: CPU 0 here).
bool claim_counter_read(int sig, siginfo_t* si, void* ctx) {
  if (sig != SIGSEGV || si->si_code != SI_KERNEL) return false;
  greg_t* g = static_cast<ucontext_t*>(ctx)->uc_mcontext.gregs;
  const auto* insn = reinterpret_cast<const uint8_t*>(g[REG_RIP]);
  uint32_t length = 0;
  if (insn[0] == 0x0f && insn[1] == 0x31) length = 2;
  if (insn[0] == 0x0f && insn[1] == 0x01 && insn[2] == 0xf9) length = 3;
  if (!length) return false;
  const uint64_t now = counter_now();
  g[REG_RAX] = greg_t(now & 0xffffffffu);
  g[REG_RDX] = greg_t(now >> 32);
  if (length == 3) g[REG_RCX] = 0;
  g[REG_RIP] += length;
  return true;
}

}  // namespace

bool emu::sched::program::trap_time_stamp_counter() {
  emu::mmio::fault_claimant_add(SIGSEGV, claim_counter_read);
  return prctl(PR_SET_TSC, PR_TSC_SIGSEGV, 0, 0, 0) == 0;
}
