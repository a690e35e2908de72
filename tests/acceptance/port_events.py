#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The unmodified Debian ibv_asyncwatch sees a port taken down and up with emu-ctl.

  port_events.py --emu-run PATH --emu-ctl PATH [--dev emu0] [--port 1] [--timeout S]

ibv_asyncwatch (through emu-run) waits for async events of the device forever; once it has opened
the device (its first line), `emu-ctl port DEV PORT down` and then `up` run, each only after the
previous event was printed. Its output must show IBV_EVENT_PORT_ERR and then IBV_EVENT_PORT_ACTIVE
for the port; it is then stopped. Every wait is on its output, bounded by a deadline. It writes
into a pipe: rdma-core 44's asyncwatch line-buffers stdout itself (setvbuf), and stdbuf -oL keeps
its lines coming one by one from a build that would leave a pipe block-buffered.
The run has a fabric of its own (EMU_FABRIC), whose segment file is removed afterwards.
"""
import argparse
import os
import re
import select
import shutil
import subprocess
import sys
import time


class Output:
    """What a process has printed so far, read as it comes."""

    def __init__(self, proc):
        self.proc = proc
        self.text = ""
        os.set_blocking(proc.stdout.fileno(), False)

    def wait_for(self, pattern, deadline):
        """Returns the match of `pattern` once the output has it; None at the deadline or EOF."""
        rx = re.compile(pattern, re.M)
        while True:
            m = rx.search(self.text)
            if m:
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:  # the process ended
                return rx.search(self.text)
            self.text += chunk.decode(errors="replace")

    def rest(self, deadline):
        """Reads what is left until the process's end of output (or the deadline)."""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], deadline - time.monotonic())
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                return
            self.text += chunk.decode(errors="replace")


def ctl(args, env, *cmd):
    p = subprocess.run([args.emu_ctl, *cmd], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=args.timeout)
    print("$ emu-ctl " + " ".join(cmd) + "\n" + p.stdout.rstrip())
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--dev", default="emu0")
    ap.add_argument("--port", default="1")
    ap.add_argument("--timeout", type=float, default=30, help="bound on each wait, seconds")
    a = ap.parse_args()
    for tool in ("ibv_asyncwatch", "stdbuf"):
        if not shutil.which(tool):
            print(f"FAIL {tool} not found (Debian packages ibverbs-utils, coreutils)")
            return 1

    env = dict(os.environ)
    env["EMU_FABRIC"] = "test-port-events-" + str(os.getpid())
    seg = os.path.join(env.get("EMU_SHM_DIR", "/dev/shm"),
                       f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
    watch = subprocess.Popen(["stdbuf", "-oL", a.emu_run, "ibv_asyncwatch", "-d", a.dev], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = Output(watch)
    ok = True
    port_line = r"^\s*event_type IBV_EVENT_%s \(%d\), port %s$"
    try:
        steps = [
            # The device is open (the async fd exists) before the port changes.
            (None, r"^%s: async event FD \d+$" % re.escape(a.dev)),
            ("down", port_line % ("PORT_ERR", 10, a.port)),
            ("up", port_line % ("PORT_ACTIVE", 9, a.port)),
        ]
        for action, pattern in steps:
            if action:
                p = ctl(a, env, "port", a.dev, a.port, action)
                want = "PORT_DOWN" if action == "down" else "PORT_ACTIVE"
                if p.returncode != 0 or want not in p.stdout:
                    print(f"FAIL emu-ctl port {a.dev} {a.port} {action}: exit {p.returncode}")
                    ok = False
                    break
            if not out.wait_for(pattern, time.monotonic() + a.timeout):
                print(f"FAIL ibv_asyncwatch did not print /{pattern}/ within {a.timeout} s")
                ok = False
                break
        if ok:
            p = ctl(a, env, "port", a.dev, a.port)
            if p.returncode != 0 or "PORT_ACTIVE" not in p.stdout:
                print("FAIL the port does not read as active again")
                ok = False
    finally:
        if watch.poll() is None:
            watch.terminate()
        try:
            watch.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
        out.rest(time.monotonic() + a.timeout)
        print("--- ibv_asyncwatch\n" + out.text.rstrip())
        try:
            os.unlink(seg)
        except OSError:
            pass
    # The events came in order and only once each.
    errs = len(re.findall(port_line % ("PORT_ERR", 10, a.port), out.text, re.M))
    acts = len(re.findall(port_line % ("PORT_ACTIVE", 9, a.port), out.text, re.M))
    if ok and (errs, acts) != (1, 1):
        print(f"FAIL {errs} PORT_ERR and {acts} PORT_ACTIVE lines, expected one of each")
        ok = False
    print("PASS port_events" if ok else "FAIL port_events")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
