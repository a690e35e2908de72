#!/bin/bash
# Benchmark (not a test): two builds of emu0 against each other, alternating A B A B ... in one
# run (server core 0, client core 1), the median of the per-round ratios B / A. For judging a
# change to the post / doorbell / engine / poll path on a machine whose speed moves within seconds.
# Usage: bench/ab.sh BIN_A BIN_B [rounds=5] [measures="lat rate_send rate_write write_bw"]
#   BIN_A, BIN_B: directories holding emu-run and libemu_verbs.so (e.g. a copy of build/bin made
#   before the change, and build/bin). rate_* need bench/msgrate (MSGRATE=path, default
#   BIN_B/msgrate); a measure whose tool is missing is skipped. Extra emu0 settings: EMU_ENV="K=V".
# Ratios: lat = ib_send_lat 2 B typical (below 1: B is faster); rate_* and write_bw = message rate
# (above 1: B is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(realpath "$1") B=$(realpath "$2")
rounds=${3:-5}
measures=${4:-lat rate_send rate_write write_bw}
MSGRATE=${MSGRATE:-$B/msgrate}
port=${PORT:-19800}
EMU_ENV=${EMU_ENV:-}
export EMU_FABRIC=${EMU_FABRIC:-ab$$}
source bench/lib.sh

# Each takes the directory of the build to run.
lat() { pair "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P" \
  "env $EMU_ENV $1/emu-run ib_send_lat -d emu0 -F -s 2 -n 100000 -p @P localhost" | awk '$1==2 {print $5}'; }
write_bw() { pair "env $EMU_ENV $1/emu-run ib_write_bw -d emu0 -F -s 8 -n 300000 -p @P" \
  "env $EMU_ENV $1/emu-run ib_write_bw -d emu0 -F -s 8 -n 300000 -p @P localhost" | awk '$1==8 {print $5}'; }
msgrate() { pair "env $EMU_ENV $2/emu-run $MSGRATE -o $1 -p @P" \
  "env $EMU_ENV $2/emu-run $MSGRATE -o $1 -n 1000000 -p @P localhost" |
  awk '/^msgrate .* Mmsg\/s/ {for (i = 1; i <= NF; ++i) if ($i == "Mmsg/s") {print $(i-1); exit}}'; }
rate_send() { msgrate send "$1"; }
rate_write() { msgrate write "$1"; }

declare -A R
for m in $measures; do
  [[ $m == rate_* && ! -x $MSGRATE ]] && { echo "$m: no msgrate at $MSGRATE, skipped" >&2; continue; }
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
