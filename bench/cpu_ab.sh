#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): the CPU cost of the post / engine / poll path, two builds of emu0 A/B in
# one process each (no second core, so the VM's cross-core placement does not enter): each round
# runs A then B pinned to core 1 and takes the CPU time each used (perf stat task-clock: time
# another process held the core is not counted), the median of the per-round ratios B / A.
# Usage: bench/cpu_ab.sh BIN_A BIN_B [rounds=7] [tests="send_stream empty_poll"]
#   BIN_A, BIN_B: directories holding emu-run and libemu_verbs.so (a copy of build/bin made before
#   a change, and build/bin). The tools (bench/cpu/*.c) are compiled into a temporary directory.
# Below 1: B spends less CPU. send_stream also prints its ns per message, empty_poll ns per poll.
# CFLAGS is passed to the tools' compile (CFLAGS=-DB=1: send_stream one lone SEND per round), ARGS
# to each run (ARGS=1000000: send_stream's rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1") B=$(realpath "$2")
rounds=${3:-7}
tests=${4:-send_stream empty_poll}
export EMU_FABRIC=${EMU_FABRIC:-cpuab$$}
source bench/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086  # CFLAGS: words
for t in $tests; do cc -O2 ${CFLAGS:-} -o "$tmp/$t" "bench/cpu/$t.c" -libverbs; done

# cpu BIN TEST: the task-clock (ms) of one run; the tool's own figure goes to stderr
cpu() {
  # shellcheck disable=SC2086  # ARGS: words
  taskset -c 1 perf stat -x, -e task-clock -o "$tmp/stat" timeout 120 "$1/emu-run" "$tmp/$2" ${ARGS:-} >&2
  awk -F, '/task-clock/ {print $1}' "$tmp/stat"
}
echo "| tool | B / A CPU time per round | median |"
echo "|---|---|---|"
for t in $tests; do
  rs=""
  for _ in $(seq "$rounds"); do
    a=$(cpu "$A" "$t") b=$(cpu "$B" "$t")
    rs+="$(ratio "$b" "$a") "
  done
  echo "| $t | $rs| $(tr ' ' '\n' <<<"$rs" | grep . | median) |"
done
