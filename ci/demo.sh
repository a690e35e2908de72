#!/bin/bash
# Installs what is missing, builds, and runs the main job: ibv_devinfo on emu0 and an unmodified
# ibv_rc_pingpong between two processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
echo "== ibv_devinfo on emu0"
build/bin/emu-run ibv_devinfo -d emu0
echo "== ibv_rc_pingpong between two processes over emu0"
python3 tests/acceptance/pair.py --emu-run build/bin/emu-run --name demo --port 18515 \
  --server "ibv_rc_pingpong -d emu0" --client "ibv_rc_pingpong -d emu0 localhost" \
  --expect "^1000 iters in"
