#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Error injection (EMU_INJECT) seen by an unmodified Debian program, ibv_rc_pingpong, under
emu-run between two processes.
  inject_pingpong.py --emu-run PATH --emu-ctl PATH --port P
Checks:
  - status: with `wc:status=rem_access_err,op=send,nth=1` in both processes, the client's first
    SEND (the first SEND on the fabric: the server sends only after receiving) completes with
    IBV_WC_REM_ACCESS_ERR; the client prints it and exits 1, as its code does for an error
    completion; `emu-ctl inject` counts the rule fired once; no race recorded. The server, which
    never hears from the client, is ended by the test.
  - verb: with `fail:verb=reg_mr,errno=ENOMEM` the server fails at its ibv_reg_mr, prints
    "Couldn't register MR" and exits 1 before listening; the census holds nothing afterwards.
"""
import argparse
import contextlib
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pair import sanitizer_report, start_listening  # noqa: E402


def env_for(name, rules):
    env = dict(os.environ)
    env["EMU_FABRIC"] = f"test-inject-{name}-{os.getpid()}"
    env["EMU_RACE_LOG"] = "1"
    env["EMU_INJECT"] = rules
    env["EMU_FABRIC_PERSIST"] = "1"  # `emu-ctl inject` reads the counts after the programs end
    return env


def segment_of(env):
    shm = env.get("EMU_SHM_DIR", "/dev/shm")
    return os.path.join(shm, f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")


def ctl(a, env, *args):
    return subprocess.run([a.emu_ctl, *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60).stdout


def status_case(a):
    env = env_for("status", "wc:status=rem_access_err,op=send,nth=1")
    pp = ["ibv_rc_pingpong", "-d", "emu0", "-p", str(a.port), "-n", "5"]
    ok = True
    srv = None
    try:
        srv = start_listening([a.emu_run] + pp, env, a.port, deadline=60)
        if srv is None:
            return False
        try:
            cli = subprocess.run([a.emu_run] + pp + ["localhost"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=a.timeout)
        except subprocess.TimeoutExpired as e:
            print("FAIL client timed out\n", e.stdout)
            return False
        print("--- client\n" + cli.stdout)
        want = r"^Failed status remote access error \(10\) for wr_id 2$"
        if cli.returncode != 1 or not re.search(want, cli.stdout, re.M):
            print("FAIL client: exit", cli.returncode, "or no REM_ACCESS_ERR for its SEND")
            ok = False
        if re.search(r"^rdmaemu race:", cli.stdout, re.M):
            print("FAIL client: the device reported a race")
            ok = False
        if sanitizer_report(cli.stdout):
            print(f"FAIL client: a sanitizer report ({sanitizer_report(cli.stdout)})")
            ok = False
        out = ctl(a, env, "inject")
        print("--- emu-ctl inject\n" + out)
        if "fired 0 1" not in out.splitlines():
            print("FAIL: the rule did not act exactly once")
            ok = False
        races = ctl(a, env, "races")
        if not races.startswith("0 race events"):
            print("FAIL: races recorded\n" + races)
            ok = False
    finally:
        if srv is not None:
            if srv.poll() is None:
                srv.kill()  # it waits for a peer that failed: ending it is the test's part
            sout = srv.communicate()[0]
            print("--- server\n" + sout)
            if sanitizer_report(sout):
                print(f"FAIL server: a sanitizer report ({sanitizer_report(sout)})")
                ok = False
        ctl(a, env, "persist", env["EMU_FABRIC"], "off")
        with contextlib.suppress(OSError):
            os.unlink(segment_of(env))
    return ok


def verb_case(a):
    env = env_for("verb", "fail:verb=reg_mr,errno=ENOMEM")
    ok = True
    try:
        srv = subprocess.run([a.emu_run, "ibv_rc_pingpong", "-d", "emu0", "-p", str(a.port + 1)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=a.timeout)
        print("--- server\n" + srv.stdout)
        if srv.returncode != 1 or "Couldn't register MR" not in srv.stdout:
            print("FAIL server: exit", srv.returncode, "or no failed ibv_reg_mr")
            ok = False
        if sanitizer_report(srv.stdout):
            print(f"FAIL server: a sanitizer report ({sanitizer_report(srv.stdout)})")
            ok = False
        census = json.loads(ctl(a, env, "census", "--json"))
        if census["objects"] or census["dead_owned"]:
            print("FAIL: objects left after the failed program\n", census)
            ok = False
        if "fired 0 1" not in ctl(a, env, "inject").splitlines():
            print("FAIL: the rule did not act exactly once")
            ok = False
    finally:
        ctl(a, env, "persist", env["EMU_FABRIC"], "off")
        with contextlib.suppress(OSError):
            os.unlink(segment_of(env))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    ok = status_case(a)
    ok = verb_case(a) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
