#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Benchmark (not a test): create+destroy cost per object (PD, CQ, MR, QP) as a function of live
# objects and of attached processes, and attach/detach cost with 1..64 processes attached. Each
# round runs build/bin/emu-scale (bench/scale_tool.cpp, verbs only) once per process count, the
# counts alternating within the round; the table has medians of per-round ratios:
#   per-object cost at N live / at the first LIVE figure (same run), and
#   cost with P processes / with the first P (same round).
# Usage: bench/scale.sh [rounds=5] [procs=1,8,64] [live=100,1000,max] [pairs=200] [attaches=20]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
procs=${2:-1,8,64}
live=${3:-100,1000,max}
pairs=${4:-200}
attaches=${5:-20}
B=build/bin
export EMU_SHM_DIR=${EMU_SHM_DIR:-/dev/shm}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for r in $(seq "$rounds"); do
  for p in ${procs//,/ }; do
    EMU_FABRIC=scale-bench-$$-$r-$p timeout 900 "$B/emu-run" "$B/emu-scale" "$p" "$live" \
      "$pairs" "$attaches" | sed "s/^/$r $p /" >>"$out"
  done
done

# Lines: ROUND PROCS WHAT KIND LIVE NS
python3 - "$out" "$procs" "$live" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
procs = sys.argv[2].split(",")
lives = sys.argv[3].split(",")
ns = {(r, p, w, k, l): int(v) for r, p, w, k, l, v in rows}
rounds = sorted({r for r, *_ in rows}, key=int)
def med(f):
    v = [x for x in (f(r) for r in rounds) if x is not None]
    return statistics.median(v) if v else float("nan")
def get(r, p, w, k, l):
    return ns.get((r, p, w, k, l))
def ratio(a, b):
    return a / b if a is not None and b else None
print("create+destroy: median ns per pair (first round's median of the pairs) and cost ratios")
print("| kind | procs | " + " | ".join(f"ns at {l}" for l in lives) + " | " +
      " | ".join(f"{l}/{lives[0]}" for l in lives[1:]) + f" | at {lives[0]}: {{P}}/{procs[0]} |")
for k in ("pd", "cq", "mr", "qp"):
    for p in procs:
        cells = [str(int(med(lambda r: get(r, p, "create_destroy", k, l)))) for l in lives]
        rat = [f"{med(lambda r: ratio(get(r, p, 'create_destroy', k, l), get(r, p, 'create_destroy', k, lives[0]))):.2f}"
               for l in lives[1:]]
        pr = med(lambda r: ratio(get(r, p, "create_destroy", k, lives[0]),
                                 get(r, procs[0], "create_destroy", k, lives[0])))
        print(f"| {k} | {p} | " + " | ".join(cells) + " | " + " | ".join(rat) + f" | {pr:.2f} |")
print()
print("attach/detach with P processes attached: median ns, ratio to P=" + procs[0])
print("| what | " + " | ".join(f"P={p}" for p in procs) + " | " +
      " | ".join(f"{p}/{procs[0]}" for p in procs[1:]) + " |")
for w in ("attach", "detach"):
    cells = [str(int(med(lambda r: get(r, p, w, "-", "-")))) for p in procs]
    rat = [f"{med(lambda r: ratio(get(r, p, w, '-', '-'), get(r, procs[0], w, '-', '-'))):.2f}"
           for p in procs[1:]]
    print(f"| {w} | " + " | ".join(cells) + " | " + " | ".join(rat) + " |")
EOF
