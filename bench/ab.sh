#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): two builds of emu0 against each other, alternating A B A B ... in one
# run (server core 0, client core 1), the median of the per-round ratios B / A. For judging a
# change to the post / doorbell / engine / poll path on a machine whose speed moves within seconds.
# Usage: bench/ab.sh BIN_A BIN_B [rounds=5] [measures="lat ucx_p50 ucx_avg batch_send write_bw"]
#   BIN_A, BIN_B: directories holding emu-run and libemu_verbs.so (e.g. a copy of build/bin made
#   before the change, and build/bin). rate_* and batch_* need bench/msgrate (MSGRATE=path, default
#   BIN_B/msgrate); a measure whose tool is missing is skipped. Extra emu0 settings: EMU_ENV="K=V".
# Measures (B / A below 1: B is faster for lat and ucx_*, slower for the rates):
#   lat         ib_send_lat 2 B, typical
#   lat64       ib_send_lat 64 B, typical
#   ucx_p50/avg UCP tag_lat 8 B over emu0 (rc_verbs,ud_verbs: four CQs polled per progress call)
#   rate_send, rate_write    bench/msgrate 8 B SEND / WRITE, the whole run's rate
#   batch_send, batch_write  the same, its median batch's rate (the post/engine path without the
#                            stalls of a receiver that falls behind)
#   write_bw    ib_write_bw 8 B message rate
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1") B=$(realpath "$2")
rounds=${3:-5}
measures=${4:-lat ucx_p50 ucx_avg batch_send write_bw}
MSGRATE=${MSGRATE:-$B/msgrate}
EMU_ENV=${EMU_ENV:-}
# shellcheck disable=SC2034  # pair (bench/lib.sh) counts up from it
port=${PORT:-19800}
export EMU_FABRIC=${EMU_FABRIC:-ab$$}
source bench/lib.sh

# Each takes the directory of the build to run.
lat() { pair "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P" \
  "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P localhost" | awk '$1==2 {print $5}'; }
lat64() { pair "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 64 -n 100000 -p @P" \
  "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 64 -n 100000 -p @P localhost" | awk '$1==64 {print $5}'; }
write_bw() { pair "env $EMU_ENV $1/emu-run ib_write_bw -d emu0 -F -s 8 -n 300000 -p @P" \
  "env $EMU_ENV $1/emu-run ib_write_bw -d emu0 -F -s 8 -n 300000 -p @P localhost" | awk '$1==8 {print $5}'; }
# ucx_tag FIELD BIN: ucx_perftest's "Final:" line is iters p50 avg ...
U="UCX_NET_DEVICES=emu0:1 UCX_TLS=rc_verbs,ud_verbs,self"
ucx_tag() { pair "env $EMU_ENV $U $2/emu-run ucx_perftest -p @P -t tag_lat -s 8 -n 100000" \
  "env $EMU_ENV $U $2/emu-run ucx_perftest 127.0.0.1 -p @P -t tag_lat -s 8 -n 100000" |
  awk -v f="$1" '$1 == "Final:" {print $f}'; }
ucx_p50() { ucx_tag 3 "$1"; }
ucx_avg() { ucx_tag 4 "$1"; }
# msgrate OP BIN [batch]: the run's rate, or the median batch's (the last figure on its line).
msgrate() { pair "env $EMU_ENV $2/emu-run $MSGRATE -o $1 -p @P" \
  "env $EMU_ENV $2/emu-run $MSGRATE -o $1 -n 1000000 -p @P localhost" |
  awk -v batch="${3:-}" '/^msgrate .* Mmsg\/s/ {
    for (i = 1; i <= NF; ++i) if ($i == "Mmsg/s") { r = $(i - 1); if (!batch) break }
    print r }'; }
rate_send() { msgrate send "$1"; }
rate_write() { msgrate write "$1"; }
batch_send() { msgrate send "$1" batch; }
batch_write() { msgrate write "$1" batch; }

declare -A R
for m in $measures; do
  if [[ $m == rate_* || $m == batch_* ]] && [[ ! -x $MSGRATE ]]; then
    echo "$m: no msgrate at $MSGRATE, skipped" >&2
    continue
  fi
  for r in $(seq "$rounds"); do
    a=$($m "$A") b=$($m "$B")
    R[$m]+="$(ratio "$b" "$a") "
    echo "$m round $r: A $a B $b" >&2
  done
done
echo "| measure | B / A per round | median |"
echo "|---|---|---|"
for m in $measures; do
  [[ -n ${R[$m]:-} ]] || continue
  echo "| $m | ${R[$m]}| $(tr ' ' '\n' <<<"${R[$m]}" | grep . | median) |"
done
