#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The tools' one command-line convention (emu/include/emu/cli.h): each tool's --help prints its
# usage and exits 0; a bad value, a missing argument or an unknown command is named on stderr,
# after the tool's name, and exits 2 before the tool does anything.
# Usage: tool_command_lines.sh BIN_DIR   (build/bin: the tools and the bench programs)
set -euo pipefail
bin=$1
failed=0
# expect STATUS STDERR_TEXT TOOL ARGS...: TOOL exits STATUS and its stderr holds STDERR_TEXT.
expect() {
  local want=$1 text=$2 tool=$3 out err status=0
  shift 3
  out=$(mktemp) err=$(mktemp)
  env -u EMU_SCHEDULE "$bin/$tool" "$@" >"$out" 2>"$err" || status=$?
  if [ "$status" != "$want" ] || { [ -n "$text" ] && ! grep -qF -- "$text" "$err"; }; then
    echo "FAIL $tool $*: exit $status (want $want), stderr: $(cat "$err")"
    failed=1
  else
    echo "ok   $tool $*: $want, $text"
  fi
  if [ "$want" = 0 ] && ! grep -q "^Usage: $tool" "$out"; then
    echo "FAIL $tool $*: no usage on stdout"
    failed=1
  fi
  rm -f "$out" "$err"
}
for tool in emu-run emu-ctl emu-race emu-shrink emu-stress emu-scale msgrate clping regcost; do
  expect 0 "" "$tool" --help
done
expect 0 "" emu-ctl port --help
expect 2 "emu-ctl: bogus is not a command (port, timers," emu-ctl bogus
expect 2 "emu-ctl: PORT: 0 is not in 1..255" emu-ctl port emu0 0
expect 2 "emu-ctl: STATE: sideways not in {down,up}" emu-ctl port emu0 1 sideways
expect 2 "emu-ctl: TYPE: unknown event nope" emu-ctl inject event nope 1
expect 2 "emu-race: --budget: abc is not a whole number" emu-race run ucx-2464-2t --budget abc
expect 2 "emu-race: scenario: no scenario nosuch (emu-race list)" emu-race run nosuch
expect 2 "emu-race: --strategy: bfs is not random, pct, dfs or delays" \
  emu-race run ucx-2464-2t --strategy bfs
expect 2 "emu-race: --schedule is required" emu-race replay ucx-2464-2t
expect 2 "emu-stress: --threads: 0 is not in 1..255" emu-stress --threads 0
expect 2 "emu-stress: --count excludes --duration-ms" emu-stress --count 5 --duration-ms 3
expect 2 "emu-stress: --stores: applies to --api direct only" emu-stress --stores plain
expect 2 "emu-shrink: COMMAND is required" emu-shrink --budget 5
expect 2 "emu-shrink: --budget: 0 is not in >=1" emu-shrink --budget 0 true
expect 2 "emu-run: COMMAND is required" emu-run
expect 2 "emu-scale: LIVE: x is not a count or max" emu-scale 2 10,x 5 5
expect 2 "msgrate: --batch: 0 is not in 1..1024" msgrate -b 0
expect 2 "clping: -n: x is not a whole number" clping -n x
expect 2 "regcost: -s: -5 is not a whole number" regcost -s -5
exit $failed
