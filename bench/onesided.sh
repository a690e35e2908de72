#!/bin/bash
# Benchmark (not a test): one-sided traffic into shared target memory with and without the shared
# window (docs/architecture.md, "Registered memory shared for real"). perftest's buffers are put in
# a MAP_SHARED mapping of a /dev/shm file (--mmap), which ibv_reg_mr recognises by default
# (EMU_SHARED_BACKING=1: engines copy with memcpy through a mapping) and, with
# EMU_SHARED_BACKING=0, reaches with process_vm_* as private memory. The two modes alternate
# (A B A B ..., server core 0, client core 1) and each line gives the median of the per-round
# ratios B/A (latency: shared-window time / system-call time, < 1 is faster; bandwidth: > 1 is
# faster), with the private-buffer figure (perftest default) of the same round beside.
# Usage: bench/onesided.sh [rounds=5]   (from any directory; needs build/ and perftest)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
B=build/bin
port=19700
source bench/lib.sh

dir=/dev/shm/onesided-bench-$$
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
truncate -s 256M "$dir/server" "$dir/client"

# perf TOOL SIZE ITERS ENV BUFFER(private|shared) -> the figure (typical latency us, or MB/s)
perf() {
  local tool=$1 size=$2 iters=$3 env=$4 buf=$5 sm="" cm="" col=5
  [ "$buf" = shared ] && sm="--mmap=$dir/server" cm="--mmap=$dir/client"
  [ "$tool" = ib_write_bw ] && col=4
  pair "env $env $B/emu-run $tool -d emu0 -F -s $size -n $iters -p @P $sm" \
    "env $env $B/emu-run $tool -d emu0 -F -s $size -n $iters -p @P $cm localhost" |
    awk -v s="$size" -v c="$col" '$1==s {print $c}'
}

cases=("ib_write_lat 64 5000" "ib_write_lat 4096 5000" "ib_write_lat 65536 2000"
  "ib_read_lat 64 5000" "ib_read_lat 4096 5000" "ib_read_lat 65536 2000"
  "ib_write_bw 65536 2000" "ib_write_bw 1048576 300")
declare -A R P
for r in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    read -r tool size iters <<<"$c"
    a=$(perf "$tool" "$size" "$iters" EMU_SHARED_BACKING=0 shared)
    b=$(perf "$tool" "$size" "$iters" EMU_SHARED_BACKING=1 shared)
    p=$(perf "$tool" "$size" "$iters" EMU_SHARED_BACKING=1 private)
    R[$c]+="$(ratio "$b" "$a") "
    P[$c]+="$p "
    echo "round $r: $tool $size: shared-window $b, system call $a, private $p" >&2
  done
done
echo "| test | size | shared window / system call (median of $rounds) | per-round ratios | private (perftest default), per round |"
echo "|---|---|---|---|---|"
for c in "${cases[@]}"; do
  read -r tool size _ <<<"$c"
  m=$(tr ' ' '\n' <<<"${R[$c]}" | grep . | median)
  echo "| $tool | $size | $m | ${R[$c]}| ${P[$c]}|"
done
