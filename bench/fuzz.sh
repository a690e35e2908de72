#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark-length fuzz campaign (not a test): the fuzz targets of tests/fuzz/ over seeds 1..N,
# ITERS steps each (ctest's label fuzz runs seed 1 with the defaults), each binary on fabrics of
# its own (test_main appends the pid), removed afterwards. Stops at the first failing seed and
# prints it: FUZZ_SEED=S FUZZ_ITERS=I reproduces the run.
# Usage: bench/fuzz.sh [seeds=20] [iters=50000]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-20} iters=${2:-50000}
export FUZZ_ITERS=$iters
for ((s = 1; s <= seeds; s++)); do
  export FUZZ_SEED=$s
  for run in "build/tests/fuzz/emu_fuzz_direct" \
             "build/bin/emu-run build/tests/fuzz/emu_fuzz_verbs"; do
    # shellcheck disable=SC2086  # $run: a command and its arguments
    if ! timeout 3600 $run --gtest_brief=1 >"/tmp/fuzz-$$.log" 2>&1; then
      cat "/tmp/fuzz-$$.log"
      echo "FAILED: FUZZ_SEED=$s FUZZ_ITERS=$iters $run"
      rm -f "/tmp/fuzz-$$.log"
      exit 1
    fi
    grep -h 'steps:\|made,\|modifies\|lists posted' "/tmp/fuzz-$$.log" | sed "s/^/seed $s: /"
  done
done
rm -f "/tmp/fuzz-$$.log"
echo "$seeds seeds x $iters steps: 0 failures"
