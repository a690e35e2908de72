#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# ci/function-size.sh on copies of the tree: it passes on the tree as it is; a function of 81
# lines planted in emu/ fails it, named with its file and line; the same function marked as a
# dispatch table passes.
# Usage: check_function_size.sh SOURCE_DIR
set -euo pipefail
src=$1
script=$src/ci/function-size.sh
# shellcheck source=tree_copy.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/tree_copy.sh"
copies_of "$src" emu verbs_provider

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
expect_pass "the unmodified tree" "$script"

plant "// a helper"
if run_on_copy "$script"; then fail "a function of 81 lines passed"; fi
# (a pattern, not a text: the line the function lands on is the copy's)
grep -q "emu/device/engine_batch.cpp:[0-9]* planted_long_function has 81 lines" <<<"$out" ||
  fail "the output does not name the function"
echo "ok   a function of 81 lines fails, named"

copy
plant "// The planted commands: a dispatch table."
expect_pass "a marked dispatch table" "$script"
