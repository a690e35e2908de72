#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Line budgets of the documents a newcomer reads first (ctest unit.doc_budgets).

docs/architecture.md is the overview and docs/perf.md the method and the current figures; detail
belongs in docs/design/ and dated runs in bench/results/. Exit 1 naming each file over its budget.

Usage: check_doc_budgets.py [REPO_ROOT]   (default: the repository this file is in)
"""
import pathlib
import sys

BUDGETS = {"docs/architecture.md": 400, "docs/perf.md": 300}


def main():
    root = (pathlib.Path(sys.argv[1]) if len(sys.argv) > 1
            else pathlib.Path(__file__).resolve().parents[2])
    failed = False
    for rel, budget in BUDGETS.items():
        path = root / rel
        if not path.exists():
            print(f"check_doc_budgets: {rel} is missing")
            failed = True
            continue
        lines = len(path.read_text().splitlines())
        if lines > budget:
            print(f"check_doc_budgets: {rel} has {lines} lines, over its budget of {budget} "
                  "(move detail into docs/design/ or bench/results/)")
            failed = True
        else:
            print(f"check_doc_budgets: {rel} {lines} of {budget} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
