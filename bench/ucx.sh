#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): UCX over emu0 against perftest over emu0 in the same run, alternating
# (A B A B ...), the median of the per-round ratios: UCP tag_lat 8 B average over ib_send_lat 8 B
# average (and median over typical), ib_write_bw 64 KiB over UCP tag_bw 64 KiB. Both sides are
# busy pollers, so a tail (an average far above the median) is time a process spent waiting for
# a CPU or asleep: each run also reports, from the kernel's scheduler statistics of its two
# processes (/proc/PID/schedstat, sampled every 50 ms), the share of their time spent runnable
# but not running. UCX must see emu0 (/dev/infiniband/uverbs-emu0, the device-presence work).
# docs/perf.md keeps the latest table. Usage: bench/ucx.sh [rounds=5] [nice=0]: with nice < 0
# (root) both sides of every pair run at that niceness.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
niceness=${2:-0}
B=$PWD/build/bin
port=19700
source bench/lib.sh
export EMU_FABRIC=bench-ucx-$$ UCX_NET_DEVICES=emu0:1 UCX_TLS=rc_verbs,ud_verbs,self
stats=$(mktemp)
out=$(mktemp)
trap 'rm -f "$stats" "$out" "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"' EXIT
T="nice -n $niceness $B/emu-run"

# watch PID: appends the process's last "run_ns wait_ns" (schedstat) to $stats when it is gone
watch() {
  local last="0 0" s
  while s=$(cat "/proc/$1/schedstat" 2>/dev/null); do
    last=$s
    sleep 0.05
  done
  echo "$last" >>"$stats"
}
# the share of the last pair's time spent waiting for a CPU, in percent
waited() { tail -2 "$stats" | awk '{r += $1; w += $2} END {printf "%.0f%%", r + w ? 100 * w / (r + w) : 0}'; }
# pair SERVERCMD CLIENTCMD -> client output (each process's scheduler statistics into $stats)
pair() {
  port=$((port + 1))
  local s=${1//@P/$port} c=${2//@P/$port}
  # shellcheck disable=SC2086  # $s and $c: commands with their arguments
  taskset -c 0 $s >/dev/null 2>&1 &
  local sp=$!
  watch "$sp" &
  local ws=$!
  wait_listen "$port"
  # shellcheck disable=SC2086  # (as above)
  taskset -c 1 $c >"$out" 2>&1 &
  local cp=$!
  watch "$cp" &
  wait "$cp" || true
  wait "$sp" || true
  wait "$ws" $! || true
  cat "$out"
}

# ib_send_lat columns: bytes iters t_min t_max t_typical t_avg ...; prints "avg typical"
send_lat() { pair "$T ib_send_lat -d emu0 -F -s 8 -n 200000 -p @P" \
  "$T ib_send_lat -d emu0 -F -s 8 -n 200000 -p @P localhost" | awk '$1==8 {print $6, $5}'; }
write_bw() { pair "$T ib_write_bw -d emu0 -F -s 65536 -n 50000 -p @P" \
  "$T ib_write_bw -d emu0 -F -s 65536 -n 50000 -p @P localhost" | awk '$1==65536 {print $4}'; }
# ucx_perftest's last line: Final: iters p50 avg overall | MB/s avg overall | msg/s avg overall
tag() { pair "$T ucx_perftest -p @P $*" "$T ucx_perftest 127.0.0.1 -p @P $*" | awk '$1 == "Final:"'; }
tag_lat() { tag -t tag_lat -s 8 -n 200000 | awk '{print $4, $3}'; }
tag_bw() { tag -t tag_bw -s 65536 -n 50000 | awk '{print $7, $3, $4}'; }

declare -A R
for r in $(seq "$rounds"); do
  read -r sa st <<<"$(send_lat)"; s_w=$(waited)
  read -r ta tp <<<"$(tag_lat)"; t_w=$(waited)
  R[lat]+="$(ratio "$ta" "$sa") "; R[lat50]+="$(ratio "$tp" "$st") "
  echo "round $r: ib_send_lat avg ${sa} typical ${st} us (waited ${s_w});" \
       "tag_lat avg ${ta} p50 ${tp} us (waited ${t_w})" >&2
  wb=$(write_bw); w_w=$(waited)
  read -r tb tp ta <<<"$(tag_bw)"; t_w=$(waited)
  R[bw]+="$(ratio "$wb" "$tb") "
  echo "round $r: ib_write_bw 64K ${wb} MB/s (waited ${w_w}); tag_bw 64K ${tb} MB/s, sender's overhead" \
       "per message p50 ${tp} avg ${ta} us (waited ${t_w})" >&2
done
med() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "| measure (UCX over emu0 against perftest over emu0) | ratio | goal |"
echo "|---|---|---|"
echo "| UCP tag_lat 8 B average / ib_send_lat 8 B average | $(med lat) | <= 1.5 |"
echo "| UCP tag_lat 8 B median / ib_send_lat 8 B typical | $(med lat50) | (information) |"
echo "| ib_write_bw 64 KiB / UCP tag_bw 64 KiB (bandwidth) | $(med bw) | <= 1.5 |"
