#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): emu0 against its anchors (docs/perf.md), measured side by
# side in one run (A B A B ...), median ratio per pair. Writes a table to stdout; docs/perf.md keeps
# the latest one. Usage: bench/run.sh [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
command -v ucx_perftest >/dev/null || { apt-get update -qq && apt-get install -y -qq ucx-utils; }
B=build/bin
port=19500

source bench/lib.sh

# Each emu_* takes the environment to run emu0 with ("" = defaults).
emu_send_lat() { pair "env $1 $B/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P" \
  "env $1 $B/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P localhost" | awk '$1==2 {print $5}'; }
emu_write_bw() { pair "env $3 $B/emu-run ib_write_bw -d emu0 -F -s $1 -n $2 -p @P" \
  "env $3 $B/emu-run ib_write_bw -d emu0 -F -s $1 -n $2 -p @P localhost" | awk -v s="$1" '$1==s {print $4}'; }
# With EMU_ENGINE=thread the client's device thread shares the client's core (taskset pins every
# thread of the process); the poster yields to it when its CQ is empty and doorbells are queued.
emu_write_rate() { pair "env $1 $B/emu-run ib_write_bw -d emu0 -F -s 8 -n ${2:-2000000} -p @P" \
  "env $1 $B/emu-run ib_write_bw -d emu0 -F -s 8 -n ${2:-2000000} -p @P localhost" | awk '$1==8 {print $5}'; }
ucx() { pair "env UCX_TLS=$1 ucx_perftest -p @P ${*:2}" "env UCX_TLS=$1 ucx_perftest 127.0.0.1 -p @P ${*:2}"; }
# ucx_perftest's last line: Final: iters p50 avg overall | MB/s avg overall | msg/s avg overall
ucx_tag_lat() { ucx posix -t tag_lat -s 8 -n 1000000 | awk '$1 == "Final:" {print $4}'; }
ucx_cma_put() { ucx cma -t put_bw -x cma -d memory -D zcopy -s "$1" -n 20000 | awk '$1 == "Final:" {print $7}'; }
ucx_tag_rate() { ucx posix -t tag_bw -s 8 -n 5000000 | awk '$1 == "Final:" {print $9 / 1e6}'; }


declare -A R
# The other column: registered private pages left where they are (system calls, staging).
SH=EMU_SHARED_MR=0
# Each emu0 figure is divided by an anchor measured just before it: this VM's speed moves within
# seconds (docs/perf.md), and a default-mode rate run alone takes several.
for r in $(seq "$rounds"); do
  b=$(ucx_tag_lat); a=$(emu_send_lat ""); R[lat]+="$(ratio "$a" "$b") "
  b2=$(ucx_tag_lat); c=$(emu_send_lat $SH); R[lat_sh]+="$(ratio "$c" "$b2") "
  echo "round $r: send_lat 2B emu0 ${a}us vs ucp tag_lat ${b}us; EMU_SHARED_MR=0 ${c}us vs ${b2}us" >&2
  b=$(ucx_cma_put 65536); a=$(emu_write_bw 65536 20000 ""); R[bw64k]+="$(ratio "$a" "$b") "
  b2=$(ucx_cma_put 65536); c=$(emu_write_bw 65536 20000 $SH); R[bw64k_sh]+="$(ratio "$c" "$b2") "
  echo "round $r: write_bw 64K emu0 ${a}MB/s vs cma put ${b}MB/s; EMU_SHARED_MR=0 ${c}MB/s vs ${b2}MB/s" >&2
  b=$(ucx_cma_put 1048576); a=$(emu_write_bw 1048576 2000 ""); R[bw1m]+="$(ratio "$a" "$b") "
  echo "round $r: write_bw 1M emu0 ${a}MB/s vs cma put ${b}MB/s" >&2
  b=$(ucx_tag_rate); a=$(emu_write_rate "" 300000); R[rate]+="$(ratio "$a" "$b") "
  b2=$(ucx_tag_rate); c=$(emu_write_rate EMU_ENGINE=thread); R[rate_thread]+="$(ratio "$c" "$b2") "
  b3=$(ucx_tag_rate); d=$(emu_write_rate $SH); R[rate_sh]+="$(ratio "$d" "$b3") "
  echo "round $r: write rate 8B emu0 ${a} vs ucp tag rate ${b}; thread engine ${c} vs ${b2}; EMU_SHARED_MR=0 ${d} vs ${b3} Mpps" >&2
done
med() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "| measure | default | EMU_SHARED_MR=0 | goal |"
echo "|---|---|---|---|"
echo "| ib_send_lat 2 B / UCP tag_lat 8 B posix (latency) | $(med lat) | $(med lat_sh) | <= 1.0 |"
echo "| ib_write_bw 64 KiB / UCT cma zcopy put 64 KiB | $(med bw64k) | $(med bw64k_sh) | >= 1.0 |"
echo "| ib_write_bw 1 MiB / UCT cma zcopy put 1 MiB | $(med bw1m) | | (info) |"
echo "| ib_write_bw 8 B msg rate / UCP tag_bw 8 B msg rate | $(med rate) (EMU_ENGINE=thread: $(med rate_thread)) | $(med rate_sh) | >= 1.0 |"
