#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# ci/check-layering.sh on copies of the tree: it passes on the tree as it is, and fails, naming
# the file, line and header, on one planted wrong-way include of the provider's rooms, on one
# between emu/'s folders, on a private provider header included from stress/, on an arrow table
# with a cycle, and on a tools' library (CLI11) included in the device model.
# Usage: check_layering.sh SOURCE_DIR
set -euo pipefail
src=$1
script=$src/ci/check-layering.sh
# shellcheck source=tree_copy.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/tree_copy.sh"
copies_of "$src" verbs_provider stress tools pyharness emu  # what the script reads

copy
expect_pass "the unmodified tree" "$script"

# verbs/ builds on nothing: a CM header there goes the wrong way.
f=verbs_provider/verbs/cq.cpp
line=$(($(grep -n '#include "provider.h"' "$tmp/tree/$f" | cut -d: -f1) + 1))
sed -i "${line}i #include \"cm/state.h\"" "$tmp/tree/$f"
expect_fail "wrong-way include" "$script" "$f:$line: #include \"cm/state.h\"" "verbs -> cm"

# emu/shm/ builds on ports/ only: the engine's header there goes the wrong way.
copy
f=emu/shm/reclaim.cpp
line=$(($(grep -n '#include "emu/reclaim.h"' "$tmp/tree/$f" | cut -d: -f1) + 1))
sed -i "${line}i #include \"device/engine.h\"" "$tmp/tree/$f"
expect_fail "wrong-way include inside emu/" "$script" "$f:$line: #include \"device/engine.h\"" \
  "shm -> device"

# Outside the provider only emudv.h of it is public.
copy
f=stress/fabric.cpp
sed -i '1i #include "verbs/provider.h"' "$tmp/tree/$f"
expect_fail "a private provider header in stress/" "$script" "$f:1: #include \"verbs/provider.h\""

# A table with a cycle (verbs -> cm -> verbs) is refused whatever the code includes.
copy
sed -E 's/^  \[verbs\]="([a-z ]*)"/  [verbs]="\1 cm"/' "$script" >"$tmp/check-layering.sh"
grep -qE '\[verbs\]="[a-z ]*cm"' "$tmp/check-layering.sh" ||
  { echo "FAIL: no [verbs] row to edit" && exit 1; }
expect_fail "a cycle in the arrow table" "$tmp/check-layering.sh" "cycle of the provider arrow table"

# The tools' libraries stay out of the preloaded library: CLI11 in an engine file is refused.
copy
f=emu/device/engine.cpp
sed -i '1i #include <CLI/CLI.hpp>' "$tmp/tree/$f"
expect_fail "a tools' library in emu/" "$script" "$f:1: #include <CLI/CLI.hpp>" \
  "preloaded library stays free of it"
