#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Malformed knobs fail loudly (docs/knobs.md): for every knob of docs/knobs.md's table, each
malformed value below makes `emu-run ibv_devinfo` print a message naming the knob, the value and
what the knob allows, and fail its first verb: ibv_get_device_list returns NULL with errno EINVAL
(ibv_devinfo's perror says "Invalid argument"). EMU_SCHEDULE is refused earlier still: emu-run's
scheduler stops the program before its main, with the same message.

The table drives the run: a knob of the table without a malformed value here fails the test, and
so does a value here for a knob the table no longer has. One run with every knob at its table
default must list emu0, so that the failures above are the values' and not the run's.
emu-ctl refuses them as well (one case: a malformed EMU_SHM_DIR and `emu-ctl fabrics`).
Usage: knob_values.py --emu-run build/bin/emu-run --emu-ctl build/bin/emu-ctl --knobs-md docs/knobs.md
"""
import argparse
import os
import re
import subprocess
import sys

# Each knob's malformed values: its kind's typical mistakes and its bounds' first values outside.
BAD = {
    "EMU_FABRIC": ["a/b", "x y"],
    "EMU_SHM_DIR": ["relative/dir"],
    "EMU_SHM_SIZE": ["zz", "4X", "4M", "1025G"],
    "EMU_SHM_LIMIT": ["-1", "1P", "1025T"],
    "EMU_FABRIC_PERSIST": ["yes", "2"],
    "EMU_DEVICES": ["9", "two"],
    "EMU_PORTS": ["0", "5"],
    "EMU_UARS": ["abc", "65", "0", "16 ", "+16"],
    "EMU_TD_UARS": ["65", "-1"],
    "EMU_SINGLE_THREADED": ["true"],
    "EMU_BLUEFLAME": ["sometimes", "Always"],
    "EMU_MMIO": ["Trap", "mmio"],
    "EMU_PERSONALITY": ["MLX5", "mlx4"],
    "EMU_RACE_LOG": ["on"],
    "EMU_ENGINE": ["bogus", "Thread"],
    "EMU_SCHEDULE": ["pct:seed=x", "sometimes"],
    "EMU_SCHEDULE_OUT": ["/tmp/"],
    "EMU_SCHEDULE_TRACE": ["/tmp/"],
    "EMU_FAULTS": ["seed=1;explode"],
    "EMU_INJECT": ["wc:status=bogus"],
    "EMU_ACK_TIMEOUT_SCALE": ["0", "fast", "nan", "-1"],
    "EMU_PCAP": ["/tmp/"],
    "EMU_KILL_AT": ["nowhere", "doorbell:0"],
    "EMU_PCAP_SNAPLEN": ["63", "64k"],
    "EMU_PCAP_LIMIT": ["lots"],
    "EMU_LOG": ["2"],
    "EMU_SHARED_BACKING": ["no"],
    "EMU_DMA_RUNS": ["off"],
    "EMU_SHARED_MR": ["-1"],
    "EMU_STAGING": ["1K", "8M", "big"],
    "EMU_VENDOR_PART_ID": ["0x100000000", "cx6"],
    "EMU_LINK_LAYER": ["roce", "ib,"],
    "EMU_ROCE_NETDEV": ["a/b", "sixteen-chars-xx"],
    "EMU_CM_IB_ADDRS": ["emu0:1=999.1.1.1", "emu0=10.0.0.1"],
    "EMU_CM_TIMEOUT_MS": ["0", "10s"],
    "EMU_CM_TIMEWAIT_MS": ["1s"],
    "EMU_XRC_POLICY": ["sometimes"],
    "EMU_XRC_TGT_LIFETIME": ["forever"],
}
# Refused before the program's main (verbs_provider/sched/program.cpp), so no verb runs.
BEFORE_MAIN = {"EMU_SCHEDULE"}


def table(path):
    """(variable, default) of each row between the markers."""
    rows, on = [], False
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line == "<!-- end: emu-ctl knobs --markdown -->":
                on = False
            if on and line.startswith("| EMU_"):
                cells = [c.strip() for c in line.split(" | ")]
                rows.append((cells[0].lstrip("| ").strip(), cells[1]))
            if line == "<!-- begin: emu-ctl knobs --markdown -->":
                on = True
    return rows


def run(emu_run, env):
    p = subprocess.run([emu_run, "ibv_devinfo"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--knobs-md", required=True)
    ap.add_argument("--emu-ctl", required=True)
    a = ap.parse_args()
    rows = table(a.knobs_md)
    names = [n for n, _ in rows]
    failures = []
    if len(rows) < 30:
        failures.append(f"{a.knobs_md}: only {len(rows)} knob rows found")
    for n in names:
        if not BAD.get(n):
            failures.append(f"{n}: a knob of docs/knobs.md without a malformed value in {__file__}")
    for n in BAD:
        if n not in names:
            failures.append(f"{n}: has malformed values here but no row in docs/knobs.md")

    base = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    base["EMU_FABRIC"] = f"knob-values-{os.getpid()}"
    if "EMU_SHM_DIR" in os.environ:
        base["EMU_SHM_DIR"] = os.environ["EMU_SHM_DIR"]

    # Every knob at its default (EMU_FABRIC and EMU_SHM_DIR as above): accepted, emu0 listed.
    env = dict(base)
    for n, dflt in rows:
        if dflt and n not in ("EMU_FABRIC", "EMU_SHM_DIR"):
            env[n] = dflt
    rc, out, err = run(a.emu_run, env)
    if rc != 0 or not re.search(r"hca_id:\s+emu0", out) or "rdmaemu: EMU_" in err:
        failures.append(f"every knob at its default: rc {rc}, stderr:\n{err}")

    for n in names:
        for v in BAD.get(n, []):
            env = dict(base)
            env[n] = v
            rc, out, err = run(a.emu_run, env)
            said = [l for l in err.splitlines() if l.startswith(f"rdmaemu: {n}={v}: ")]
            why = []
            if rc == 0:
                why.append("exit 0")
            if not said:
                why.append("no 'rdmaemu: NAME=VALUE: ...' line")
            elif "expected" not in said[0]:
                why.append("the message does not say what the knob allows")
            if n not in BEFORE_MAIN and "Invalid argument" not in err:
                why.append("ibv_get_device_list did not fail with EINVAL")
            if "hca_id" in out:
                why.append("the program listed devices")
            if why:
                failures.append(f"{n}={v!r}: {', '.join(why)}; stderr:\n{err}")
            else:
                print(f"ok {n}={v!r}: {said[0]}")

    # emu-ctl refuses too: a command that reads no segment (fabrics lists EMU_SHM_DIR's files)
    # must not run on the default directory in place of the malformed one.
    env = dict(base, EMU_SHM_DIR="relative/dir")
    p = subprocess.run([a.emu_ctl, "fabrics"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    if p.returncode == 0 or "rdmaemu: EMU_SHM_DIR=relative/dir: " not in p.stderr:
        failures.append(f"emu-ctl fabrics with EMU_SHM_DIR=relative/dir: rc {p.returncode}, "
                        f"stderr:\n{p.stderr}")

    for f in failures:
        print("FAIL", f)
    print("FAIL" if failures else "PASS", f"({len(names)} knobs, {len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
