#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The comparison suite (issue 17, docs/guides/comparison.md): the harness's player scenarios and
probes,
run here on emu0 as RoCE (EMU_LINK_LAYER=eth) and on soft-RoCE (rxe0) in the VM of ci/rxe-vm,
their recorded streams compared record by record. Every difference must be a row of declared.py;
an undeclared difference, or a declared one that no longer occurs, fails.

  rxe_compare.py --build BUILD [--write-doc docs/guides/comparison.md] [--keep DIR]

Where the VM cannot run: a failure with the reason, or exit 77 (skip, with the reason) where
EMU_RXEVM_OPTIONAL=1 declares this machine unable (ci/rxe-vm/rxe_vm.py).
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "../.."))
RXE_VM = os.path.join(SRC, "ci/rxe-vm/rxe_vm.py")
sys.path.insert(0, HERE)
from declared import DECLARED  # noqa: E402

SUITE = ["test_players.py", "test_probes.py", "test_devices.py"]
BEGIN, END = "<!-- rxe-compare: begin -->", "<!-- rxe-compare: end -->"


def pytest_argv(device, record):
    tests = [os.path.join(SRC, "pyharness/tests", t) for t in SUITE]
    return ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-m", "not emu_only",
            f"--device={device}", f"--record={record}", *tests]


def run_emu(build, out):
    env = dict(os.environ, EMU_LINK_LAYER="eth", EMU_ROCE_NETDEV="lo", EMU_FABRIC="rxe-compare")
    argv = [os.path.join(build, "bin/emu-python"), *pytest_argv("emu0", out)]
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    print("$ EMU_LINK_LAYER=eth EMU_ROCE_NETDEV=lo " + " ".join(argv) + "\n" + p.stdout)
    return p.returncode


def run_rxe(build, out, versions):
    pyt = shlex.join(pytest_argv("rxe0", out))
    cmds = [f"uname -r > {versions}/kernel; dpkg-query -W -f '${{Version}}' rdma-core > "
            f"{versions}/rdma-core",
            # emu-python as on emu0: the module's provider library must be preloaded (its TLS);
            # the players on rxe0 run emu-player without emu-run.
            f"PYTHONDONTWRITEBYTECODE=1 {build}/bin/emu-python {pyt}"]
    p = subprocess.run([sys.executable, RXE_VM, "--writable", os.path.dirname(out), "--", *cmds],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    print(p.stdout)
    return p.returncode


def load(run_dir):
    out = {}
    for name in sorted(os.listdir(run_dir)):
        with open(os.path.join(run_dir, name)) as f:
            d = json.load(f)
        out[d["scenario"]] = d["records"]
    return out


def field_differences(emu, rxe):
    """(scenario, player, step, field, emu value, rxe value) for every field of every record that
    differs; a record on one side only gives field "*"."""
    diffs = []
    for s in sorted(set(emu) | set(rxe)):
        a, b = emu.get(s, []), rxe.get(s, [])
        for i in range(max(len(a), len(b))):
            ra = a[i] if i < len(a) else None
            rb = b[i] if i < len(b) else None
            who = ra or rb
            if ra is None or rb is None:
                diffs.append((s, who["player"], who["step"], "*", None if ra is None else i,
                              None if rb is None else i))
                continue
            for k in sorted(set(ra) | set(rb)):
                if ra.get(k) != rb.get(k):
                    diffs.append((s, ra["player"], ra["step"], k, ra.get(k), rb.get(k)))
    return diffs


def judge(emu, rxe):
    """(undeclared differences, declared rows that did not occur, declared rows seen)."""
    diffs = field_differences(emu, rxe)
    key = {tuple(d[:6]): d for d in DECLARED}
    undeclared = [d for d in diffs if d not in key]
    seen = [key[d] for d in diffs if d in key]
    stale = [d for d in DECLARED if d not in seen]
    return undeclared, stale, seen


WC_STATUS = {0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 4: "LOC_PROT_ERR",
             5: "WR_FLUSH_ERR", 9: "REM_INV_REQ_ERR", 10: "REM_ACCESS_ERR", 11: "REM_OP_ERR",
             12: "RETRY_EXC_ERR", 13: "RNR_RETRY_EXC_ERR"}
QP_STATE = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "ERR"}
EVENT = {0: "CQ_ERR", 1: "QP_FATAL", 2: "QP_REQ_ERR", 3: "QP_ACCESS_ERR", 4: "COMM_EST"}


