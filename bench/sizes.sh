#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test), issue 18 items 2 and 4: emu0 across sizes against UCX's shared-memory
# transports, in one run of alternating rounds. In every round each emu0 figure is taken right
# after its anchor (A B A B ...); a measure's ratio is the median of its per-round ratios. Each
# round starts and ends with a cache-line ping-pong between the two cores (bench/clping), which
# states the vCPU placement the round ran in, and so does every pair (before its anchor, after its
# emu0 figure): a pair that straddled a move of the vCPUs is marked and left out of the median.
# Server (rank 0) on core 0, client (rank 1) on core 1.
#   latency 2 B..64 KiB  ib_send_lat over emu0    / UCP tag_lat, UCX_TLS=posix (p50, avg, p99)
#   bandwidth 64K, 1M    ib_write_bw, ib_send_bw  / UCT put_bw over cma (zcopy); UCP tag_bw posix
#   rate 8 B             bench/msgrate write, send / UCP tag_bw 8 B posix, UCT am_bw 8 B posix
#   spread               ibv_rc_pingpong 64 B..4 KiB against its 1 B figure of the same round
#   UCX over emu0        UCP tag_lat 8 B, tag_bw 64 KiB (rc_verbs on emu0) / the same over posix
#   MPI                  bench/mpi_pingpong, UCX PML on emu0 / the same PML over posix
# Markdown tables on stdout, per-round lines on stderr.
# Usage: bench/sizes.sh [-q] [ROUNDS=5]   (-q: a smoke run, one round by default, few iterations)
#   PARTS="lat ..." runs only those parts of each round (default: lat bw rate spread ucx_emu mpi);
#   BIN=dir measures that build (default build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = -q ] && { quick=1; shift; }
rounds=${1:-$((quick ? 1 : 5))}
command -v ucx_perftest >/dev/null || { echo "needs ucx_perftest (ucx-utils)" >&2; exit 1; }
B=$(realpath "${BIN:-$PWD/build/bin}")
port=19900
source bench/lib.sh
export EMU_FABRIC=bench-sizes-$$
trap 'rm -f "${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"' EXIT
# iterations: scale N -> N, or N/10 in quick mode
it() { echo $(($1 / (quick ? 10 : 1))); }
E="$B/emu-run"
EMU_UCX="env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=emu0:1 UCX_WARN_UNUSED_ENV_VARS=n $E"

# perftest over emu0: the client's result line for size $2 (first column)
perf() { pair "$E $1 -d emu0 -F -p @P" "$E $1 -d emu0 -F -p @P localhost" | awk -v s="$2" '$1==s'; }
# ucx_perftest: WRAP ("env UCX_TLS=.." or $EMU_UCX) ARGS -> its "Final:" line, whose fields are
# iters, latency p(R) avg overall (us), bandwidth avg overall (MB/s), rate avg overall (msg/s)
ucx() { pair "$1 ucx_perftest -p @P ${*:2}" "$1 ucx_perftest 127.0.0.1 -p @P ${*:2}" |
  awk '$1 == "Final:"'; }
POSIX="env UCX_TLS=posix UCX_WARN_UNUSED_ENV_VARS=n"
CMA="env UCX_TLS=cma UCX_WARN_UNUSED_ENV_VARS=n"
msgrate() { pair "$E $B/msgrate -o $1 -n $2 -p @P" "$E $B/msgrate -o $1 -n $2 -p @P localhost" |
  awk '/^msgrate .* Mmsg\/s/ {for (i = 1; i <= NF; ++i) if ($i == "Mmsg/s") {print $(i-1); exit}}'; }
# a busy machine can leave one of clping's processes waiting for a CPU (a round trip of ms): bounded
clping() {
  local v
  v=$(timeout 20 "$B/clping" -n "$(it 20000)" | awk '{print $7}')
  echo "${v:-n/a}"
}
mpi() {
  local wrap=$1
  # shellcheck disable=SC2086  # $wrap: a command prefix, or nothing
  taskset -c 0,1 mpirun -np 2 --allow-run-as-root --bind-to core --map-by core --mca pml ucx \
    --mca pml_ucx_tls any --mca pml_ucx_devices any $wrap "$B/mpi_pingpong" "$(it 20000)" "$(it 200)" 2>&1 || true
}

