// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: EMU_SCHEDULE starts a program-wide run (emu/sched_program.h) before main and
// ends it when main returns or an actor calls exit(); then it writes what happened to stderr and,
// as JSON, to the file EMU_SCHEDULE_OUT names: strategy, seed, steps, decisions, the schedule, the
// trace hash, the device's race events in the run, and the command that replays it.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "emu/config.h"
#include "emu/sched_program.h"
#include "emudv.h"
#include "libc.h"

namespace {

namespace sched = emu::sched;
namespace program = emu::sched::program;

constexpr int kExitStuck = 3;  // the run deadlocked or livelocked: the program cannot go on

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

void report(const sched::RunResult& r) {
  std::vector<program::RaceNote> races = races_in_run();
  std::string out = "emu-sched: " + program::format_spec(g_spec) + ": " + r.describe();
  out += "emu-sched: " + std::to_string(r.steps) + " steps, " +
         std::to_string(r.schedule.choices.size()) + " decisions, " +
         std::to_string(sched::count_preemptions(r.choices)) + " preemptions, trace hash " +
         hex(r.trace_hash) + ", " + std::to_string(races.size()) + " race events";
  for (const program::RaceNote& e : races) out += " " + e.kind;
  out += "\nemu-sched: replay: " + replay_command(r) + "\n";
  std::fputs(out.c_str(), stderr);
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
  report(r);
  std::fflush(stderr);
  _exit(kExitStuck);  // the actors are parked for good: no destructor can run
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
  g_races_from = emudv_races_recorded();
  program::start(g_spec, stuck);
  int rc = g_main(argc, argv, envp);
  emu_sched::finish_program_run();
  return rc;
}

}  // namespace

void emu_sched::finish_program_run() {
  if (g_reported || !program::active() || !sched::scheduled()) return;
  g_reported = true;
  report(program::stop());
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

// exit() from an actor ends the run first (the report is then complete).
[[noreturn]] void exit(int status) {
  using ExitFn = void (*)(int);
  static std::atomic<ExitFn> real{nullptr};
  emu_sched::finish_program_run();
  emu_sched::libc_next(real, "exit")(status);
  __builtin_unreachable();
}

}  // extern "C"
