# SPDX-License-Identifier: BSD-2-Clause
"""Comparable runs (docs/guides/pyharness.md): a run directory holds one JSON file per scenario, its
stream of records in order (per step: the player, the step and its errno; per completion: status
and immediate; the census after each step, with processes named by role). `python -m
rdmaemu.compare RUN_A RUN_B` prints every scenario whose streams differ, with the first record
where they part, and exits 1 if any does."""
import json
import os
import sys
from typing import Dict, List


def write_stream(run_dir: str, scenario: str, records: List[dict]) -> None:
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, scenario + ".json"), "w") as f:
        json.dump({"scenario": scenario, "records": records}, f, indent=0, sort_keys=True)


def load(run_dir: str) -> Dict[str, List[dict]]:
    out = {}
    for name in sorted(os.listdir(run_dir)):
        if name.endswith(".json"):
            with open(os.path.join(run_dir, name)) as f:
                d = json.load(f)
            out[d["scenario"]] = d["records"]
    return out


def differences(a: Dict[str, List[dict]], b: Dict[str, List[dict]]) -> Dict[str, str]:
    """Scenario -> how its streams differ, for every scenario whose streams are not equal."""
    diff = {}
    for s in sorted(set(a) | set(b)):
        if s not in a or s not in b:
            diff[s] = "only in " + ("A" if s in a else "B")
            continue
        ra, rb = a[s], b[s]
        at = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), None)
        if at is not None:
            diff[s] = f"record {at}: A {json.dumps(ra[at], sort_keys=True)} B {json.dumps(rb[at], sort_keys=True)}"
        elif len(ra) != len(rb):
            diff[s] = f"A has {len(ra)} records, B {len(rb)}"
    return diff


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m rdmaemu.compare RUN_A RUN_B", file=sys.stderr)
        return 2
    a, b = load(argv[0]), load(argv[1])
    diff = differences(a, b)
    for s, how in diff.items():
        print(f"{s}: {how}")
    print(f"{len(diff)} of {len(set(a) | set(b))} scenarios differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
