#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs unmodified librdmacm programs between processes on emu devices and checks what they say.

  cm_pair.py --emu-run PATH --emu-ctl PATH --name NAME [--port P [--ps HEX]]
             [--server "CMD"] --client "CMD" [checks] [faults]

Each run gets its own fabric (EMU_FABRIC); every process runs under emu-run with EMU_RACE_LOG=1 and
its output must show no race. The client starts once the server's CM listener exists: the
emulation's rendezvous socket for port P is listening in /proc/net/unix (a condition, not a sleep).
Faults, each waiting on a condition: --kill-client-at / --kill-server-at REGEX kill that process
(SIGKILL) once its output matches; --stop-server stops the server (SIGSTOP) before the client starts
and kills it once the client's connection waits in its listener's backlog (ss -xl: Recv-Q).
--hold-server stops the server for the client's whole run (nobody answers), then kills it.
--server-forever: the server never exits by itself (cmtime); it is killed after the client.
Afterwards the census of the fabric must hold no object and no rendezvous socket may be left.
"""
import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "acceptance"))
from pair import check  # noqa: E402  (the same exit-code and output checks as pair.py)


class Proc:
    """A process whose output is collected line by line, so a test can wait on it. stdout and
    stderr are kept apart (a program's buffered stdout and unbuffered stderr would interleave
    mid-line in one pipe); text() is the one, then the other."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        self.out = {"stdout": [], "stderr": []}
        self.ended = 0
        self.cond = threading.Condition()
        self.readers = [threading.Thread(target=self._read, args=(f, k), daemon=True)
                        for f, k in ((self.p.stdout, "stdout"), (self.p.stderr, "stderr"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, key):
        for line in stream:
            with self.cond:
                self.out[key].append(line)
                self.cond.notify_all()
        with self.cond:
            self.ended += 1
            self.cond.notify_all()

    def _text(self):
        return "".join(self.out["stdout"]) + "".join(self.out["stderr"])

    def wait_output(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if re.search(pattern, self._text(), re.M):
                    return True
                left = deadline - time.monotonic()
                if self.ended == 2 or left <= 0:
                    return False
                self.cond.wait(left)

    def finish(self, timeout):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None
        for r in self.readers:
            r.join(timeout)
        return self.p.returncode

    def text(self):
        with self.cond:
            return self._text()


def unix_names(fabric):
    """The emulation's rendezvous sockets of `fabric`: name -> listening."""
    want = f"@rdmaemu-cm.{os.getuid()}.{fabric}."
    names = {}
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            cols = line.split()
            if len(cols) >= 8 and cols[7].startswith(want):
                names[cols[7]] = bool(int(cols[3], 16) & 0x10000)  # __SO_ACCEPTCON
    return names


def listener_name(fabric, ps, port):
    for name, listening in unix_names(fabric).items():
        if listening and name.startswith(f"@rdmaemu-cm.{os.getuid()}.{fabric}.{ps}.") \
                and name.endswith(f".{port}"):
            return name
    return None


def backlog(name):
    out = subprocess.run(["ss", "-xlH"], stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 5 and cols[4] == name:
            return int(cols[2])
    return 0


def wait_until(cond, timeout, proc=None):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline or (proc and proc.p.poll() is not None):
            return False
        time.sleep(0.01)  # polling a condition with a bounded deadline
    return True


def census_clean(emu_ctl, env):
    out = subprocess.run([emu_ctl, "census", "--json"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    try:
        c = json.loads(out)
    except ValueError:
        print("FAIL census:", out)
        return False
    left = c["objects"] + c["dead_owned"]
    if left:
        print("FAIL census: objects left:", left)
        return False
    return True


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, default=0, help="CM port the server listens on")
    ap.add_argument("--ps", default="106", help="its port space in hex (106 TCP, 111 UDP, 13f IB)")
    ap.add_argument("--server")
    ap.add_argument("--client", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--rc", type=int, default=0, help="expected exit code of the client")
    ap.add_argument("--server-rc", type=int, default=0)
    ap.add_argument("--any-rc", action="store_true", help="the client's exit code is not checked")
    ap.add_argument("--any-server-rc", action="store_true")
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--expect-server", action="append", default=[])
    ap.add_argument("--absent", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--server-forever", action="store_true")
    ap.add_argument("--kill-client-at")
    ap.add_argument("--kill-server-at")
    ap.add_argument("--stop-server", action="store_true")
    ap.add_argument("--hold-server", action="store_true",
                    help="stop the server before the client starts; kill it after the client")
    return ap.parse_args()


def run(a, env):
    """Runs the processes; returns (ok, [(label, Proc, rc, want_rc, patterns)])."""
    cmd = lambda c: [a.emu_run] + shlex.split(c)
    srv = None
    if a.server:
        srv = Proc(cmd(a.server), env)
        if a.port and not wait_until(lambda: listener_name(env["EMU_FABRIC"], a.ps, a.port),
                                     30, srv):
            srv.p.kill()
            srv.finish(10)
            print("FAIL server never listened\n" + srv.text())
            return False, []
        if a.stop_server or a.hold_server:
            srv.p.send_signal(signal.SIGSTOP)
    cli = Proc(cmd(a.client), env)
    ok = True
    if a.stop_server:
        name = listener_name(env["EMU_FABRIC"], a.ps, a.port)
        ok &= wait_until(lambda: backlog(name) > 0, 30, cli)
        srv.p.kill()
    if a.kill_server_at:
        ok &= srv.wait_output(a.kill_server_at, a.timeout)
        srv.p.kill()
    if a.kill_client_at:
        ok &= cli.wait_output(a.kill_client_at, a.timeout)
        cli.p.kill()
    if not ok:
        print("FAIL the fault's condition never came")
    runs = [("client", cli, cli.finish(a.timeout), a.rc, a.expect)]
    if srv:
        if a.server_forever or a.hold_server:
            srv.p.kill()
        want = None if (a.any_server_rc or a.server_forever or a.kill_server_at or
                        a.stop_server or a.hold_server) else a.server_rc
        runs.append(("server", srv, srv.finish(a.timeout), want, a.expect_server))
    if a.kill_client_at or a.any_rc:
        runs[0] = ("client", cli, runs[0][2], None, a.expect)
    return ok, runs


def main():
    a = parse()
    env = dict(os.environ)
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    env["EMU_FABRIC"] = f"cm-{a.name}-{os.getpid()}"
    env["EMU_RACE_LOG"] = "1"
    a.absent.append(r"^rdmaemu race:")
    seg = os.path.join(env.get("EMU_SHM_DIR", "/dev/shm"),
                       f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
    try:
        ok, runs = run(a, env)
        for label, proc, rc, want, patterns in runs:
            print(f"--- {label} (exit {rc})\n" + proc.text())
            if rc is None:
                print(f"FAIL {label} timed out")
                ok = False
            ok &= check(label, proc.text(), rc, rc if want is None else want, patterns, a.absent)
        left = unix_names(env["EMU_FABRIC"])
        if left:
            print("FAIL rendezvous sockets left:", left)
            ok = False
        ok &= census_clean(a.emu_ctl, env)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(seg)  # the fabric's segment file
    print(("PASS " if ok else "FAIL ") + a.name)
    return int(not ok)


if __name__ == "__main__":
    sys.exit(main())
