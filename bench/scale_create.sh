#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): create+destroy cost per QP, CQ and MR with 100, 1,000 and 10,000 QPs
# live (issue 18 item 3), build A (default /work/main/build/bin: fixed tables, at most 4,094 QPs)
# against build B (this tree's: chunked tables), alternated A B A B ..., pinned to core 1. Prints
# the median ns per create+destroy pair and the median of per-round B/A ratios.
# Usage: bench/scale_create.sh [A_BIN] [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:-/work/main/build/bin}
B=build/bin
rounds=${2:-5}
source bench/lib.sh
prog=$(mktemp /tmp/scale_create.XXXXXX)
trap 'rm -f "$prog"' EXIT
g++ -O2 -std=c++17 -o "$prog" bench/scale_create.cpp -libverbs
run() { EMU_FABRIC=scale-bench-$$ taskset -c 1 "$1/emu-run" "$prog" 100 1000 10000; }
declare -A R
for _ in $(seq "$rounds"); do
  for side in a b; do
    bin=$A && [ $side = b ] && bin=$B
    while read -r kind live val; do
      R[$side.$kind.$live]+="${val#*=} "
    done < <(run "$bin" | awk '{print $1, $2, $3}')
  done
done
m() { tr ' ' '\n' <<<"${R[$1]:-}" | grep -E '^[0-9.]+$' | median; }
echo "| object | live QPs | A ns | B ns | B/A (median of rounds) |"
echo "|---|---|---|---|---|"
for kind in qp cq mr; do
  for live in live=100 live=1000 live=10000; do
    read -ra a <<<"${R[a.$kind.$live]:-}"
    read -ra b <<<"${R[b.$kind.$live]:-}"
    # A round where A refused the count (fixed tables: at most 4,094 QPs) has no ratio.
    rs=$(for i in "${!b[@]}"; do
      if [[ ${a[$i]:-} =~ ^[0-9.]+$ ]]; then ratio "${b[$i]}" "${a[$i]}"; echo; fi
    done | { grep -v n/a || true; } | median)
    echo "| $kind | ${live#live=} | $(m a.$kind.$live) | $(m b.$kind.$live) | ${rs:-n/a} |"
  done
done
