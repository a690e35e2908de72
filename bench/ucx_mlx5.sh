#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): UCX's own rc_mlx5 over emu0 in the mlx5 personality (plain stores to
# trapped registers: docs/design/mlx5-personality.md) against rc_verbs over emu0 (the provider's
# post path, no exit) and against UCX's posix shared-memory transport, side by side in each round
# (A B C A B C ...), medians of the per-round figures and of the per-round ratios:
# - latency: UCT am_lat 8 B (average), rc_mlx5 under each MMIO mode (bf_post: the WQE copied by
#   memmove, one vector store per 64-byte block and so two exits; db: one 8-byte store, one exit);
# - bandwidth: UCP tag_bw 64 KiB over rc_mlx5+ud_mlx5, rc_verbs+ud_verbs, posix+cma.
# Usage: bench/ucx_mlx5.sh [rounds=5]. docs/perf.md keeps the latest table.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
B=$PWD/build/bin
port=19800
source bench/lib.sh
export EMU_FABRIC=bench-ucx-mlx5-$$ UCX_NET_DEVICES=emu0:1 UCX_WARN_UNUSED_ENV_VARS=n
trap 'rm -f "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"' EXIT

# perf ENV... -- ARGS: ucx_perftest's Final line (iters p50 avg overall MB/s... msg/s...)
perf() {
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  pair "env ${env[*]} $B/emu-run ucx_perftest -p @P $*" \
    "env ${env[*]} $B/emu-run ucx_perftest 127.0.0.1 -p @P $*" | awk '$1 == "Final:"'
}
mlx5=(EMU_PERSONALITY=mlx5)
am_lat() { perf "$@" -t am_lat -s 8 -n 20000 | awk '{print $4}'; }
tag_bw() { perf "$@" -t tag_bw -s 65536 -n 5000 | awk '{print $6}'; }

declare -A R
add() { R[$1]+="$2 "; }
for r in $(seq "$rounds"); do
  bf=$(am_lat "${mlx5[@]}" UCX_IB_MMIO_MODE=bf_post -- -x rc_mlx5 -d emu0:1)
  db=$(am_lat "${mlx5[@]}" UCX_IB_MMIO_MODE=db -- -x rc_mlx5 -d emu0:1)
  vb=$(am_lat -- -x rc_verbs -d emu0:1)
  px=$(am_lat -- -x posix -d memory)
  add bf "$bf"; add db "$db"; add vb "$vb"; add px "$px"
  add bf_vb "$(ratio "$bf" "$vb")"; add db_vb "$(ratio "$db" "$vb")"; add vb_px "$(ratio "$vb" "$px")"
  echo "round $r: am_lat 8 B avg us: rc_mlx5 bf_post $bf, rc_mlx5 db $db, rc_verbs $vb, posix $px" >&2
  mb=$(tag_bw "${mlx5[@]}" UCX_TLS=rc_mlx5,ud_mlx5,self --)
  vbw=$(tag_bw UCX_TLS=rc_verbs,ud_verbs,self --)
  pbw=$(tag_bw UCX_TLS=posix,cma,self --)
  add mb "$mb"; add vbw "$vbw"; add pbw "$pbw"
  add vbw_mb "$(ratio "$vbw" "$mb")"; add pbw_vbw "$(ratio "$pbw" "$vbw")"
  echo "round $r: tag_bw 64 KiB MB/s: rc_mlx5 $mb, rc_verbs $vbw, posix $pbw" >&2
done
med() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "| measure | median | goal |"
echo "|---|---|---|"
echo "| am_lat 8 B avg, rc_mlx5 bf_post (us) | $(med bf) | |"
echo "| am_lat 8 B avg, rc_mlx5 db (us) | $(med db) | |"
echo "| am_lat 8 B avg, rc_verbs (us) | $(med vb) | |"
echo "| am_lat 8 B avg, posix (us) | $(med px) | |"
echo "| rc_mlx5 bf_post / rc_verbs (latency) | $(med bf_vb) | <= 2 |"
echo "| rc_mlx5 db / rc_verbs (latency) | $(med db_vb) | <= 2 |"
echo "| rc_verbs / posix (latency) | $(med vb_px) | (information) |"
echo "| tag_bw 64 KiB, rc_mlx5 (MB/s) | $(med mb) | |"
echo "| tag_bw 64 KiB, rc_verbs (MB/s) | $(med vbw) | |"
echo "| tag_bw 64 KiB, posix (MB/s) | $(med pbw) | |"
echo "| rc_verbs / rc_mlx5 (bandwidth) | $(med vbw_mb) | (information) |"
echo "| posix / rc_verbs (bandwidth) | $(med pbw_vbw) | (information) |"
