#!/bin/bash
# Benchmark (not a test): what executing a run of WRITEs or READs with one DMA call gains for
# private target memory (one process_vm_writev/readv per run instead of per message). perftest
# posts lists of 16 WRs (--post_list), so runs form in the default inline engine. A = EMU_DMA_RUNS=0
# (one call per WQE), B = the default; alternating A B A B ..., server core 0, client core 1; each
# line gives the median of the per-round bandwidth ratios B/A (> 1: runs are faster).
# Usage: bench/dma_runs.sh [rounds=5]   (from any directory; needs build/ and perftest)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
B=build/bin
port=19800
source bench/lib.sh

# bw TOOL SIZE ENV -> MB/s average
bw() {
  pair "env $3 $B/emu-run $1 -d emu0 -F -s $2 -n 20000 -l 16 -p @P" \
    "env $3 $B/emu-run $1 -d emu0 -F -s $2 -n 20000 -l 16 -p @P localhost" |
    awk -v s="$2" '$1==s {print $4}'
}

cases=("ib_write_bw 64" "ib_write_bw 4096" "ib_read_bw 64" "ib_read_bw 4096")
declare -A R
for r in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    read -r tool size <<<"$c"
    a=$(bw "$tool" "$size" EMU_DMA_RUNS=0)
    b=$(bw "$tool" "$size" EMU_DMA_RUNS=1)
    R[$c]+="$(ratio "$b" "$a") "
    echo "round $r: $tool $size: runs $b MB/s, one call per WQE $a MB/s" >&2
  done
done
echo "| test (post_list 16) | size | runs / one call per WQE (median of $rounds) | per-round ratios |"
echo "|---|---|---|---|"
for c in "${cases[@]}"; do
  read -r tool size <<<"$c"
  m=$(tr ' ' '\n' <<<"${R[$c]}" | grep . | median)
  echo "| $tool | $size | $m | ${R[$c]}|"
done