declare -A V R S  # V: per-round "emu0/anchor" figures, R: per-round ratios, by measure; S: the
                  # ratios of pairs taken within one placement
# The placement around each pair: clping before its anchor (pre) and after its emu0 figure (post).
# A pair whose two readings differ by more than 1.5x straddled a move of the vCPUs (seen within
# one round on this VM): its figure is marked "*" and left out of the ratio when any pair of the
# measure kept one placement.
pre="" post=""
mark_pre() { pre=$(clping); }
mark_post() { post=$(clping); }
moved() {
  [ -n "$pre" ] && [ -n "$post" ] && [ "$pre" != n/a ] && [ "$post" != n/a ] || return 1
  awk -v a="$pre" -v b="$post" 'BEGIN { exit !(a > 1.5 * b || b > 1.5 * a) }'
}
add() {
  local r; r=$(ratio "$2" "$3")
  if moved; then V[$1]+="$2/$3*, "; else V[$1]+="$2/$3, "; S[$1]+="$r "; fi
  R[$1]+="$r "
}
med() {
  local from=${S[$1]:-}
  [ -n "$(tr -d ' ' <<<"$from")" ] || from=${R[$1]:-}
  tr ' ' '\n' <<<"$from" | grep -v '^n/a$' | grep . | median
}
place=""

lat_round() {
  for s in 2 64 1024 4096 65536; do
    local n; n=$(it $((s == 65536 ? 5000 : 20000)))
    mark_pre
    read -r _ _ p50 avg _ <<<"$(ucx "$POSIX" -t tag_lat -s "$s" -n "$n" -w 1000)"
    read -r _ _ p99 _ <<<"$(ucx "$POSIX" -t tag_lat -s "$s" -n "$n" -w 1000 -R 99)"
    read -r _ _ _ _ typ eavg _ ep99 _ <<<"$(perf "ib_send_lat -s $s -n $n" "$s")"
    mark_post
    add "lat$s" "$typ" "$p50"; add "lat${s}_avg" "$eavg" "$avg"; add "lat${s}_p99" "$ep99" "$p99"
    echo "  lat $s B: ib_send_lat typical $typ avg $eavg p99 $ep99 us; tag_lat p50 $p50 avg $avg" \
      "p99 $p99 us (clping $pre/$post ns)" >&2
  done
}

bw_round() {
  for s in 65536 1048576; do
    local n; n=$(it $((s == 65536 ? 20000 : 2000)))
    mark_pre
    c=$(ucx "$CMA" -t put_bw -x cma -d memory -D zcopy -s "$s" -n "$n" | awk '{print $7}')
    w=$(perf "ib_write_bw -s $s -n $n" "$s" | awk '{print $4}'); mark_post; add "write$s" "$w" "$c"
    mark_pre
    c2=$(ucx "$CMA" -t put_bw -x cma -d memory -D zcopy -s "$s" -n "$n" | awk '{print $7}')
    sb=$(perf "ib_send_bw -s $s -n $n" "$s" | awk '{print $4}'); mark_post; add "send$s" "$sb" "$c2"
    mark_pre
    t=$(ucx "$POSIX" -t tag_bw -s "$s" -n "$n" | awk '{print $7}')
    sb2=$(perf "ib_send_bw -s $s -n $n" "$s" | awk '{print $4}'); mark_post
    add "sendtag$s" "$sb2" "$t"
    echo "  bw $s B: ib_write_bw $w / cma put $c; ib_send_bw $sb / cma put $c2; ib_send_bw $sb2" \
      "/ tag_bw posix $t MB/s" >&2
  done
}

