#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Installs what is missing, builds, and runs the main job: emu0 listed, an unmodified
# ibv_rc_pingpong between two processes, then the headline: the seed's case (two threads sharing
# one SINGLE-mode endpoint, ucx#2464) found by the deterministic scheduler, its shrunk
# interleaving, its exact replay, and its locked counterpart clean over a fixed budget; then the
# same question asked of UCX 1.13 itself (uct-shared-single over rc_mlx5).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
run=build/bin/emu-run
race=build/bin/emu-race
echo "== ibv_devinfo on emu0"
$run ibv_devinfo -d emu0
echo "== ibv_rc_pingpong between two processes over emu0"
python3 tests/acceptance/pair.py --emu-run $run --name demo --port 18515 \
  --server "ibv_rc_pingpong -d emu0" --client "ibv_rc_pingpong -d emu0 localhost" \
  --expect "^1000 iters in"

trace=build/ucx-2464-2t.trace.json
echo "== the seed's case: two threads post through one SINGLE-mode endpoint (ucx#2464)"
echo "   random-walk search from master seed 1, at most 1000 schedules"
set +e
$run $race run ucx-2464-2t --seed 1 --budget 1000 --trace $trace | tee build/demo-race.txt
found=${PIPESTATUS[0]}
set -e
if [ "$found" != 1 ]; then
  echo "demo: the race was not found (emu-race exit $found)" >&2
  exit 1
fi
shrunk=$(sed -n 's/^shrunk: *\(s1:[^ ]*\).*/\1/p' build/demo-race.txt)
echo "== the shrunk schedule $shrunk replayed three times: the same failure, the same trace hash"
$run $race replay ucx-2464-2t --schedule "$shrunk" --times 3
echo "== its locked counterpart (SERIALIZED): 2000 random-walk schedules and every schedule"
echo "   within two preemptions"
$run $race run ucx-2464-2t-serialized --seed 1 --budget 2000
$run $race run ucx-2464-2t-serialized --strategy dfs --bound 2 --budget 200000
echo "== the failing run as a Perfetto trace (open it at https://ui.perfetto.dev): $trace"

seed=build/bin/uct-shared-single
echo "== the same question asked of UCX 1.13 itself (uct-shared-single, rc_mlx5 under the mlx5"
echo "   personality): the SERIALIZED endpoint under a lock delivers every message"
EMU_PERSONALITY=mlx5 $run $seed --tl rc_mlx5 --mode serialized --iters 2000
echo "== and the SINGLE one shared by two threads fails (UCX's own assertion, or the device's"
echo "   race log, or a payload check)"
set +e
EMU_PERSONALITY=mlx5 EMU_RACE_LOG=1 $run $seed --tl rc_mlx5 --mode single --iters 2000 \
  > build/demo-seed.txt 2>&1
single=$?
set -e
grep -E "Assertion|^RACE|^FAIL|rdmaemu race" build/demo-seed.txt | head -3
if [ "$single" = 0 ]; then
  echo "demo: the shared SINGLE endpoint did not fail" >&2
  exit 1
fi
