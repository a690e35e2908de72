// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: EMU_SCHEDULE starts a program-wide run (emu/sched/program.h) before main and
// ends it when main returns or an actor calls exit(); then it writes what happened to stderr and,
// as JSON, to the file EMU_SCHEDULE_OUT names: strategy, seed, steps, decisions, the schedule, the
// trace hash, the device's race events in the run, and the command that replays it.
#include "emu/sched/program.h"

#include <execinfo.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu/config.h"
#include "emudv.h"
#include "libc.h"

namespace {

namespace sched = emu::sched;
namespace program = emu::sched::program;

constexpr int kExitStuck = 3;        // the run deadlocked or livelocked: the program cannot go on
constexpr size_t kListedSteps = 40;  // the report's listing of the run's end

using MainFn = int (*)(int, char**, char**);
MainFn g_main = nullptr;
program::Spec g_spec;
std::vector<std::string> g_argv;
uint64_t g_races_from = 0;  // the race log's count when the run started
bool g_reported = false;

std::vector<program::RaceNote> races_in_run() {
  std::vector<program::RaceNote> out;
  emudv_race buf[64];
  for (uint64_t from = g_races_from;;) {
    int n = emudv_read_races(from, buf, 64);
    for (int i = 0; i < n; ++i) {
      from = buf[i].seq;
      if (buf[i].pid == getpid()) out.push_back({buf[i].kind_name, buf[i].qpn, buf[i].slot});
    }
    if (n < 64) break;
  }
  return out;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string replay_command(const sched::RunResult& r) {
  std::string cmd = "EMU_SCHEDULE=replay:" + sched::format_schedule(r.schedule) + " emu-run";
  for (const std::string& a : g_argv) cmd += " " + a;
  return cmd;
}

void report(const sched::RunResult& r, const std::vector<program::RaceNote>& races) {
  std::vector<std::string> race_names;
  for (const program::RaceNote& e : races) race_names.push_back(e.kind);
  std::string out = emu_sched::last_steps(r, kListedSteps);
  if (const char* trace = std::getenv("EMU_SCHEDULE_TRACE"); trace && *trace) {
    if (!emu_sched::write_program_trace(trace, r, race_names))
      out += "emu-sched: cannot write EMU_SCHEDULE_TRACE " + std::string(trace) + "\n";
  }
  out += "emu-sched: " + program::format_spec(g_spec) + ": " + r.describe();
  out += "emu-sched: " + std::to_string(r.steps) + " steps, " +
         std::to_string(r.schedule.choices.size()) + " decisions, " +
         std::to_string(sched::count_preemptions(r.choices)) + " preemptions, trace hash " +
         hex(r.trace_hash) + ", " + std::to_string(races.size()) + " race events";
  for (const program::RaceNote& e : races) out += " " + e.kind;
  out += "\nemu-sched: replay: " + replay_command(r) + "\n";
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
  const char* path = std::getenv("EMU_SCHEDULE_OUT");
  if (!path || !*path) return;
  if (FILE* f = std::fopen(path, "w")) {
    std::fputs(program::outcome_json(g_spec, r, races, replay_command(r)).c_str(), f);
    std::fclose(f);
  } else {
    std::fprintf(stderr, "emu-sched: cannot write EMU_SCHEDULE_OUT %s\n", path);
  }
}

void stuck(const program::Spec&, const sched::RunResult& r) {
  g_reported = true;
  report(r, races_in_run());
  std::fflush(stderr);
  _exit(kExitStuck);  // the actors are parked for good: no destructor can run
}

// The program ends with this status: the run is over, failed ("exit N") unless it is 0.
void finish_with_status(int status) {
  std::string failure = "exit " + std::to_string(status);
  emu_sched::finish_program_run(status ? failure.c_str() : nullptr);
}

int scheduled_main(int argc, char** argv, char** envp) {
  std::string err;
  // A malformed schedule stops the program before its main, with the knob check's message.
  if (!program::parse_spec(std::getenv("EMU_SCHEDULE"), &g_spec, &err)) {
    std::fprintf(stderr, "%s\n",
                 emu::knob_error("EMU_SCHEDULE", std::getenv("EMU_SCHEDULE")).c_str());
    return 2;
  }
  g_argv.assign(argv, argv + argc);
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now: the register stores' points unwind in a handler

  g_races_from = emudv_races_recorded();
  program::start(g_spec, stuck);
  // After the start: the counter reads the run's clock from here on (threads made later inherit
  // it).
  if (!program::trap_time_stamp_counter())
    std::fprintf(stderr, "emu-sched: the time-stamp counter cannot be trapped (PR_SET_TSC)\n");
  int rc = g_main(argc, argv, envp);
  finish_with_status(rc);
  return rc;
}

}  // namespace

void emu_sched::finish_program_run(const char* failure) {
  if (g_reported || !program::active() || !sched::scheduled()) return;
  g_reported = true;
  sched::RunResult r = program::stop();
  // The oracles in emu-race's order: the device's race events first (what the program did after
  // one, an assertion of its own or its exit, is a consequence), then how the program ended.
  std::vector<program::RaceNote> races = races_in_run();
  if (!races.empty() && r.outcome != sched::Outcome::kDeadlock) {
    r.outcome = sched::Outcome::kFailed;
    r.signature = "race " + races.front().kind;
  } else if (failure && r.outcome == sched::Outcome::kOk) {
    r.outcome = sched::Outcome::kFailed;
    r.signature = failure;
  }
  report(r, races);
}

extern "C" {

// The program's entry: with EMU_SCHEDULE set, main runs inside the run as actor 0.
int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(), void (*fini)(),
                      void (*rtld_fini)(), void* stack_end) {
  using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
  static std::atomic<StartFn> real{nullptr};
  const char* spec = std::getenv("EMU_SCHEDULE");
  if (spec && *spec) {
    g_main = main;
    main = scheduled_main;
  }
  return emu_sched::libc_next(real, "__libc_start_main")(main, argc, argv, init, fini, rtld_fini,
                                                         stack_end);
}

// exit() from an actor ends the run first (the report is then complete); a status other than 0
// fails it with the signature "exit <status>".
[[noreturn]] void exit(int status) {
  using ExitFn = void (*)(int);
  static std::atomic<ExitFn> real{nullptr};
  finish_with_status(status);
  emu_sched::libc_next(real, "exit")(status);
  __builtin_unreachable();
}

// _exit() too (a program that stops at once when it has seen a failure: nothing of its state is
// to be trusted, so no exit handler runs).
[[noreturn]] void _exit(int status) {
  using ExitFn = void (*)(int);
  static std::atomic<ExitFn> real{nullptr};
  finish_with_status(status);
  emu_sched::libc_next(real, "_exit")(status);
  __builtin_unreachable();
}

// abort() from an actor (a failed assertion: UCX's, the C library's) ends the run as failed with
// the signature "abort", reported before the process goes.
[[noreturn]] void abort() {
  using AbortFn = void (*)();
  static std::atomic<AbortFn> real{nullptr};
  emu_sched::finish_program_run("abort");
  emu_sched::libc_next(real, "abort")();
  __builtin_unreachable();
}

}  // extern "C"