rate_round() {
  local n; n=$(it 2000000)
  for op in write send; do
    mark_pre
    t=$(ucx "$POSIX" -t tag_bw -s 8 -n "$n" | awk '{printf "%.3f\n", $9 / 1e6}')
    e=$(msgrate "$op" "$n"); mark_post; add "rate_${op}_tag" "$e" "$t"
    mark_pre
    a=$(ucx "$POSIX" -t am_bw -x posix -d memory -s 8 -n "$n" | awk '{printf "%.3f\n", $9 / 1e6}')
    e2=$(msgrate "$op" "$n"); mark_post; add "rate_${op}_am" "$e2" "$a"
    echo "  rate 8 B: msgrate $op $e / tag rate $t; $e2 / am rate $a Mmsg/s" >&2
  done
}

spread_round() {
  local one="" line=""
  mark_pre
  for s in 1 64 256 1024 4096; do
    u=$(pair "$E ibv_rc_pingpong -d emu0 -s $s -n $(it 10000) -p @P" \
      "$E ibv_rc_pingpong -d emu0 -s $s -n $(it 10000) -p @P localhost" |
      awk '/iters in/ {print $(NF-1)}')
    [ "$s" = 1 ] && one=$u
    mark_post
    add "pp$s" "$u" "$one"
    line+="$s B $u; "
  done
  echo "  ibv_rc_pingpong usec/iter: $line" >&2
}

ucx_emu_round() {
  local n; n=$(it 20000)
  mark_pre
  read -r _ _ p50 avg _ <<<"$(ucx "$POSIX" -t tag_lat -s 8 -n "$n" -w 1000)"
  read -r _ _ ep50 eavg _ <<<"$(ucx "$EMU_UCX" -t tag_lat -s 8 -n "$n" -w 1000)"
  mark_post
  add ucx_lat "$ep50" "$p50"; add ucx_lat_avg "$eavg" "$avg"
  mark_pre
  t=$(ucx "$POSIX" -t tag_bw -s 65536 -n "$n" | awk '{print $7}')
  e=$(ucx "$EMU_UCX" -t tag_bw -s 65536 -n "$n" | awk '{print $7}'); mark_post; add ucx_bw "$e" "$t"
  echo "  UCX over emu0: tag_lat 8 B p50 $ep50 avg $eavg us / posix $p50 $avg us; tag_bw 64K $e" \
    "/ posix $t MB/s" >&2
}

