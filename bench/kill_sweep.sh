#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark-length SIGKILL sweep (not a test; docs/design/reliability.md, "Process death"):
# ibv_rc_pingpong
# and rping pairs each with one side killed at an EMU_KILL_AT point drawn from the seed, then the
# XRC three-process scenario (XrcKill.RandomKills), reporting kills, misses, hangs, objects owned
# by the dead and leaked heap blocks. Every process is bounded by a deadline; each pair has a
# fabric of its own, removed afterwards.
# Usage: bench/kill_sweep.sh [pair_kills=800] [xrc_iterations=150] [seed=1616]
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout 7200 python3 tests/acceptance/kill_sweep.py --emu-run build/bin/emu-run \
  --emu-ctl build/bin/emu-ctl --kills "${1:-800}" --xrc-iterations "${2:-150}" --seed "${3:-1616}" \
  --max-n 300 --xrc-test build/tests/verbs/emu_xrc_tests
