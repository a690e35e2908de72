#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""emu-race's acceptance (issue 12), one check per ctest test; fixed seeds and budgets, no timing.

  buggy NAME SEED BUDGET SIG[,SIG..] [MAX_PREEMPTIONS]
      a campaign finds a failure with one of the signatures; its replay in another process gives
      the failing run's trace hash 100 times of 100; the shrunk schedule fails with the same
      signature (with at most MAX_PREEMPTIONS preemptions when given); the trace JSON parses with
      one track per actor (threads plus the device)
  fixed NAME BUDGET SEARCH:BOUND[,SEARCH:BOUND..]
      the counterpart passes BUDGET random and BUDGET PCT schedules (emu-race ran BUDGET of each,
      as it reports) and each bounded exhaustive search to its end (dfs: preemption bound;
      delays: delay bound, for many actors)
  searched NAME SEARCH:BOUND SIG[,SIG..]
      the bounded exhaustive search finds the buggy scenario's failure, with one of the signatures
      given: its `buggy` test's, one more where tests/race/CMakeLists.txt says why (a deadlock
      or another failure is not the bug)
  shards NAME SEED BUDGET
      shards 1, 2 and 4 of one campaign merge to identical totals
"""
import json
import os
import subprocess
import sys
import tempfile


def race(args, ok=(0, 1)):
    p = subprocess.run([EMU_RUN, EMU_RACE] + args, capture_output=True, text=True)
    if p.returncode not in ok:
        sys.exit(f"emu-race {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def run_json(args):
    return json.loads(race(["run"] + args + ["--json"]).strip().splitlines()[-1])


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def buggy(name, seed, budget, sigs, max_preemptions=None):
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "t.json")
        r = run_json([name, "--seed", seed, "--budget", budget, "--trace", trace])
        check(r["failed"], f"{name} fails within {budget} schedules of seed {seed} ({r['schedules']})")
        check(r["signature"] in sigs.split(","), f"signature {r['signature']} expected")
        out = race(["replay", name, "--schedule", r["schedule"], "--times", "100"], ok=(0,))
        hashes = [l.split()[-1] for l in out.splitlines() if l.startswith("replay ")]
        check(len(hashes) == 100 and set(hashes) == {r["trace_hash"]},
              "replay in another process: the same trace hash 100 times of 100")
        check(all(r["signature"] in l for l in out.splitlines() if l.startswith("replay ")),
              "every replay fails with the same signature")
        check(r["shrunk_signature"] == r["signature"], "the shrunk schedule fails the same way")
        if max_preemptions is not None:
            check(r["shrunk_preemptions"] <= int(max_preemptions),
                  f"shrunk to {r['shrunk_preemptions']} <= {max_preemptions} preemptions")
        with open(trace) as f:
            t = json.load(f)
        tracks = {e["tid"] for e in t["traceEvents"] if e.get("name") == "thread_name"}
        names = {e["args"]["name"] for e in t["traceEvents"] if e.get("name") == "thread_name"}
        check("device" in names and len(tracks) == len(names) >= 2,
              f"trace JSON parses: tracks {sorted(names)}")


def bounded(name, spec):
    search, bound = spec.split(":")
    return run_json([name, "--strategy", search, "--bound", bound, "--budget", "200000"])


def fixed(name, budget, specs):
    r = run_json([name, "--budget", budget, "--seed", "1"])
    check(not r["failed"] and r["schedules"] == int(budget),
          f"{name} passes {r['schedules']} random schedules of {budget} asked")
    r = run_json([name, "--strategy", "pct", "--budget", budget, "--seed", "2"])
    check(not r["failed"] and r["schedules"] == int(budget),
          f"{name} passes {r['schedules']} PCT schedules of {budget} asked")
    for spec in specs.split(","):
        r = bounded(name, spec)
        check(not r["failed"] and r["exhausted"] and r["schedules"] > 0,
              f"{name}: no failure within {spec} ({r['schedules']} schedules, exhausted)")


def searched(name, spec, sigs):
    r = bounded(name, spec)
    check(r["failed"], f"{name}: {spec} finds a failure at schedule {r['schedules']}")
    check(r["signature"] in sigs.split(","), f"signature {r['signature']} in {sigs}")


def shards(name, seed, budget):
    totals = {}
    with tempfile.TemporaryDirectory() as d:
        for n in (1, 2, 4):
            files = []
            for i in range(n):
                path = os.path.join(d, f"{n}-{i}.json")
                out = race(["run", name, "--seed", seed, "--budget", budget, "--keep-going",
                            "--no-shrink", "--json", "--shard", f"{i}/{n}"])
                with open(path, "w") as f:
                    f.write(out.strip().splitlines()[-1] + "\n")
                files.append(path)
            totals[n] = race(["merge"] + files, ok=(0,)).strip()
    check(totals[1] == totals[2] == totals[4], f"shards 1, 2, 4 merge to {totals[1]}")
    check(json.loads(totals[1])["failures"] > 0, "the campaign has failures to count")


if __name__ == "__main__":
    EMU_RUN, EMU_RACE, what = sys.argv[1], sys.argv[2], sys.argv[3]
    # Every emu-race process of this test shares the fabric ctest names; its segment file goes
    # with the test, pass or fail.
    seg = os.path.join(os.environ.get("EMU_SHM_DIR", "/dev/shm"),
                       f"rdmaemu-{os.getuid()}-{os.environ.get('EMU_FABRIC', 'default')}")
    try:
        {"buggy": buggy, "fixed": fixed, "searched": searched, "shards": shards}[what](*sys.argv[4:])
    finally:
        if os.path.exists(seg):
            os.unlink(seg)
