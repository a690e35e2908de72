#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# ci/check-layering.sh on copies of the tree: it passes on the tree as it is, and fails, naming
# the file, line and header, on one planted wrong-way include of the provider's rooms, on one
# between emu/'s folders, on a private provider header included from stress/, and on an arrow
# table with a cycle.
# Usage: check_layering.sh SOURCE_DIR
set -euo pipefail
src=$1
script=$src/ci/check-layering.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A fresh copy of what the script reads (not a git work tree: it checks every file there).
copy() {
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  cp -r "$src/verbs_provider" "$src/stress" "$src/tools" "$src/pyharness" "$src/emu" "$tmp/tree/"
}
# expect_fail NAME SCRIPT PATTERN...: SCRIPT fails on the copy and says each PATTERN.
expect_fail() {
  local name=$1 run=$2 out
  shift 2
  if out=$(bash "$run" "$tmp/tree" 2>&1); then
    echo "FAIL $name: check-layering.sh passed:" && echo "$out" && exit 1
  fi
  for pat in "$@"; do
    grep -qF -- "$pat" <<<"$out" ||
      { echo "FAIL $name: the output does not say '$pat':" && echo "$out" && exit 1; }
  done
  echo "ok   $name"
}

copy
out=$(bash "$script" "$tmp/tree" 2>&1) || { echo "FAIL the unmodified tree:" && echo "$out" && exit 1; }
echo "ok   the unmodified tree passes"

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
