#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The whole suite under load: `ctest -j2` several times in a row (5 by default) beside a CPU hog,
# one busy process for the whole time, so that every test shares the 2 cores with a neighbour and
# the hog. Prints each run's count of tests and its time; stops with a failure at the first run
# that has one (its log is build/loaded-<n>.log). Same set-up and build as ci/test.sh.
#   ci/loaded.sh [runs] [ctest options]...
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
bash ci/setup.sh
bash ci/build.sh
(while :; do :; done) &
hog=$!
trap 'kill "$hog" 2>/dev/null || true' EXIT
cd build
for i in $(seq 1 "$runs"); do
  log=loaded-$i.log
  start=$(date +%s)
  if ! ctest -j2 --output-on-failure --no-tests=error --timeout 900 "$@" >"$log" 2>&1; then
    grep -E "tests passed|\(Failed\)|\(Timeout\)|\(SEGFAULT\)|\(Subprocess" "$log" || true
    echo "loaded run $i of $runs failed after $(($(date +%s) - start)) s (build/$log)"
    exit 1
  fi
  echo "loaded run $i of $runs: $(grep -E 'tests passed' "$log"), $(($(date +%s) - start)) s"
done
