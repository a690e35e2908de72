#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs unmodified verbs programs on emu devices, through emu-run, and checks what they say.

  pair.py --emu-run PATH --name NAME [--port P] --server "CMD" --client "CMD" [checks]
  pair.py --emu-run PATH --name NAME --single "CMD" [checks]
  pair.py --emu-run PATH --name NAME --single "CMD" --fails [checks]

--fails: the program is run to show a failure (the seed's racy variants): it must end with a
non-zero exit code or a signal, its output must match every --expect, and race events are allowed.

Every run also asserts that the device reported no race event (EMU_RACE_LOG=1 prints them) and
that no ibv_*_pingpong -c found invalid data.
The server is started first; the client starts once the server's TCP port is listening (read from
/proc/net/tcp: a condition, not a sleep). Each run gets its own fabric (EMU_FABRIC) so tests do not
see each other's objects, and the segment file is removed afterwards.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time


def listening(port):
    want = ":%04X" % port
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def start_listening(argv, env, port, deadline=30):
    """Starts a server and returns it once its TCP port listens (a condition polled under a
    bounded deadline), or None when it ended or did not listen in time (killed, output printed)."""
    srv = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    end = time.monotonic() + deadline
    while not listening(port):
        if srv.poll() is not None or time.monotonic() > end:
            srv.kill()
            print("FAIL server never listened\n", srv.communicate()[0])
            return None
        time.sleep(0.01)  # polling a condition with a bounded deadline
    return srv


# What a sanitizer prints on a report (the sanitizer builds preload the instrumented provider into
# these programs). A report fails a process whatever its exit code: ASan's is 1, which some tests
# expect of a program that fails on purpose, and a killed program's is not looked at.
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "WARNING: ThreadSanitizer",
                     "ERROR: LeakSanitizer")


def sanitizer_report(text):
    """The first sanitizer report's marker in a process's output, or None."""
    return next((m for m in SANITIZER_REPORTS if m in text), None)


def check(label, text, rc, args_rc, patterns, absent, fails=False):
    ok = True
    if fails and rc == 0:
        print(f"FAIL {label}: exit code 0, expected a failure")
        ok = False
    elif not fails and rc != args_rc:
        print(f"FAIL {label}: exit code {rc}, expected {args_rc}")
        ok = False
    report = sanitizer_report(text)
    if report:
        print(f"FAIL {label}: a sanitizer report ({report})")
        ok = False
    for p in patterns:
        if not re.search(p, text, re.M):
            print(f"FAIL {label}: output lacks /{p}/")
            ok = False
    for p in absent:
        if re.search(p, text, re.M):
            print(f"FAIL {label}: output has /{p}/")
            ok = False
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, default=18515)
    ap.add_argument("--server")
    ap.add_argument("--client")
    ap.add_argument("--single")
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--no-listen", action="store_true",
                    help="the server is expected to exit before listening (argument errors)")
    ap.add_argument("--rc", type=int, default=0, help="expected exit code of every process")
    ap.add_argument("--expect", action="append", default=[], help="regex the client/single output must match")
    ap.add_argument("--expect-server", action="append", default=[])
    ap.add_argument("--absent", action="append", default=[], help="regex no output may match")
    ap.add_argument("--env", action="append", default=[], help="K=V for every process")
    ap.add_argument("--fails", action="store_true",
                    help="--single must fail (non-zero exit or a signal); race events allowed")
    ap.add_argument("--skip-unless", nargs=2, metavar=("CMD", "REGEX"),
                    help="exit 77 (skipped, with the reason) unless CMD's output matches REGEX")
    ap.add_argument("--clients", type=int, default=1,
                    help="client processes started together (each output is checked)")
    a = ap.parse_args()

    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    env["EMU_FABRIC"] = "test-" + a.name + "-" + str(os.getpid())
    # The device reports every race it sees (docs/design/doorbells-and-mmio.md); these programs
    # post through the
    # provider's locked path, so any report is a false positive of a detector or a provider bug.
    env["EMU_RACE_LOG"] = "1"
    if not a.fails:
        a.absent.append(r"^rdmaemu race:")
    # What the ibv_*_pingpong programs print for a received buffer that fails their -c check (and
    # go on, exit code 0).
    a.absent.append(r"invalid data in page")
    seg = os.path.join(env.get("EMU_SHM_DIR", "/dev/shm"), f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
    run = lambda cmd: [a.emu_run] + shlex.split(cmd)
    ok = True
    try:
        if a.skip_unless:
            cmd, want = a.skip_unless
            p = subprocess.run(run(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=a.timeout)
            if not re.search(want, p.stdout, re.M):
                print(f"SKIP {a.name}: `{cmd}` does not show /{want}/")
                return 77
        if a.single:
            p = subprocess.run(run(a.single), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=a.timeout)
            print(p.stdout)
            ok = check("process", p.stdout, p.returncode, a.rc, a.expect, a.absent, a.fails)
        else:
            srv = subprocess.Popen(run(a.server), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
            deadline = time.monotonic() + 30
            if a.no_listen:
                srv.wait(timeout=a.timeout)
            while not a.no_listen and not listening(a.port):
                if srv.poll() is not None or time.monotonic() > deadline:
                    out = srv.communicate()[0] if srv.poll() is not None else ""
                    print("FAIL server never listened on port", a.port, "\n", out)
                    srv.kill()
                    return 1
                time.sleep(0.01)  # polling a condition with a bounded deadline
            clis = [subprocess.Popen(run(a.client), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True) for _ in range(a.clients)]
            couts = []
            for c in clis:
                try:
                    couts.append(c.communicate(timeout=a.timeout)[0])
                except subprocess.TimeoutExpired:
                    for k in clis + [srv]:
                        k.kill()
                    print("FAIL client timed out\n", c.communicate()[0])
                    return 1
            try:
                sout = srv.communicate(timeout=a.timeout)[0]
            except subprocess.TimeoutExpired:
                srv.kill()
                sout = srv.communicate()[0]
                print("FAIL server did not exit after the client")
                ok = False
            print("--- server\n" + sout)
            ok &= check("server", sout, srv.returncode, a.rc, a.expect_server, a.absent)
            for i, (c, out) in enumerate(zip(clis, couts)):
                print(f"--- client {i}\n" + out)
                ok &= check(f"client {i}", out, c.returncode, a.rc, a.expect, a.absent)
    finally:
        try:
            os.unlink(seg)
        except OSError:
            pass
    print("PASS" if ok else "FAIL", a.name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
