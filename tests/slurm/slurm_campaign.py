#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The Slurm campaign test (issue 16 item 8): one emu-race campaign run three ways — all its
seeds in one process, three shards here, three tasks of a Slurm job array with the merge job
after them on a one-node cluster this test starts and stops — merges to the same totals; and a
campaign whose shards fail leaves no totals (the merge job is cancelled, not left pending).

  slurm_campaign.py EMU_RUN EMU_RACE CAMPAIGN_PY
"""
import json
import os
import subprocess
import sys
import tempfile

from one_node import OneNodeSlurm

CAMPAIGN = ["ucx-2464-2t", "--strategy", "pct", "--seed", "7", "--budget", "300"]
SHARDS = "3"
WAIT = 900  # seconds, a bound on one campaign (a hang), never an assertion about speed


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what, flush=True)


def campaign(mode, d, shards, env=None, run=CAMPAIGN, *extra):
    cmd = [sys.executable, CAMPAIGN_PY, mode, "--shards", shards, "--dir", d, "--emu-run", EMU_RUN,
           "--emu-race", EMU_RACE, *extra, "--", *run]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=WAIT)
    print(f"$ campaign {mode} --shards {shards}: exit {p.returncode}\n{p.stdout}{p.stderr}",
          flush=True)
    return p


def totals(d):
    with open(os.path.join(d, "totals.json")) as f:
        return f.read().strip()


def main(cluster, env):
    top = cluster.dir
    one, here, there, bad = (os.path.join(top, n) for n in ("one", "here", "slurm", "bad"))
    check(campaign("local", one, "1", env).returncode == 0, "every seed in one process")
    t = json.loads(totals(one))
    check(t["schedules"] == 300 and t["failures"] > 0,
          f"the campaign ran 300 schedules and has failures to count ({t['failures']})")
    check(campaign("local", here, SHARDS, env, CAMPAIGN, "--jobs", "2").returncode == 0,
          "three shards here")
    check(totals(here) == totals(one), "three local shards merge to the one process's totals")
    p = campaign("slurm", there, SHARDS, env, CAMPAIGN, "--wait", "--time", "15")
    if p.returncode != 0:
        print(cluster.logs())
    check(p.returncode == 0, "the Slurm job array and its merge job ran")
    outs = sorted(f for f in os.listdir(there) if f.startswith("slurm-") and "_" in f)
    check(len(outs) == 3, f"one array task per shard ({outs})")
    check(totals(there) == totals(one), f"the Slurm campaign merges to {totals(one)}")
    p = campaign("slurm", bad, SHARDS, env, ["no-such-scenario"], "--wait", "--time", "5")
    check(p.returncode != 0 and not os.path.exists(os.path.join(bad, "totals.json")),
          "failed shards: the merge job is cancelled and the campaign fails")


if __name__ == "__main__":
    EMU_RUN, EMU_RACE, CAMPAIGN_PY = sys.argv[1:4]
    # Every file of the run (the campaigns' directories, the shards' segments) lives in
    # directories the cluster's guardian removes, however this process ends.
    shm = tempfile.mkdtemp(prefix="emu-campaign-", dir=os.environ.get("EMU_SHM_DIR", "/dev/shm"))
    cluster = OneNodeSlurm(extra_dirs=[shm])
    with cluster as env:
        main(cluster, dict(env, EMU_SHM_DIR=shm))
