#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The packet wire between two unmodified Debian programs (ibv_rc_pingpong --chk) under emu-run:
wire faults by seed (EMU_FAULTS), RC recovery, and the pcapng capture (EMU_PCAP) read by tshark.

  wire_capture.py --emu-run PATH --emu-ctl PATH --name NAME --port P [--faults RULES]
                  [--link ib|eth] [--iters N] [--size S]

Checks: both programs complete every iteration with their buffers validated (--chk, no "invalid
data in page"); no race event on either side; `emu-ctl faults` shows the faults injected; tshark
dissects every packet of the capture (0 malformed, every frame an InfiniBand packet); and every
request packet the capture marks dropped or corrupted is sent again later (a retransmission with
the same destination QP and PSN).
"""
import argparse
import contextlib
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pair import sanitizer_report, start_listening  # noqa: E402


def tshark(capture, *args):
    p = subprocess.run(["tshark", "-r", capture, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("tshark failed: " + p.stderr)
    return [line for line in p.stdout.splitlines() if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--faults", default="seed=11;drop:p=0.03;dup:p=0.02;reorder:p=0.02;"
                                        "delay:p=0.01;corrupt:p=0.01")
    ap.add_argument("--link", default="ib")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--timeout", type=float, default=240)
    a = ap.parse_args()
    env = dict(os.environ)
    env["EMU_FABRIC"] = f"test-{a.name}-{os.getpid()}"
    env["EMU_RACE_LOG"] = "1"
    env["EMU_FAULTS"] = a.faults
    env["EMU_ACK_TIMEOUT_SCALE"] = "0.01"
    env["EMU_LINK_LAYER"] = a.link
    # Kept after the pair exits, so that `emu-ctl faults` still reads the counters (removed below).
    env["EMU_FABRIC_PERSIST"] = "1"
    shm = env.get("EMU_SHM_DIR", "/dev/shm")
    seg = os.path.join(shm, f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
    capture = os.path.join(shm, f"{env['EMU_FABRIC']}.pcapng")
    env["EMU_PCAP"] = capture
    pp = ["ibv_rc_pingpong", "-d", "emu0", "-p", str(a.port), "-c", "-n", str(a.iters),
          "-s", str(a.size)]
    if a.link == "eth":
        pp += ["-g", "1"]  # RoCE: address the peer by GID (index 1: the IPv4 one)
    ok = True
    srv = None
    try:
        srv = start_listening([a.emu_run] + pp, env, a.port)
        if srv is None:
            return 1
        try:
            cli = subprocess.run([a.emu_run] + pp + ["localhost"], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired as e:
            print("FAIL client timed out\n", e.stdout)
            return 1
        with contextlib.suppress(subprocess.TimeoutExpired):
            srv.wait(timeout=a.timeout)  # the server ends after the client; else it is killed
        if srv.poll() is None:
            srv.kill()
        sout = srv.communicate()[0]
        done = {who: rc == 0 and re.search(rf"^{a.iters} iters in", out, re.M) is not None
                for who, rc, out in (("server", srv.returncode, sout),
                                     ("client", cli.returncode, cli.stdout))}
        for who, rc, out in (("server", srv.returncode, sout), ("client", cli.returncode, cli.stdout)):
            print(f"--- {who}\n{out}")
            # A race, or a buffer --chk found wrong (ibv_rc_pingpong says so and goes on), is a
            # failure on either side, the one excused below included.
            if re.search(r"^rdmaemu race:", out, re.M):
                print(f"FAIL {who}: the device reported a race")
                ok = False
            if re.search(r"invalid data in page", out):
                print(f"FAIL {who}: --chk found invalid data")
                ok = False
            if sanitizer_report(out):
                print(f"FAIL {who}: a sanitizer report ({sanitizer_report(out)})")
                ok = False
            peer = "client" if who == "server" else "server"
            if (done[peer] and
                    re.search(r"retry counter exceeded \(12\) for wr_id 2$", out, re.M)):
                # The ACK of this side's last SEND was lost and the peer, which had its data (it
                # ran all its iterations), exited: the resends find no QP, so RETRY_EXC_ERR is
                # the right end (as on hardware), for the server or the client alike; which ACK
                # a fault hits follows ibv_rc_pingpong's random PSNs.
                print(f"note: {who}'s last SEND unacknowledged after the {peer} exited")
                continue
            if rc != 0 or not re.search(rf"^{a.iters} iters in", out, re.M):
                print(f"FAIL {who}: exit {rc} or iterations missing")
                ok = False
        ctl = subprocess.run([a.emu_ctl, "faults"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60)
        print("--- emu-ctl faults\n" + ctl.stdout)
        counts = dict(line.split(" ", 1) for line in ctl.stdout.splitlines() if " " in line)
        if int(counts.get("drop", "0")) == 0 or int(counts.get("retransmitted", "0")) == 0:
            print("FAIL: no drop injected or nothing retransmitted")
            ok = False
        total = tshark(capture, "-T", "fields", "-e", "frame.number")
        malformed = tshark(capture, "-Y", "_ws.malformed")
        ib = tshark(capture, "-Y", "infiniband", "-T", "fields", "-e", "frame.number")
        print(f"capture: {len(total)} packets, {len(ib)} InfiniBand, {len(malformed)} malformed")
        if not total or malformed or len(ib) != len(total):
            print("FAIL: capture not dissected cleanly\n" + "\n".join(malformed[:20]))
            ok = False
        # Every lost request packet is sent again later: same destination QP and PSN.
        rows = tshark(capture, "-T", "fields", "-E", "separator=|", "-e", "frame.comment",
                      "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
                      "-e", "infiniband.bth.opcode")
        lost, seen_again = [], set()
        for i, row in enumerate(rows):
            comment, qp, psn, op = (row.split("|") + ["", "", "", ""])[:4]
            key = (qp, psn)
            if "retransmission" in comment:
                seen_again.add((key, i))
            # A first transmission lost must go again (a lost resend may be of a packet the
            # responder already holds).
            if re.search(r"emu: (drop|corrupt)", comment) and "retransmission" not in comment and op and int(op, 0) & 0x1f not in (0x11, 0x12) \
                    and int(op, 0) & 0x1f not in range(0x0d, 0x11):
                lost.append((key, i))
        missing = [k for k, i in lost if not any(k2 == k and j > i for k2, j in seen_again)]
        print(f"lost request packets {len(lost)}, not retransmitted {len(missing)}")
        if missing:
            print("FAIL: lost packets never sent again:", missing[:10])
            ok = False
    finally:
        if srv is not None and srv.poll() is None:
            srv.kill()
            srv.wait()
        for f in (seg, capture):
            with contextlib.suppress(OSError):
                os.unlink(f)
    print("PASS" if ok else "FAIL", a.name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
