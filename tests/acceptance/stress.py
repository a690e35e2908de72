#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""emu-stress acceptance cases: racy posting modes show their races, the locked modes none.

  stress.py --emu-run PATH --emu-stress PATH --case NAME

Each case runs build/bin/emu-stress (through emu-run) with --json and checks the summary
(docs/guides/stress.md). A racy case depends on how threads happen to be scheduled, so it runs up to
--runs times until a run shows what it looks for; what must hold in *every* run (exit status,
which threads an event names) is checked on each. No time is measured or asserted. Every run has
a fabric of its own, whose segment file is removed afterwards.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# Sizes around the 35..226-byte window of ucx issue 2464: WQEs of two to four 64-byte BlueFlame
# blocks (an inline RDMA WRITE of 226 bytes takes five, and goes by doorbell).
SIZES = "40,100,180,226"


class Failed(Exception):
    pass


def run_stress(args, fabric, extra, env_extra=None):
    """One emu-stress run; returns (exit status, summary or None, output)."""
    with tempfile.TemporaryDirectory(prefix="emu-stress-") as tmp:
        path = os.path.join(tmp, "summary.json")
        env = dict(os.environ, EMU_FABRIC=fabric, **(env_extra or {}))
        cmd = [args.emu_run, args.emu_stress, *extra, "--json", path, "--races-shown", "256"]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        summary = None
        if os.path.exists(path):
            with open(path) as f:
                summary = json.load(f)
        return p.returncode, summary, "$ " + " ".join(cmd) + "\n" + p.stdout


def events_of(s):
    return s["races"]["first"] if s["races"] else []


def two_posters(e, tids):
    w = e["writer_tids"]
    return w[0] != w[1] and w[0] in tids and w[1] in tids


def check_named_threads(s):
    """Every run: each event names two distinct threads, both posting threads of the run. (Where
    the stores the device saw were one thread's, as after two posters of one QP collided once, it
    names the QP's other poster: docs/design/doorbells-and-mmio.md.)"""
    tids = set(s["posting_tids"])
    for e in events_of(s):
        if not two_posters(e, tids):
            raise Failed(f"event does not name two posting threads: {e} (posting: {sorted(tids)})")


def racy_until_found(args, name, extra, found, runs):
    """Runs up to `runs` times until found(summary) holds; checks every run's invariants."""
    for i in range(1, runs + 1):
        rc, s, out = run_stress(args, f"stress-{name}-{os.getpid()}-{i}", extra)
        print(out)
        if rc != 0 or s is None:
            raise Failed(f"run {i}: exit status {rc} (a racy run reports, it does not fail)")
        check_named_threads(s)
        why_not = found(s)
        if why_not is None:
            print(f"found in run {i}")
            return
        print(f"run {i}: not yet: {why_not}")
    raise Failed(f"not found in {runs} runs")


def expect_clean(args, name, extra, env_extra=None):
    rc, s, out = run_stress(args, f"stress-{name}-{os.getpid()}", [*extra, "--expect-clean"], env_extra)
    print(out)
    if rc == 2 and "--td" in extra and "thread domains" in out:
        raise Failed("the provider has no thread domains yet (ibv_alloc_td failed, exit 2): these "
                     "cases pass once the provider's TD support is merged")
    if rc != 0 or s is None:
        raise Failed(f"exit status {rc}, expected a clean run (0)")
    c, comp = s["corruption"], s["completions"]
    if s["races"] is not None and s["races"]["total"]:
        raise Failed(f"race events in a clean mode: {s['races']['by_kind']}")
    if c["corrupt_bytes"] or c["corrupt_messages"]:
        raise Failed(f"corruption in a clean mode: {c}")
    posted = s["messages"]["posted"]
    if comp["messages_once"] != posted or comp["errors"] or comp["unmatched"] or s["messages"]["not_posted"]:
        raise Failed(f"completions {comp}, {posted} posted")
    if posted != s["config"]["threads"] * s["config"]["count"]:
        raise Failed(f"{posted} posted, expected threads * count")


