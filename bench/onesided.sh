#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test) of one-sided traffic between two emu-run perftest processes, A/B
# alternating (A B A B ..., server core 0, client core 1), each line the median of the per-round
# ratios B/A. Two parts:
#  window: perftest's buffers in a MAP_SHARED mapping of a /dev/shm file (--mmap), which
#    ibv_reg_mr recognises by default (B: EMU_SHARED_BACKING=1, engines copy with memcpy through a
#    mapping) against A: EMU_SHARED_BACKING=0 (process_vm_* as for private memory); latency ratios
#    < 1 and bandwidth ratios > 1 are gains. The private-buffer figure (perftest default, B's
#    settings) of each round is printed beside.
#  runs: private buffers, perftest posting lists of 16 WRs (--post_list) so that runs of WRITEs or
#    READs form: B: EMU_DMA_RUNS=1 (one process_vm_writev/readv per run) against A: EMU_DMA_RUNS=0
#    (one per WQE); bandwidth ratios > 1 are gains.
# Usage: bench/onesided.sh [rounds=5] [window|runs|all=all]   (needs build/ and perftest)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
part=${2:-all}
B=build/bin
port=19700
source bench/lib.sh

dir=/dev/shm/onesided-bench-$$
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
truncate -s 256M "$dir/server" "$dir/client"

# perf TOOL SIZE ITERS ENV BUFFER(private|shared) [EXTRA] -> typical latency (us) or average MB/s
# (each process bounded: a pair that hangs gives no figure, and its round no ratio)
perf() {
  local tool=$1 size=$2 iters=$3 env=$4 buf=$5 extra=${6:-} sm="" cm="" col=5
  [ "$buf" = shared ] && sm="--mmap=$dir/server" cm="--mmap=$dir/client"
  [[ "$tool" == *_bw ]] && col=4
  pair "timeout 300 env $env $B/emu-run $tool -d emu0 -F -s $size -n $iters -p @P $sm $extra" \
    "timeout 300 env $env $B/emu-run $tool -d emu0 -F -s $size -n $iters -p @P $cm $extra localhost" |
    awk -v s="$size" -v c="$col" '$1==s {print $c}'
}

# ab NAME CASE ENV_A ENV_B BUFFER EXTRA: one round of one case, A then B; the ratio B/A is kept.
declare -A R P
ab() {
  local tool size iters a b
  read -r tool size iters <<<"$2"
  a=$(perf "$tool" "$size" "$iters" "$3" "$5" "$6")
  b=$(perf "$tool" "$size" "$iters" "$4" "$5" "$6")
  R["$1 $2"]+="$(ratio "$b" "$a") "
  echo "round $r: $1 $tool $size: B ($4) $b, A ($3) $a" >&2
}

table() {  # table NAME HEADER CASES...
  local name=$1
  echo "| $2 | size | B/A (median of $rounds) | per-round ratios | private, per round |"
  echo "|---|---|---|---|---|"
  for c in "${@:3}"; do
    read -r tool size _ <<<"$c"
    m=$(tr ' ' '\n' <<<"${R[$name $c]}" | grep . | median)
    echo "| $tool | $size | $m | ${R[$name $c]}| ${P[$c]:-}|"
  done
}

window=("ib_write_lat 64 5000" "ib_write_lat 4096 5000" "ib_write_lat 65536 2000"
  "ib_read_lat 64 5000" "ib_read_lat 4096 5000" "ib_read_lat 65536 2000"
  "ib_write_bw 65536 2000" "ib_write_bw 1048576 300")
runs=("ib_write_bw 64 20000" "ib_write_bw 4096 20000" "ib_read_bw 64 20000" "ib_read_bw 4096 20000")
for r in $(seq "$rounds"); do
  if [ "$part" != runs ]; then
    for c in "${window[@]}"; do
      ab window "$c" EMU_SHARED_BACKING=0 EMU_SHARED_BACKING=1 shared ""
      read -r tool size iters <<<"$c"
      P[$c]+="$(perf "$tool" "$size" "$iters" "" private) "
    done
  fi
  if [ "$part" != window ]; then
    for c in "${runs[@]}"; do ab runs "$c" EMU_DMA_RUNS=0 EMU_DMA_RUNS=1 private "--post_list=16"; done
  fi
done
[ "$part" != runs ] && table window "shared buffer: window / system call" "${window[@]}"
[ "$part" != window ] && table runs "private, post_list 16: runs / one call per WQE" "${runs[@]}"
exit 0
