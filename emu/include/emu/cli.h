// SPDX-License-Identifier: BSD-2-Clause
// The tools' one command-line convention, on CLI11 (Debian's libcli11-dev): `--help` prints the
// usage and exits 0; a bad option, a bad value or a missing argument prints
// "PROGRAM: <what CLI11 says, naming the option>" and "Run with --help for more information." on
// stderr and exits 2 (kExitUsage, as the tools did before). For the tools only (emu_tools): the
// preloaded library never includes it (ci/check-layering.sh).
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace emu::cli {

constexpr int kExitUsage = 2;

// The failure message every tool prints: its name first, so that a line in a test log says whose
// command line it was.
inline void use_convention(CLI::App& app) {
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    const CLI::App* top = a;
    while (top->get_parent()) top = top->get_parent();
    return top->get_name() + ": " + e.what() + "\nRun with --help for more information.\n";
  });
}

// A whole number (decimal, or hexadecimal after 0x) in [lo, hi], as a check of an option's text
// (CLI11's own range checks name a double's range, and say twice what is wrong).
inline CLI::Validator in_range(uint64_t lo, uint64_t hi) {
  const std::string range =
      hi == UINT64_MAX ? ">=" + std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](const std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
        if (text.empty() || text[0] == '-' || *end || errno) return text + " is not a whole number";
        if (v < lo || v > hi) return text + " is not in " + range;
        return "";
      },
      range);
}

inline CLI::Validator at_least(uint64_t lo) { return in_range(lo, UINT64_MAX); }

// Parses argv into `app` (use_convention applied). Returns -1 when the program goes on, or the
// status it exits with: 0 after --help, kExitUsage after an error.
inline int parse(CLI::App& app, int argc, char** argv) {
  use_convention(app);
  try {
    // CLI11 would say only that a command is required.
    const auto commands = app.get_subcommands([](const CLI::App*) { return true; });
    if (!commands.empty() && argc > 1 && argv[1][0] != '-') {
      bool known = false;
      std::string names;
      for (const CLI::App* c : commands) {
        known |= c->check_name(argv[1]);
        names += (names.empty() ? "" : ", ") + c->get_name();
      }
      if (!known)
        throw CLI::ExtrasError(std::string(argv[1]) + " is not a command (" + names + ")",
                               CLI::ExitCodes::ExtrasError);
    }
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
}

}  // namespace emu::cli
