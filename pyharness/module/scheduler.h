// SPDX-License-Identifier: BSD-2-Clause
// The scheduler from Python: the rig (opened once per process on emu0), the built-in scenarios and
// step scenarios, campaigns (random, pct, dfs, delays) with shrinking, replays, Perfetto traces.
#pragma once
#include <pybind11/pybind11.h>

namespace pyh {

void register_scheduler(pybind11::module_& m);

}  // namespace pyh
