#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The pyverbs suite's comparison with its expected results (tools/pyverbs-suite.py --expect), on
results made up from the expected file, so that it costs no run of the suite:

  pyverbs_expect.py TOOL EXPECTED_JSON

- results equal to a set compare clean (exit 0);
- one pass become a skip (a verb refused), one skip become a pass (a verb implemented), a skip
  for another reason, a test gone from the suite and a test new to it each fail the comparison
  (exit 1), naming the test and giving the command that rewrites the set;
- classify(): unittest's OK with a non-zero exit code is not a pass, nor a skip.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

TOOL, EXPECTED = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def results_of(entries):
    out = []
    for test, entry in entries.items():
        kind, _, reason = entry.partition(": ")
        out.append({"test": test, "result": kind, "reason": reason})
    return out


def compare(d, set_name, results, expected_sets):
    rpath, epath = os.path.join(d, "results.json"), os.path.join(d, "expected.json")
    with open(rpath, "w") as f:
        json.dump(results, f)
    with open(epath, "w") as f:
        json.dump(expected_sets, f)
    p = subprocess.run([sys.executable, TOOL, "--results", rpath, "--expect", epath,
                        "--expect-set", set_name], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    with open(EXPECTED) as f:
        sets = json.load(f)
    check(set(sets) == {"ib", "eth"}, f"the expected file has the sets ib and eth: {sorted(sets)}")
    with tempfile.TemporaryDirectory() as d:
        for name, entries in sorted(sets.items()):
            passes = sorted(t for t, e in entries.items() if e == "pass")
            skips = sorted(t for t, e in entries.items() if e.startswith("skip: "))
            check(passes and skips, f"set {name}: {len(passes)} passes, {len(skips)} skips")
            if not (passes and skips):
                continue
            rc, out = compare(d, name, results_of(entries), sets)
            check(rc == 0 and "every result as set" in out,
                  f"set {name}: results equal to the set compare clean (exit {rc})")
            cases = {
                "a pass become a skip": ({passes[0]: "skip: Device does not support it"},
                                         f"{passes[0]}: expected pass, got skip"),
                "a skip become a pass": ({skips[0]: "pass"}, f"{skips[0]}: expected skip"),
                "a skip for another reason": ({skips[0]: "skip: another reason"},
                                              "got skip: another reason"),
                "a fail": ({passes[-1]: "fail: AssertionError"}, "got fail"),
            }
            for what, (change, says) in cases.items():
                rc, out = compare(d, name, results_of(dict(entries, **change)), sets)
                check(rc == 1 and says in out and "--update-expect" in out,
                      f"set {name}: {what} fails the comparison (exit {rc}), names the test and "
                      "gives the command that rewrites the set")
            gone = results_of({t: e for t, e in entries.items() if t != passes[0]})
            rc, out = compare(d, name, gone, sets)
            check(rc == 1 and "the suite has no such test" in out,
                  f"set {name}: a test gone from the suite fails the comparison (exit {rc})")
            new = results_of(dict(entries, **{"test_new.NewTest.test_new": "pass"}))
            rc, out = compare(d, name, new, sets)
            check(rc == 1 and "the expected set has no such test" in out,
                  f"set {name}: a test new to the suite fails the comparison (exit {rc})")
    spec = importlib.util.spec_from_file_location("pyverbs_suite", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    ran = "Ran 1 test in 0.1s\n\n"
    check(tool.classify(0, ran + "OK\n")[0] == "pass", "OK and exit 0: a pass")
    check(tool.classify(1, ran + "OK\n")[0] == "fail", "OK and exit 1: a fail, not a pass")
    check(tool.classify(0, "skipped 'no ODP'\n" + ran + "OK (skipped=1)\n") == ("skip", "no ODP"),
          "OK (skipped=1) and exit 0: a skip with its reason")
    check(tool.classify(0, "... skipped \"emu0 doesn't\"\n" + ran + "OK (skipped=1)\n") ==
          ("skip", "emu0 doesn't"), "a reason with a single quote, which unittest double-quotes")
    check(tool.classify(3, ran + "OK (skipped=1)\n")[0] == "fail",
          "OK (skipped=1) and exit 3: a fail, not a skip")
    print("FAIL" if failures else "PASS", "pyverbs_expect")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
