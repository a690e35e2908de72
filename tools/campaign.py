#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""A campaign of seeds, run here or as a Slurm job array, merged into one machine's totals.

  campaign.py local --shards N [--jobs J] --dir DIR -- RUN...
  campaign.py slurm --shards N --dir DIR [--partition P] [--time MIN] [--wait] -- RUN...
  campaign.py shard --shards N --index I --dir DIR -- RUN...   (one shard; what an array task runs)
  campaign.py merge --shards N --dir DIR                        (DIR/totals.json from the shards)

RUN is an emu-race campaign: `SCENARIO [--strategy S] [--seed S] [--budget B] [--bound B]`.
Run i's seed depends only on the master seed and i (docs/design/scheduler.md, "Schedules: shrinking,
traces, shards"), so shard I of N (runs I, I+N, ...) finds the same outcome wherever it runs, and
the merge of all N is what one process running every seed reports. Both modes run the same
`shard` and `merge` steps; only who starts them differs. DIR must be shared by every node that
runs a task. docs/guides/campaigns.md shows the commands.
"""
import argparse
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD_TIMEOUT = 3600  # seconds; a shard that runs longer is a hang, not a long campaign


def shard_file(d, i, n):
    return os.path.join(d, f"shard-{i}-of-{n}.json")


def race(a, args, **kw):
    return subprocess.run([a.emu_run, a.emu_race] + args, capture_output=True, text=True, **kw)


def run_shard(a):
    """Runs shard a.index of a.shards on a fabric of its own and keeps its --json line."""
    fabric = f"campaign-{os.getpid()}-{a.index}"
    env = dict(os.environ, EMU_FABRIC=fabric)
    # A failing campaign writes its first failure's trace: into DIR, not the caller's directory.
    trace = os.path.join(a.dir, f"shard-{a.index}-of-{a.shards}.trace.json")
    args = ["run"] + a.run + ["--shard", f"{a.index}/{a.shards}", "--keep-going", "--no-shrink",
                              "--json", "--trace", trace]
    p = race(a, args, env=env, timeout=SHARD_TIMEOUT)
    # 0: no failure found, 1: failures found (counted in the totals); anything else is an error.
    lines = p.stdout.strip().splitlines()
    if p.returncode not in (0, 1) or not lines:
        sys.stderr.write(f"shard {a.index}/{a.shards}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return 2
    with open(shard_file(a.dir, a.index, a.shards), "w") as f:
        f.write(lines[-1] + "\n")
    return 0


def merge(a):
    files = [shard_file(a.dir, i, a.shards) for i in range(a.shards)]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        sys.stderr.write(f"campaign: missing shards: {' '.join(missing)}\n")
        return 2
    p = race(a, ["merge"] + files)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        return 2
    with open(os.path.join(a.dir, "totals.json"), "w") as f:
        f.write(p.stdout)
    sys.stdout.write(p.stdout)
    return 0


def self_cmd(a, what, *extra):
    """This script's command line for one step, with the paths it was given."""
    return [sys.executable, os.path.abspath(__file__), what, "--shards", str(a.shards),
            "--dir", a.dir, "--emu-run", a.emu_run, "--emu-race", a.emu_race, *extra, "--", *a.run]


def local(a):
    def one(i):
        return subprocess.run(self_cmd(a, "shard", "--index", str(i))).returncode
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        codes = list(pool.map(one, range(a.shards)))
    if any(codes):
        sys.stderr.write(f"campaign: shard exit codes {codes}\n")
        return 2
    return merge(a)


def write_script(a, name, cmd):
    path = os.path.join(a.dir, name)
    with open(path, "w") as f:
        f.write("#!/bin/bash\nexec " + " ".join(shlex.quote(c) for c in cmd) + "\n")
    os.chmod(path, 0o755)
    return path


def sbatch(a, *args, waited=False):
    cmd = ["sbatch", "--parsable", "--chdir", a.dir]
    if a.partition:
        cmd += ["--partition", a.partition]
    if a.time:
        cmd += ["--time", str(a.time)]
    p = subprocess.run(cmd + list(args), capture_output=True, text=True)
    # With --wait, sbatch's exit is the job's: a cancelled merge is the campaign's failure.
    if p.returncode != 0 and not waited:
        sys.exit(f"campaign: sbatch failed: {p.stderr}")
    return p.stdout.strip().split(";")[0]


def slurm(a):
    """One array task per shard, then the merge once every task ended well (afterok); a failed
    task cancels the merge (--kill-on-invalid-dep) instead of leaving it pending for ever."""
    # Without --index, a shard is the array task's (SLURM_ARRAY_TASK_ID, read when it starts).
    shard = write_script(a, "shard.sh", self_cmd(a, "shard"))
    merger = write_script(a, "merge.sh", self_cmd(a, "merge"))
    array = sbatch(a, f"--array=0-{a.shards - 1}", "--job-name=campaign-shard",
                   "--output=slurm-%A_%a.out", shard)
    wait = ["--wait"] if a.wait else []
    print(f"array job {array}: {a.shards} shards", flush=True)
    p_merge = ["--dependency", f"afterok:{array}", "--kill-on-invalid-dep=yes",
               "--job-name=campaign-merge", "--output=slurm-merge-%j.out"] + wait + [merger]
    job = sbatch(a, *p_merge, waited=a.wait)
    print(f"merge job {job}: {os.path.join(a.dir, 'totals.json')}", flush=True)
    if not a.wait:
        return 0
    total = os.path.join(a.dir, "totals.json")
    if not os.path.exists(total):
        sys.stderr.write("campaign: the merge did not run: a shard failed (slurm-*.out)\n")
        return 2
    with open(total) as f:
        sys.stdout.write(f.read())
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["local", "slurm", "shard", "merge"])
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--index", type=int, help="shard: which (default: the Slurm array task's)")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--partition")
    p.add_argument("--time", type=int, help="minutes per Slurm task")
    p.add_argument("--wait", action="store_true", help="slurm: return when the merge has run")
    p.add_argument("--emu-run", default=os.path.join(ROOT, "build/bin/emu-run"))
    p.add_argument("--emu-race", default=os.path.join(ROOT, "build/bin/emu-race"))
    # Everything after -- is the campaign's, split off before argparse sees it.
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    a.run = argv[cut + 1:]
    if a.shards < 1 or (a.mode != "merge" and not a.run):
        p.error("--shards >= 1 and a campaign after -- are needed")
    a.dir = os.path.abspath(a.dir)
    os.makedirs(a.dir, exist_ok=True)
    if a.mode == "shard":
        if a.index is None and "SLURM_ARRAY_TASK_ID" in os.environ:
            a.index = int(os.environ["SLURM_ARRAY_TASK_ID"])
        if a.index is None or not 0 <= a.index < a.shards:
            p.error("--index in 0..shards-1 is needed")
        return run_shard(a)
    return {"local": local, "slurm": slurm, "merge": merge}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
