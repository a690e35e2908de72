// SPDX-License-Identifier: BSD-2-Clause
// emu-race's scenarios: a known posting bug (or its fix) as a function from the rig to the actors
// of one scheduled run. Adding a scenario is one entry in the table of scenarios.cpp plus its
// actors:
//
//   {"my-bug", "ucx#1234", "https://github.com/...", /*buggy=*/true, "my-bug-fixed",
//    {"race:double_write"}, /*pairs=*/{0}, "what goes wrong", "the fix", make_my_bug},
//
// where make_my_bug(Rig&) returns an emu::sched::Scenario whose actors post through the rig
// (uctlite endpoints or RawQp's steps) and whose final_check calls the rig's oracles. The rig is
// reset before each run (Rig::reset over its pairs), so a factory only builds per-run state.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "emu/sched/sched.h"
#include "rig.h"

namespace race {

struct ScenarioDef {
  std::string name;
  std::string report;  // the report it reproduces ("ucx#2464"), or "fix of <name>"
  std::string link;    // where to read the report
  bool buggy = true;
  std::string counterpart;              // the correct variant's name (or the buggy one's)
  std::vector<std::string> signatures;  // a buggy run's expected failure signatures
  std::vector<uint32_t> pairs{0};       // the rig pairs it uses (reset before each run)
  std::string what;                     // the bug (or the fix), one sentence
  std::function<emu::sched::Scenario(Rig&)> make;
};

const std::vector<ScenarioDef>& scenarios();
const ScenarioDef* find_scenario(const std::string& name);

// The factory a campaign runs: resets the rig, then makes the scenario's actors (the device actor
// last). A reset that fails ends the run as the failure "rig".
emu::sched::ScenarioFactory factory_of(const ScenarioDef& def, Rig& rig);

}  // namespace race
