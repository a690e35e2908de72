// SPDX-License-Identifier: BSD-2-Clause
// emu-run CMD ARGS...: runs CMD with the emulated devices visible (preloads libemu_verbs.so, found
// beside this executable or in ../lib; under EMU_SCHEDULE libemu_sched.so too, and the program's
// address space laid out without randomisation).
#include <sys/personality.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "emu/cli.h"

namespace {

std::string find_lib(const std::string& dir, const std::string& name) {
  for (const char* rel : {"/", "/../lib/", "/verbs_provider/"}) {
    std::string cand = dir + rel + name;
    if (access(cand.c_str(), R_OK) == 0) return cand;
  }
  return "";
}

// The index in argv of COMMAND (after emu-run's own options and an optional --), or the status
// to exit with.
int parse_command_line(int argc, char** argv, int* command) {
  CLI::App app("runs COMMAND with the emulated devices visible", "emu-run");
  app.prefix_command();
  app.footer(
      "Usage: emu-run [--] COMMAND [ARGS...]\nThe devices' knobs are EMU_* variables "
      "(emu-ctl knobs).");
  const int status = emu::cli::parse(app, argc, argv);
  if (status >= 0) return status;
  const size_t rest = app.remaining_size();
  *command = argc - static_cast<int>(rest);
  if (*command < argc && std::strcmp(argv[*command], "--") == 0) ++*command;
  if (*command < argc) return -1;
  std::fprintf(stderr, "emu-run: COMMAND is required\nRun with --help for more information.\n");
  return emu::cli::kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  int command = 1;
  const int status = parse_command_line(argc, argv, &command);
  if (status >= 0) return status;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::perror("emu-run: /proc/self/exe");
    return 2;
  }
  self[n] = 0;
  std::string dir(self);
  dir.resize(dir.rfind('/'));
  std::string lib = find_lib(dir, "libemu_verbs.so");
  if (lib.empty()) {
    std::fprintf(stderr, "emu-run: libemu_verbs.so not found next to %s\n", self);
    return 2;
  }
  // EMU_SCHEDULE: the program runs as one scheduled run, which libemu_sched.so drives.
  if (const char* s = std::getenv("EMU_SCHEDULE"); s && *s) {
    std::string sched = find_lib(dir, "libemu_sched.so");
    if (sched.empty()) {
      std::fprintf(stderr, "emu-run: EMU_SCHEDULE: libemu_sched.so not found next to %s\n", self);
      return 2;
    }
    lib += ":" + sched;
    // A replay must take the program down the same paths, and programs decide by addresses (UCX
    // keys hash tables and its registration cache by them): the same layout in every run, as a
    // debugger gives. The flag is the process's and survives the exec below.
    int persona = personality(0xffffffff);
    if (persona != -1 && !(persona & ADDR_NO_RANDOMIZE)) personality(persona | ADDR_NO_RANDOMIZE);
  }
  // Anything already preloaded stays first (a sanitizer runtime must come before every library).
  std::string preload = lib;
  const char* old = std::getenv("LD_PRELOAD");
  if (old && *old) preload = std::string(old) + ":" + lib;
#ifdef EMU_SANITIZER_RUNTIME
  // A sanitizer build (ci/sanitize.sh): the instrumented provider needs its sanitizer's runtime
  // loaded before every other library, and the programs it goes into are not instrumented; every
  // process started below inherits the order (a popen's /bin/sh too, which crashed without it).
  if (!old || !std::strstr(old, EMU_SANITIZER_RUNTIME))
    preload = std::string(EMU_SANITIZER_RUNTIME) + ":" + preload;
#endif
  setenv("LD_PRELOAD", preload.c_str(), 1);
  execvp(argv[command], argv + command);
  std::fprintf(stderr, "emu-run: %s: %s\n", argv[command], std::strerror(errno));
  return 127;
}
