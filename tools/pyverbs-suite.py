#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""rdma-core's own pyverbs suite against an emu device, one test per process.

  tools/pyverbs-suite.py EMU_RUN [--dev emu0] [-j 2] [--match SUBSTR] [--json FILE]
                        [--require-pass N] [--forbid fail,error,crash,timeout]
                        [--expect FILE --expect-set SET [--update-expect] [--results FILE]]

Debian's python3-pyverbs ships the suite under /usr/share/doc/rdma-core/tests (some files gzipped);
it is copied to a temporary directory, unpacked, listed, and each non-vendor test (not mlx5 or efa)
is run by Debian's /usr/bin/python3 under emu-run with its own fabric, so that one crash costs one
test. Prints a per-file table (pass, fail, error, skip, crash, timeout) and every non-pass with its
reason; --json writes the same per test. A pass is unittest's "OK" and exit code 0; "OK" with
another exit code is a fail. Exit 0 unless a check was asked for and fails: --require-pass N (at
least N passes), --forbid KINDS (none of these results), and --expect FILE --expect-set SET: every
test's result the one the set of FILE records (tools/pyverbs-expected.json: "ib" for emu0 on
InfiniBand, "eth" for EMU_LINK_LAYER=eth), a skip with its reason. Any difference fails: a pass
become a skip as much as a skip become a pass, a test new to the suite or gone from it; the output
then gives the command that rewrites the set from a run (--update-expect), for a change meant.
--match SUBSTR compares only the tests it selects. --results FILE (a --json output) compares that
file instead of running the suite (the comparison's own test, tests/conformance).
"""
import argparse
import concurrent.futures
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict

SUITE = "/usr/share/doc/rdma-core/tests"
PYTHON = "/usr/bin/python3"  # the interpreter python3-pyverbs is installed for
VENDOR = re.compile(r"mlx5|efa", re.IGNORECASE)


def unpack(dest):
    tests = os.path.join(dest, "tests")
    shutil.copytree(SUITE, tests)
    for name in os.listdir(tests):
        if name.endswith(".gz"):
            src = os.path.join(tests, name)
            with gzip.open(src, "rb") as f, open(src[:-3], "wb") as out:
                out.write(f.read())
            os.unlink(src)
    return tests


def list_tests(tests):
    out = subprocess.run([PYTHON, "run_tests.py", "--list-tests"], cwd=tests, capture_output=True,
                         text=True, check=True).stdout
    names = [l.strip() for l in out.splitlines() if l.startswith("tests.")]
    return [n[len("tests."):] for n in names if not VENDOR.search(n)]


def classify(proc_rc, text):
    if proc_rc is None:
        return "timeout", ""
    if proc_rc < 0:
        return "crash", signal.Signals(-proc_rc).name
    ok = re.search(r"^OK( \(skipped=1\))?$", text, re.M)
    if ok and proc_rc != 0:
        # unittest was content, the process was not (an emu-run or provider error at exit, a
        # player's exception): not a pass.
        return "fail", f"exit {proc_rc} after unittest's {ok.group(0)}"
    if ok and ok.group(1):
        # unittest prints the reason's repr: in double quotes when it holds a single quote.
        m = re.search(r"skipped (['\"])(.*)\1$", text, re.M)
        return "skip", m.group(2) if m else ""
    if ok:
        return "pass", ""
    lines = [l for l in text.splitlines() if l.strip()]
    why = next((l for l in reversed(lines) if re.match(r"[\w.]*(Error|Exception)\b", l)), "")
    kind = "error" if re.search(r"^FAILED \(.*errors=", text, re.M) else "fail"
    return kind, why or (lines[-1] if lines else "")


def run_one(emu_run, tests, dev, name, index, timeout):
    env = dict(os.environ, EMU_FABRIC=f"pyverbs-{os.getpid()}-{index}")
    cmd = [emu_run, PYTHON, "run_tests.py", "--dev", dev, "-v", name]
    try:
        p = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True,
                           timeout=timeout, start_new_session=True)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        rc, text = None, ""
    finally:
        shm = env.get("EMU_SHM_DIR", "/dev/shm")
        seg = os.path.join(shm, f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
        if os.path.exists(seg):
            os.unlink(seg)
    kind, why = classify(rc, text)
    out = {"test": name, "result": kind, "reason": why.strip()[:160]}
    if kind != "pass":
        out["tail"] = "\n".join(text.splitlines()[-40:])
    return out


def expected_entry(r):
    """What the expected file records of a result: the kind, and a skip's reason with it (a skip
    for another reason is another result)."""
    return f"skip: {r['reason']}" if r["result"] == "skip" else r["result"]


def regenerate_command():
    cmd = shlex.join([sys.argv[0]] + [x for x in sys.argv[1:] if x != "--update-expect"] +
                     ["--update-expect"])
    layer = os.environ.get("EMU_LINK_LAYER")
    return f"EMU_LINK_LAYER={shlex.quote(layer)} {cmd}" if layer else cmd


def compare_expected(results, expected, match):
    """Every difference between this run and the expected set (only the tests --match selects),
    one line each; empty when they agree."""
    got = {r["test"]: expected_entry(r) for r in results}
    want = {t: e for t, e in expected.items() if match in t}
    diffs = []
    for t in sorted(set(got) | set(want)):
        if t not in want:
            diffs.append(f"{t}: {got[t]}, and the expected set has no such test")
        elif t not in got:
            diffs.append(f"{t}: expected {want[t]}, and the suite has no such test")
        elif got[t] != want[t]:
            diffs.append(f"{t}: expected {want[t]}, got {got[t]}")
    return diffs


def update_expected(path, name, results, match):
    try:
        with open(path) as f:
            sets = json.load(f)
    except FileNotFoundError:
        sets = {}
    mine = sets.get(name, {}) if match else {}
    mine = {t: e for t, e in mine.items() if match not in t}
    mine.update({r["test"]: expected_entry(r) for r in results})
    sets[name] = dict(sorted(mine.items()))
    with open(path, "w") as f:
        json.dump(sets, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(mine)} expected results of set '{name}' to {path}")


def run_suite(a):
    with tempfile.TemporaryDirectory() as d:
        tests = unpack(d)
        names = [n for n in list_tests(tests) if a.match in n]
        with concurrent.futures.ThreadPoolExecutor(a.j) as pool:
            return list(pool.map(
                lambda x: run_one(a.emu_run, tests, a.dev, x[1], x[0], a.timeout),
                enumerate(names)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("emu_run", nargs="?", help="build/bin/emu-run (not with --results)")
    ap.add_argument("--dev", default="emu0")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--match", default="")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--json")
    ap.add_argument("--require-pass", type=int, default=0)
    ap.add_argument("--forbid", default="")
    ap.add_argument("--expect", help="the expected results (JSON: set name -> test -> result)")
    ap.add_argument("--expect-set", help="the set of --expect this run is compared with")
    ap.add_argument("--update-expect", action="store_true",
                    help="write this run's results as the set instead of comparing")
    ap.add_argument("--results", help="a --json output to compare, instead of running the suite")
    a = ap.parse_args()
    if bool(a.expect) != bool(a.expect_set):
        ap.error("--expect and --expect-set go together")
    if (a.update_expect or a.results) and not a.expect:
        ap.error("--update-expect and --results need --expect and --expect-set")
    if not a.emu_run and not a.results:
        ap.error("EMU_RUN is needed to run the suite")
    if a.results:
        with open(a.results) as f:
            results = [r for r in json.load(f) if a.match in r["test"]]
    else:
        a.emu_run = os.path.abspath(a.emu_run)
        results = run_suite(a)
    per_file = defaultdict(Counter)
    for r in results:
        per_file[r["test"].split(".")[0]][r["result"]] += 1
    kinds = ["pass", "fail", "error", "skip", "crash", "timeout"]
    print("| file | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for f in sorted(per_file):
        print(f"| {f} | " + " | ".join(str(per_file[f][k]) for k in kinds) + " |")
    total = Counter(r["result"] for r in results)
    print(f"| total ({len(results)}) | " + " | ".join(str(total[k]) for k in kinds) + " |")
    for r in results:
        if r["result"] != "pass":
            print(f"{r['result']:8} {r['test']}: {r['reason']}")
            if r["result"] not in ("pass", "skip") and r.get("tail"):
                print("  its last lines:\n    " + r["tail"].replace("\n", "\n    "))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    diffs = []
    if a.update_expect:
        update_expected(a.expect, a.expect_set, results, a.match)
    elif a.expect:
        with open(a.expect) as f:
            sets = json.load(f)
        if a.expect_set not in sets:
            ap.error(f"{a.expect} has no set '{a.expect_set}' (it has {', '.join(sorted(sets))})")
        diffs = compare_expected(results, sets[a.expect_set], a.match)
        for d in diffs:
            print("DIFFERS  " + d)
        if diffs:
            print(f"{len(diffs)} results differ from set '{a.expect_set}' of {a.expect}. If the "
                  f"change is meant (a verb implemented, a test added), rewrite the set from a "
                  f"run and commit it:\n  {regenerate_command()}")
        else:
            print(f"every result as set '{a.expect_set}' of {a.expect} expects")
    bad = [k for k in a.forbid.split(",") if k and total[k]]
    if bad or diffs or total["pass"] < a.require_pass:
        print(f"FAIL: {total['pass']} passed (at least {a.require_pass} required); "
              f"forbidden results: {', '.join(f'{k} {total[k]}' for k in bad) or 'none'}; "
              f"differences from the expected: {len(diffs)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
