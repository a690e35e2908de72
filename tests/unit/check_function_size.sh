#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# ci/function-size.sh on copies of the tree: it passes on the tree as it is; a function of 81
# lines planted in emu/ fails it, named with its file and line; the same function marked as a
# dispatch table passes.
# Usage: check_function_size.sh SOURCE_DIR
set -euo pipefail
src=$1
script=$src/ci/function-size.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

copy() {
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  cp -r "$src/emu" "$src/verbs_provider" "$tmp/tree/"
}
# plant MARKER: a function of 81 lines (its braces included) at the end of a copied file.
plant() {
  local f=$tmp/tree/emu/device/engine_batch.cpp
  {
    echo "$1"
    echo "int planted_long_function(int v) {"
    for i in $(seq 1 79); do echo "  v += $i;"; done
    echo "}"
  } >>"$f"
}

copy
out=$(bash "$script" "$tmp/tree" 2>&1) || { echo "FAIL the unmodified tree:" && echo "$out" && exit 1; }
echo "ok   the unmodified tree passes"

plant "// a helper"
if out=$(bash "$script" "$tmp/tree" 2>&1); then
  echo "FAIL a function of 81 lines passed:" && echo "$out" && exit 1
fi
grep -q "emu/device/engine_batch.cpp:[0-9]* planted_long_function has 81 lines" <<<"$out" ||
  { echo "FAIL the output does not name the function:" && echo "$out" && exit 1; }
echo "ok   a function of 81 lines fails, named"

copy
plant "// The planted commands: a dispatch table."
out=$(bash "$script" "$tmp/tree" 2>&1) ||
  { echo "FAIL a marked dispatch table failed:" && echo "$out" && exit 1; }
echo "ok   a dispatch table passes"