def named(field, value):
    names = (WC_STATUS if field.startswith("status") else QP_STATE if "state" in field
             else EVENT if field.startswith("event") else {})
    return names.get(value, value)


def table(emu, rxe, seen, versions):
    lines = [BEGIN, "",
             f"Taken on Linux {versions.get('kernel', '?')} (Debian 12's linux-image-amd64) with "
             f"rdma-core {versions.get('rdma-core', '?')}, by `tests/rxevm/rxe_compare.py --build "
             "build --write-doc docs/guides/comparison.md` (ctest: rxevm.compare).", "",
             "| Scenario | emu0 (RoCE) vs rxe0 |", "|---|---|"]
    for s in sorted(set(emu) | set(rxe)):
        rows = [d for d in seen if d.scenario == s]
        what = "; ".join(f"{d.player} {d.step} {d.field}: emu0 {named(d.field, d.emu)}, "
                         f"rxe0 {named(d.field, d.rxe)} (declared)"
                         for d in rows) or f"match ({len(emu.get(s, []))} records)"
        lines.append(f"| {s} | {what} |")
    lines += ["", "Declared differences (tests/rxevm/declared.py):", "",
              "| Scenario | Where | emu0 | rxe0 | Why rxe differs | The specification |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {d.scenario} | {d.player} {d.step} {d.field} | {named(d.field, d.emu)} "
              f"| {named(d.field, d.rxe)} | {d.reason} "
              f"| {d.spec} |" for d in DECLARED]
    return "\n".join(lines + ["", END])


def write_doc(path, text):
    with open(path) as f:
        doc = f.read()
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    with open(path, "w") as f:
        f.write(head + text + tail)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--write-doc", metavar="MD")
    ap.add_argument("--keep", metavar="DIR", help="keep both runs' streams there")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    check = subprocess.run([sys.executable, RXE_VM, "--check"], stdout=subprocess.PIPE, text=True)
    if check.returncode == 77:
        print("SKIP: " + check.stdout.strip())
        return 77
    if check.returncode != 0:
        print(check.stdout.strip())
        print(f"FAIL: the VM cannot run here (rxe_vm.py --check exited {check.returncode})")
        return 1
    with tempfile.TemporaryDirectory(prefix="rxe-compare-") as tmp:
        emu_dir, rxe_dir, ver = (os.path.join(tmp, d) for d in ("emu0", "rxe0", "versions"))
        os.makedirs(ver)
        if run_emu(build, emu_dir) != 0:
            print("FAIL: the suite failed on emu0")
            return 1
        if run_rxe(build, rxe_dir, ver) != 0:
            print("FAIL: the suite failed on rxe0 in the VM")
            return 1
        if a.keep:
            shutil.rmtree(a.keep, ignore_errors=True)
            shutil.copytree(tmp, a.keep)
        emu, rxe = load(emu_dir), load(rxe_dir)
        versions = {n: open(os.path.join(ver, n)).read().strip() for n in os.listdir(ver)}
        # The harness's own summary first (which scenarios differ, and where they first part).
        subprocess.run([os.path.join(build, "bin/emu-python"), "-m", "rdmaemu.compare", emu_dir,
                        rxe_dir])
    undeclared, stale, seen = judge(emu, rxe)
    print(f"{len(emu)} scenarios on emu0, {len(rxe)} on rxe0; "
          f"{len(seen)} declared differences seen")
    for d in undeclared:
        print("UNDECLARED: scenario %s, %s %s %s: emu0 %s, rxe0 %s" % d)
    for d in stale:
        print(f"DECLARED BUT NOT SEEN: {d.scenario}, {d.player} {d.step} {d.field}")
    if a.write_doc:
        write_doc(a.write_doc, table(emu, rxe, seen, versions))
    if undeclared or stale or not emu or set(emu) != set(rxe):
        print("FAIL: the comparison with rxe0 has undeclared or stale differences")
        return 1
    print("PASS: every difference between emu0 and rxe0 is declared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