mpi_round() {
  [ -x "$B/mpi_pingpong" ] && command -v mpirun >/dev/null || return 0
  local a e
  mark_pre
  a=$(mpi "env UCX_TLS=posix,self UCX_WARN_UNUSED_ENV_VARS=n")
  e=$(mpi "$EMU_UCX")
  mark_post
  grep -q '^PASS mpi_pingpong' <<<"$a$e" || { echo "  MPI: no PASS: $a $e" >&2; return 0; }
  # lat line: ... median X us, avg Y us, p99 Z us; bw line: ... X MB/s
  f() { awk -v k="$2" '$2 == "lat" {gsub(",", ""); for (i = 1; i < NF; ++i) if ($i == k) print $(i+1)}
        $2 == "bw" && k == "bw" {print $5}' <<<"$1"; }
  add mpi_lat "$(f "$e" median)" "$(f "$a" median)"; add mpi_lat_avg "$(f "$e" avg)" "$(f "$a" avg)"
  add mpi_lat_p99 "$(f "$e" p99)" "$(f "$a" p99)"; add mpi_bw "$(f "$e" bw)" "$(f "$a" bw)"
  echo "  MPI 8 B median $(f "$e" median) / $(f "$a" median) us, 64K $(f "$e" bw) / $(f "$a" bw) MB/s" >&2
}

for r in $(seq "$rounds"); do
  c0=$(clping)
  echo "round $r: clping ${c0} ns" >&2
  for part in ${PARTS:-lat bw rate spread ucx_emu mpi}; do
    t0=$SECONDS
    "${part}_round"
    echo "  ($part: $((SECONDS - t0)) s)" >&2
  done
  c1=$(clping)
  place+="| $r | $c0 | $c1 |"$'\n'
  echo "round $r: clping at the end ${c1} ns" >&2
done

row() {
  [ -n "${V[$2]:-}" ] || return 0  # a part PARTS left out
  local v=${V[$2]}
  echo "| $1 | ${v%, } | $(med "$2") | $3 |"
}
echo "(* a pair whose placement moved between its anchor and its emu0 figure; the ratio is the"
echo "median of the other pairs when there are any)"
echo
echo "### Latency: ib_send_lat over emu0 / UCP tag_lat posix (µs, one way)"
echo; echo "| measure | per round (emu0/anchor) | ratio | goal |"; echo "|---|---|---|---|"
for s in 2 64 1024 4096 65536; do
  g="≤ 1.2"; [ "$s" = 65536 ] && g="(information)"
  row "$s B typical / p50" "lat$s" "$g"; row "$s B average" "lat${s}_avg" "(information)"
  row "$s B p99" "lat${s}_p99" "(information)"
done
echo; echo "### Bandwidth over emu0 / UCX (MB/s)"
echo; echo "| measure | per round (emu0/anchor) | ratio | goal |"; echo "|---|---|---|---|"
for s in 65536 1048576; do
  row "ib_write_bw $s B / UCT put_bw cma zcopy" "write$s" "≥ 1.0"
  row "ib_send_bw $s B / UCT put_bw cma zcopy" "send$s" "(information)"
  row "ib_send_bw $s B / UCP tag_bw posix" "sendtag$s" "(information)"
done
echo; echo "### Message rate 8 B: bench/msgrate over emu0 / UCX posix (M msg/s)"
echo; echo "| measure | per round (emu0/anchor) | ratio | goal |"; echo "|---|---|---|---|"
row "RDMA WRITE inline / UCP tag_bw rate" rate_write_tag "≥ 1.0"
row "RDMA WRITE inline / UCT am_bw rate" rate_write_am "(information)"
row "SEND inline / UCP tag_bw rate" rate_send_tag "(information)"
row "SEND inline / UCT am_bw rate" rate_send_am "(information)"
echo; echo "### ibv_rc_pingpong over emu0: each size / 1 B of the same round (µs per iteration)"
echo; echo "| size | per round (size/1 B) | ratio (median) | worst round | goal |"
echo "|---|---|---|---|---|"
for s in 64 256 1024 4096; do
  [ -n "${V[pp$s]:-}" ] || continue  # a part PARTS left out
  worst=$(tr ' ' '\n' <<<"${R[pp$s]}" | grep . | sort -g | tail -1)
  echo "| $s B | ${V[pp$s]%, } | $(med "pp$s") | $worst | ≤ 2.0 in every round |"
done
echo; echo "### UCX and MPI over emu0 / the same over UCX posix"
echo; echo "| measure | per round (emu0/anchor) | ratio | goal |"; echo "|---|---|---|---|"
row "UCP tag_lat 8 B p50 (µs)" ucx_lat "(information)"
row "UCP tag_lat 8 B average (µs)" ucx_lat_avg "(information)"
row "UCP tag_bw 64 KiB (MB/s)" ucx_bw "(information)"
if [ -n "${V[mpi_lat]:-}" ]; then
  row "MPI ping-pong 8 B median (µs)" mpi_lat "(information)"
  row "MPI ping-pong 8 B average (µs)" mpi_lat_avg "(information)"
  row "MPI ping-pong 8 B p99 (µs)" mpi_lat_p99 "(information)"
  row "MPI streaming 64 KiB (MB/s)" mpi_bw "(information)"
fi
echo; echo "### Placement: cache-line ping-pong round trip, core 0 ↔ core 1 (ns)"
echo; echo "| round | at the start | at the end |"; echo "|---|---|---|"
printf '%s' "$place"
