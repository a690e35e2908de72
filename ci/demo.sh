#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Installs what is missing, builds, and runs the main job: emu0 listed, an unmodified
# ibv_rc_pingpong between two processes, then the headline: the seed's case (two threads sharing
# one SINGLE-mode endpoint, ucx#2464) found by the deterministic scheduler, its shrunk
# interleaving, its exact replay, and its locked counterpart clean over a fixed budget; then the
# same question asked of UCX 1.13 itself (uct-shared-single over rc_mlx5) under the scheduler:
# found by a fixed seed, replayed to the same trace hash, its locked form clean.
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
# One scheduled run of UCX in a fabric of its own, removed after it (a run stopped by its failure
# leaves its segment, and a replay is exact from a fresh fabric): ucx FABRIC VAR=VALUE... COMMAND.
ucx() {
  local fabric=$1 rc=0
  shift
  env EMU_FABRIC="$fabric" EMU_PERSONALITY=mlx5 UCX_WARN_UNUSED_ENV_VARS=n "$@" || rc=$?
  build/bin/emu-ctl rm "$fabric" --force >/dev/null 2>&1 || true
  return $rc
}
# The lines of a scheduled run worth reading: its verdict (schedules cut), the trace hash, UCX's.
verdict() { grep -E "^emu-sched: [a-z0-9:=,]+: |trace hash|^PASS|^FAIL" "$1" | cut -c1-110; }
echo "== the same question asked of UCX 1.13 itself: uct-shared-single (UCX's rc_mlx5 under the"
echo "   mlx5 personality), run unmodified under the scheduler (random walk, seed 8)"
set +e
ucx demo-seed EMU_SCHEDULE=random:seed=8 EMU_SCHEDULE_TRACE=build/uct-shared-single.trace.json \
  $run $seed --tl rc_mlx5 --mode single --iters 200 >build/demo-seed.txt 2>&1
single=$?
set -e
verdict build/demo-seed.txt
echo "   the stores that tore the BlueFlame WQE, as the scheduler saw UCX make them:"
grep -E "mmio store .* by uct_" build/demo-seed.txt | tail -3
replay=$(sed -n 's/^emu-sched: replay: EMU_SCHEDULE=\(replay:[^ ]*\) .*/\1/p' build/demo-seed.txt)
if [ "$single" = 0 ] || ! grep -q "failed (race bf_torn)" build/demo-seed.txt || [ -z "$replay" ]
then
  echo "demo: the shared SINGLE endpoint did not fail with a torn BlueFlame WQE" >&2
  exit 1
fi
echo "== that schedule replayed in a new process: the same failure, the same trace hash"
set +e
ucx demo-seed-replay EMU_SCHEDULE="$replay" $run $seed --tl rc_mlx5 --mode single --iters 200 \
  >build/demo-seed-replay.txt 2>&1
set -e
verdict build/demo-seed-replay.txt
hash_of() { sed -n 's/.*trace hash \(0x[0-9a-f]*\).*/\1/p' "$1" | tail -1; }
if [ "$(hash_of build/demo-seed.txt)" != "$(hash_of build/demo-seed-replay.txt)" ]; then
  echo "demo: the replay's trace hash differs" >&2
  exit 1
fi
echo "== (the failing run as a Perfetto trace: build/uct-shared-single.trace.json)"
echo "== the SERIALIZED endpoint under the program's lock: random-walk seeds 1 to 5, every"
echo "   message checked"
for s in 1 2 3 4 5; do
  ucx demo-seed-serialized EMU_SCHEDULE=random:seed=$s \
    $run $seed --tl rc_mlx5 --mode serialized --iters 200 \
    >build/demo-seed-serialized.txt 2>&1 || { verdict build/demo-seed-serialized.txt; exit 1; }
  echo "   seed $s: $(grep -oE 'ok after [0-9]+ steps' build/demo-seed-serialized.txt);" \
    "$(grep -E '^PASS' build/demo-seed-serialized.txt)"
done
