#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs a gtest binary on the tests its --gtest_filter names and passes only if exactly those ran
and passed: a filter that matches nothing (a test renamed) passes with "0 tests" in gtest 1.12,
which has no --gtest_fail_if_no_test_selected.

  gtest_exact.py CMD... --gtest_filter=Suite.Test[:Suite.Test...] [more arguments]

The filter must name tests (no wildcard, no negative part). Exit 0 iff CMD exits 0 and gtest says
that N tests ran and N passed, N the number of names; otherwise 1, with what differs.
"""
import re
import subprocess
import sys


def main():
    cmd = sys.argv[1:]
    filters = [a.split("=", 1)[1] for a in cmd if a.startswith("--gtest_filter=")]
    if len(filters) != 1 or re.search(r"[*?-]", filters[0]):
        sys.exit(f"gtest_exact.py: one --gtest_filter of test names expected in {cmd}")
    n = len(filters[0].split(":"))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in p.stdout:  # printed as it comes: these tests run for minutes
        sys.stdout.write(line)
        sys.stdout.flush()
        out.append(line)
    rc = p.wait()
    text = "".join(out)
    tests = "test" if n == 1 else "tests"
    ran = re.search(rf"^\[==========\] {n} {tests} from \d+ test suites? ran\.", text, re.M)
    passed = re.search(rf"^\[  PASSED  \] {n} {tests}\.$", text, re.M)
    if rc != 0 or not ran or not passed:
        print(f"FAIL: exit {rc}; expected {n} {tests} run and passed ({filters[0]}): "
              f"{'ran' if ran else 'not that many ran'}, "
              f"{'passed' if passed else 'not that many passed'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
