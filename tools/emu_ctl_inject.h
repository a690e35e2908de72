// SPDX-License-Identifier: BSD-2-Clause
// emu-ctl's inject command (emu_ctl_inject.cpp): its subcommands on the command line, and the
// command itself; attach gives the fabric's segment or nullptr.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "emu/segment.h"

struct InjectArgs {
  std::string rules, type, obj;
  uint32_t port = 0;
};

void add_inject_commands(CLI::App* inject, InjectArgs& a);
int emu_ctl_inject(const CLI::App& inject, const InjectArgs& a, emu::Segment* (*attach)());
