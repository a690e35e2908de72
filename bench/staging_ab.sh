#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): receive staging on (the default) against off (EMU_STAGING=0), same
# build, alternating A B A B ... within each round; server pinned to core 0, client to core 1.
# Prints, per measure, the median of the per-round ratios (on/off) and the medians themselves.
# Usage: [ITERS=5000] bench/staging_ab.sh [rounds=5] [BIN=build/bin]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
B=${2:-build/bin}
iters=${ITERS:-5000}
port=19500
source bench/lib.sh
export EMU_FABRIC=staging-ab-$$
# ib_send_lat SIZE ENV -> t_typical (us)
lat() { pair "env $2 timeout 120 $B/emu-run ib_send_lat -d emu0 -F -s $1 -n $iters -p @P" \
  "env $2 timeout 120 $B/emu-run ib_send_lat -d emu0 -F -s $1 -n $iters -p @P localhost" |
  awk -v s="$1" '$1==s {print $5}'; }
# ibv_rc_pingpong SIZE ENV -> usec/iter
pp() { pair "env $2 timeout 120 $B/emu-run ibv_rc_pingpong -d emu0 -s $1 -n $iters -p @P" \
  "env $2 timeout 120 $B/emu-run ibv_rc_pingpong -d emu0 -s $1 -n $iters -p @P localhost" |
  awk '/usec\/iter/ {print $(NF-1)}'; }
# ib_send_bw 64 KiB ENV -> MB/s average
bw() { pair "env $1 timeout 120 $B/emu-run ib_send_bw -d emu0 -F -s 65536 -n $iters -p @P" \
  "env $1 timeout 120 $B/emu-run ib_send_bw -d emu0 -F -s 65536 -n $iters -p @P localhost" |
  awk '$1==65536 {print $4}'; }
declare -A R
add() { R[$1]+="$2 "; }
# (pair counts ports up inside the $(...) subshell: each call here starts from the next one)
next_port() { port=$((port + 1)); }
for _ in $(seq "$rounds"); do
  for s in 64 1024 4096 8192 65536; do
    next_port; off=$(lat $s EMU_STAGING=0)
    next_port; on=$(lat $s EMU_STAGING=256K)
    add "lat$s.off" "$off"; add "lat$s.on" "$on"; add "lat$s.r" "$(ratio "$on" "$off")"
  done
  for s in 1 64 256 1024 2048 4096; do
    next_port; off=$(pp $s EMU_STAGING=0)
    next_port; on=$(pp $s EMU_STAGING=256K)
    add "pp$s.off" "$off"; add "pp$s.on" "$on"; add "pp$s.r" "$(ratio "$on" "$off")"
  done
  next_port; off=$(bw EMU_STAGING=0)
  next_port; on=$(bw EMU_STAGING=256K)
  add bw.off "$off"; add bw.on "$on"; add bw.r "$(ratio "$on" "$off")"
done
rm -f "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
spread() { tr ' ' '\n' <<<"${R[$1]}" | grep . | sort -g | awk 'NR==1{a=$1} {b=$1} END {if (a>0) printf "%.2f", b/a; else print "n/a"}'; }
echo "| measure | off (EMU_STAGING=0) | on | median of on/off per round | spread on (max/min) |"
echo "|---|---|---|---|---|"
for s in 64 1024 4096 8192 65536; do
  echo "| ib_send_lat $s B t_typical us | $(m lat$s.off) | $(m lat$s.on) | $(m lat$s.r) | $(spread lat$s.on) |"
done
for s in 1 64 256 1024 2048 4096; do
  echo "| ibv_rc_pingpong -s $s usec/iter | $(m pp$s.off) | $(m pp$s.on) | $(m pp$s.r) | $(spread pp$s.on) |"
done
echo "| ib_send_bw 64 KiB MB/s | $(m bw.off) | $(m bw.on) | $(m bw.r) | $(spread bw.on) |"
