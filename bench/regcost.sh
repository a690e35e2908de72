#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): ibv_reg_mr + ibv_dereg_mr of a resident private buffer on emu0, pages
# moved into the registration file (EMU_SHARED_MR=1, the default) against left where they are
# (EMU_SHARED_MR=0), alternating in each round, for each size; the median of the per-round ratios.
# Usage: bench/regcost.sh [ROUNDS=5] [SIZES="4096 65536 1048576 16777216"]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
sizes=${2:-4096 65536 1048576 16777216}
B=$PWD/build/bin
source bench/lib.sh
export EMU_FABRIC=bench-regcost-$$
trap 'rm -f "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"' EXIT
# run MOVE SIZE -> "reg dereg" in us
run() {
  local n=$((200000000 / ($2 + 4096) + 20)); [ $n -gt 2000 ] && n=2000
  EMU_SHARED_MR=$1 taskset -c 1 "$B/emu-run" "$B/regcost" -s "$2" -n "$n" |
    awk '{print $5, $8}'
}
echo "| size | reg moved / kept (us) | dereg moved / kept (us) | reg+dereg ratio (median of $rounds) |"
echo "|---|---|---|---|"
for s in $sizes; do
  ratios="" cells_r="" cells_d=""
  for _ in $(seq "$rounds"); do
    read -r r0 d0 < <(run 0 "$s")
    read -r r1 d1 < <(run 1 "$s")
    ratios+="$(awk -v a="$r1" -v b="$d1" -v c="$r0" -v d="$d0" 'BEGIN {printf "%.2f", (a + b) / (c + d)}') "
    cells_r+="$r1/$r0 " cells_d+="$d1/$d0 "
  done
  echo "| $s | $cells_r | $cells_d | $(tr ' ' '\n' <<<"$ratios" | grep . | median) |"
done
