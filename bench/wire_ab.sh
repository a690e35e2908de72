#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): the cost of the packet wire's switch when it is off. Runs the same
# perftest pairs with build A (default: /work/main/build, without the wire) and build B (this
# tree's build) side by side (A B A B ...), and with B under EMU_FAULTS (no fault firing) and
# EMU_PCAP to show what turning the wire on costs. Usage: bench/wire_ab.sh [A_BIN] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:-/work/main/build/bin}
B=build/bin
rounds=${2:-3}
port=19700
source bench/lib.sh
export EMU_FABRIC=wire-ab-$$
lat2() { pair "env $2 $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 20000 -p @P" \
  "env $2 $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 20000 -p @P localhost" | awk '$1==2 {print $5}'; }
bw64k() { pair "env $2 $1/emu-run ib_write_bw -d emu0 -F -s 65536 -n 5000 -p @P" \
  "env $2 $1/emu-run ib_write_bw -d emu0 -F -s 65536 -n 5000 -p @P localhost" |
  awk '$1==65536 {print $4}'; }
declare -A R
on="EMU_FAULTS=seed=1;drop:p=0"
cap="EMU_PCAP=/dev/shm/wire-ab-$$.pcapng EMU_PCAP_LIMIT=1000"
for _ in $(seq "$rounds"); do
  R[lat_a]+="$(lat2 "$A" "") " R[lat_b]+="$(lat2 "$B" "") "
  R[lat_f]+="$(lat2 "$B" "$on") "
  R[bw_a]+="$(bw64k "$A" "") " R[bw_b]+="$(bw64k "$B" "") "
  R[bw_f]+="$(bw64k "$B" "$on") " R[bw_c]+="$(bw64k "$B" "$cap") "
done
rm -f "/dev/shm/wire-ab-$$.pcapng" "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "| measure | A (no wire) | B (wire off) | B/A | B, rules set | B, capture |"
echo "|---|---|---|---|---|---|"
echo "| ib_send_lat 2 B, t_typical us | $(m lat_a) | $(m lat_b) | $(ratio "$(m lat_b)" "$(m lat_a)") | $(m lat_f) | |"
echo "| ib_write_bw 64 KiB, MB/s | $(m bw_a) | $(m bw_b) | $(ratio "$(m bw_b)" "$(m bw_a)") | $(m bw_f) | $(m bw_c) |"