def case_direct_single_racy(args):
    """Two threads share one QP of a SINGLE worker, BlueFlame without a lock: the device sees the
    race (every event naming both threads) and corrupted bytes reach the target."""
    extra = ["--api", "direct", "--thread-mode", "single", "--mmio", "bf_post", "--threads", "2",
             "--qps", "1", "--sizes", SIZES, "--count", "2000", "--pin", "block", "--drain-ms", "500"]

    def found(s):
        kinds = s["races"]["by_kind"]
        if not any(kinds[k] for k in ("bf_torn", "double_write", "dbrec_backwards")):
            return f"no bf_torn/double_write/dbrec_backwards: {kinds}"
        c = s["corruption"]
        if not c["corrupt_bytes"]:  # the torn WQE's bytes reach the target, as on hardware
            return f"no corrupt bytes at the target: {c}"
        return None

    racy_until_found(args, "direct-single", extra, found, args.runs)


def case_direct_serialized_clean(args):
    expect_clean(args, "direct-serialized", ["--api", "direct", "--thread-mode", "serialized",
                                             "--mmio", "bf_post_mt", "--threads", "2", "--qps", "1",
                                             "--sizes", SIZES, "--count", "2000"])


# 17 QPs on one context: with EMU_UARS=16 (the default), QP 16 rings register 0 with QP 0. Each
# QP has a thread of its own, so the only thing shared unlocked is that register. Threads are
# pinned in blocks (thread 0 and thread 16 on different CPUs of two) and yield after each post,
# so that the two sharers run at the same time now and then among the other fifteen.
SHARED_REG = ["--api", "direct", "--thread-mode", "single", "--threads", "17", "--qps", "17",
              "--sizes", SIZES, "--count", "4000", "--pin", "block", "--yield-every", "1"]


def case_shared_register_racy(args):
    def found(s):
        regs, tids = s["registers"], s["posting_tids"]
        if regs[0] != regs[16] or len(set(regs)) != 16:
            raise Failed(f"expected QPs 0 and 16 alone on one register: {regs}")
        sharers = {tids[0], tids[16]}
        torn = [e for e in events_of(s) if e["kind"] == "bf_torn"]
        for e in events_of(s):
            if e["kind"] != "bf_torn":
                raise Failed(f"only the register is shared, yet: {e}")
            if e["register"] != regs[0] or set(e["writer_tids"]) != sharers:
                raise Failed(f"torn BlueFlame WQE not on the shared register by its two threads: {e}")
        return None if torn else "no bf_torn"

    racy_until_found(args, "shared-reg", [*SHARED_REG, "--mmio", "bf_post"], found, args.runs)


def case_shared_register_clean(args):
    expect_clean(args, "shared-reg-mt", [*SHARED_REG, "--mmio", "bf_post_mt"])


# The same over plain stores (--stores plain): uctlite writes the register as UCX does, a memcpy into
# the BlueFlame buffer and an 8-byte store to the doorbell, with no call into the provider; the
# stores reach the device through the trapped register pages (EMU_MMIO=trap, the default).
PLAIN = ["--stores", "plain"]


def case_direct_single_racy_plain(args):
    """case_direct_single_racy with the register written by plain stores."""
    extra = ["--api", "direct", "--thread-mode", "single", "--mmio", "bf_post", "--threads", "2",
             "--qps", "1", "--sizes", SIZES, "--count", "2000", "--pin", "block", "--drain-ms", "500",
             *PLAIN]

    def found(s):
        if s["config"]["stores"] != "plain":
            raise Failed(f"not a plain-store run: {s['config']}")
        kinds = s["races"]["by_kind"]
        if not any(kinds[k] for k in ("bf_torn", "double_write", "dbrec_backwards")):
            return f"no bf_torn/double_write/dbrec_backwards: {kinds}"
        if not s["corruption"]["corrupt_bytes"]:
            return f"no corrupt bytes at the target: {s['corruption']}"
        return None

    racy_until_found(args, "direct-single-plain", extra, found, args.runs)


def case_direct_serialized_clean_plain(args):
    expect_clean(args, "direct-serialized-plain",
                 ["--api", "direct", "--thread-mode", "serialized", "--mmio", "bf_post_mt",
                  "--threads", "2", "--qps", "1", "--sizes", SIZES, "--count", "2000", *PLAIN])


def case_direct_db_lock_clean_plain(args):
    """The 8-byte doorbell by a plain store, under the register's lock: clean."""
    expect_clean(args, "direct-db-plain",
                 ["--api", "direct", "--thread-mode", "serialized", "--mmio", "db_lock",
                  "--threads", "2", "--qps", "1", "--sizes", "8," + SIZES, "--count", "2000", *PLAIN])


