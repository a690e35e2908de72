# SPDX-License-Identifier: BSD-2-Clause
# shellcheck shell=bash
# Helpers the benchmark scripts share (sourced, not run): a server/client pair pinned to cores 0
# and 1, started on a condition (the server's TCP port listening), and the statistics of a run.

# wait_listen PORT: until a TCP listener is on PORT (a condition; bounded)
wait_listen() {
  for _ in $(seq 1000); do
    grep -q ":$(printf %04X "$1") 00000000:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# pair SERVERCMD CLIENTCMD [CLIENT_CPUS] -> client output on stdout; @P in a command is the port
# (a fresh one per pair, counting up from $port)
pair() {
  port=$((port + 1))
  local s=${1//@P/$port} c=${2//@P/$port}
  # shellcheck disable=SC2086  # $s and $c: commands with their arguments
  taskset -c 0 $s >/dev/null 2>&1 &
  local sp=$!
  wait_listen "$port"
  # shellcheck disable=SC2086  # (as above)
  taskset -c "${3:-1}" $c 2>&1
  wait "$sp" || true
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.2f", a / b; else print "n/a" }'; }
