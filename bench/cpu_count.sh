#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): instructions per message of bench/cpu/send_stream under valgrind's
# callgrind, a deterministic count the VM's load and placement do not move. The tool runs twice
# (ROUNDS and 2 x ROUNDS rounds) and the difference is divided by the extra messages, so set-up
# and teardown cancel out.
# Usage: bench/cpu_count.sh BIN [B=1] [ROUNDS=2000]
#   BIN: a directory holding emu-run and libemu_verbs.so (build/bin, or a copy of it).
#   B: messages per round (1: one lone signaled SEND round trip, the shape of ib_send_lat; 32: a
#   list of 32, the last signaled). Extra arguments to callgrind come from CALLGRIND_ARGS; with
#   KEEP=DIR the longer run's callgrind.out is kept in DIR for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "$1")
b=${2:-1}
rounds=${3:-2000}
export EMU_FABRIC=${EMU_FABRIC:-cpucount$$}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -DB="$b" -o "$tmp/send_stream" bench/cpu/send_stream.c -libverbs

# count N: the instructions of the traced program (not emu-run's own) over N rounds
count() {
  rm -f "$tmp"/cg.*
  # shellcheck disable=SC2086  # CALLGRIND_ARGS: words
  valgrind --tool=callgrind --trace-children=yes ${CALLGRIND_ARGS:-} \
    --callgrind-out-file="$tmp/cg.%p" "$bin/emu-run" "$tmp/send_stream" "$1" >/dev/null 2>"$tmp/log"
  local f
  f=$(grep -l "send_stream" "$tmp"/cg.* | head -1)
  if [ -n "${KEEP:-}" ]; then cp "$f" "$KEEP/callgrind.out.send_stream_$1"; fi
  awk '/^totals:/ {print $2}' "$f"
}
i1=$(count "$rounds")
i2=$(count $((2 * rounds)))
awk -v a="$i1" -v b="$i2" -v n="$((rounds * b))" 'BEGIN { printf "%.0f\n", (b - a) / n }'