def case_shared_register_racy_plain(args):
    """Two threads' plain BlueFlame stores into one register without a lock: torn WQEs, each event
    naming the register and both threads (acceptance of true MMIO)."""
    def found(s):
        regs, tids = s["registers"], s["posting_tids"]
        if regs[0] != regs[16] or len(set(regs)) != 16:
            raise Failed(f"expected QPs 0 and 16 alone on one register: {regs}")
        sharers = {tids[0], tids[16]}
        for e in events_of(s):
            if e["kind"] != "bf_torn":
                raise Failed(f"only the register is shared, yet: {e}")
            if e["register"] != regs[0] or set(e["writer_tids"]) != sharers:
                raise Failed(f"torn BlueFlame WQE not on the shared register by its two threads: {e}")
        return None if events_of(s) else "no bf_torn"

    racy_until_found(args, "shared-reg-plain", [*SHARED_REG, "--mmio", "bf_post", *PLAIN], found,
                     args.runs)


def case_shared_register_clean_plain(args):
    expect_clean(args, "shared-reg-mt-plain", [*SHARED_REG, "--mmio", "bf_post_mt", *PLAIN])


def case_verbs_shared_qp(args):
    expect_clean(args, "verbs-1qp", ["--api", "verbs", "--threads", "8", "--qps", "1",
                                     "--sizes", "8," + SIZES, "--count", "1000"])


def case_verbs_qp_per_thread(args):
    expect_clean(args, "verbs-8qp", ["--api", "verbs", "--threads", "8", "--qps", "8",
                                     "--sizes", "8," + SIZES, "--count", "1000"])


def case_verbs_td(args):
    expect_clean(args, "verbs-td", ["--api", "verbs", "--td", "--threads", "8", "--qps", "8",
                                    "--sizes", "8," + SIZES, "--count", "1000"])


def case_verbs_td_two_qps(args):
    expect_clean(args, "verbs-td2", ["--api", "verbs", "--td", "--threads", "8", "--qps", "16",
                                     "--sizes", "8," + SIZES, "--count", "1000"])


def case_verbs_engine_thread(args):
    expect_clean(args, "verbs-engine", ["--api", "verbs", "--threads", "4", "--qps", "2", "--op", "send",
                                        "--sizes", "8," + SIZES, "--count", "1000"],
                 {"EMU_ENGINE": "thread"})


class Skipped(Exception):
    pass


def case_real_device(args):
    """The same locked verbs run on a real device (rxe, mlx5) where the machine has one, without
    the emulator: the comparison run. Skipped, with the reason, where there is none."""
    p = subprocess.run(["ibv_devices"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    names = [l.split()[0] for l in p.stdout.splitlines()[2:] if l.split()]
    if not names:
        first = (p.stdout.splitlines() or ["(no output)"])[0]
        raise Skipped(f"no real RDMA device on this machine (ibv_devices says: {first})")
    with tempfile.TemporaryDirectory(prefix="emu-stress-") as tmp:
        path = os.path.join(tmp, "summary.json")
        cmd = [args.emu_stress, "--api", "verbs", "--device", names[0], "--threads", "8", "--qps", "8",
               "--sizes", "8," + SIZES, "--count", "1000", "--expect-clean", "--json", path]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print("$ " + " ".join(cmd) + "\n" + r.stdout)
        if r.returncode != 0:
            raise Failed(f"exit status {r.returncode} on {names[0]}, expected a clean run")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main(cases=None, fabric_prefix="stress-", runs=20):
    """Runs the case --case names of `cases` (default: this file's); sched_stress.py calls it too.
    The segment files this process's fabrics (named `fabric_prefix`...) left are removed."""
    cases = cases or CASES
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-stress", required=True)
    ap.add_argument("--case", required=True, choices=sorted(cases))
    ap.add_argument("--runs", type=int, default=runs, help="racy cases: runs")
    a = ap.parse_args()
    shm = os.environ.get("EMU_SHM_DIR", "/dev/shm")
    before = set(os.listdir(shm))
    try:
        cases[a.case](a)
    except Failed as e:
        print(f"FAIL {a.case}: {e}")
        return 1
    except Skipped as e:
        print(f"SKIP {a.case}: {e}")
        return 77
    finally:
        prefix = f"rdmaemu-{os.getuid()}-{fabric_prefix}"
        for f in set(os.listdir(shm)) - before:
            if f.startswith(prefix) and f"-{os.getpid()}" in f:
                os.unlink(os.path.join(shm, f))
    print(f"PASS {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
