#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The SIGKILL sweep (issue 16 item 3; docs/design/reliability.md, "Process death").

  kill_sweep.py --emu-run PATH --emu-ctl PATH --kills N --seed S [--kinds rc,cm]
                [--min-per-kind M] [--xrc-test BINARY --xrc-iterations K] [--max-n M]

Each kill: two unmodified Debian programs under emu-run, on a fabric of their own — an
ibv_rc_pingpong pair (kind rc) or an rping pair over RDMA CM (kind cm) — one of them (the victim)
with EMU_KILL_AT=POINT:N, POINT and N drawn from the seed among the points its program passes.
A victim that ends by itself, exit 0, without reaching its point is a miss (the draw goes on;
misses are counted); one that exits with another code (it failed to start, or failed on its own)
is a failure, as is a server victim that neither listened nor was killed before it could.
Then, every step bounded by a deadline and none of them a sleep:
  - the census (`emu-ctl census --json`, whose attach sweeps the dead first) must answer: a lock
    the dead held and nobody took over would hang it; nothing may be owned by the dead, and the
    heap audit must find 0 leaked blocks;
  - the survivor must end by itself — finished, or an error completion (its sends to the dead end
    in IBV_WC_RETRY_EXC_ERR, a CM peer's death in a DISCONNECTED event) — or be found waiting for
    the dead with nothing owed: alive, every QP of its own with no send the device has not executed
    (census sq_pending 0), as a receive or a TCP read from a dead peer waits on hardware. Then it
    is killed. An rping survivor of a kill at a point passed only once connected
    (CM_CONNECTED_POINTS) may not wait: its CM reports the death. Anything else is a hang;
  - the survivor must not die of a signal (a crash) but the sweep's own SIGKILL; after a miss
    (nobody killed) it must exit 0, as its victim did; after a kill, 0 or an error exit (its
    peer's death seen) or the sweep's SIGKILL when it waited for the dead;
  - no output may show a race the device recorded, and once every process is gone the fabric's
    census is empty and its segment file gone.
--xrc-test runs XrcKill.RandomKills (three processes, one or two killed at a random step) for K
iterations with the same seed; its kills count too (one or two per iteration, as it prints), and
it must pass, its one test run (a filter matching nothing runs 0 tests and exits 0).
Prints one line per kill and the totals: `kills K (rc R, cm C, xrc X) misses M hangs H crashes C
bad_exits B dead_owned D leaked_heap_blocks L races R waited_for_dead W retry_exc_err E`. Exit 0
iff hangs, crashes, bad_exits, dead_owned, leaked_heap_blocks and races are 0, at least N pair
kills were made, at least M (--min-per-kind) of each kind, and at least K of XRC (one per
iteration at least).
"""
import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cm"))
from cm_pair import Proc, listener_name, wait_until  # noqa: E402
from pair import listening  # noqa: E402

# The points each program passes, with the largest N worth drawing for it (passes per run; cq_lock
# is passed by the polls that find a completion: an empty poll takes no lock).
RC_POINTS = {"doorbell": 300, "qp_lock": 300, "cq_lock": 500, "bf_copy": 300,
             "heap_alloc": 5, "slot_create": 5, "slot_destroy": 1, "engine_lock": 300,
             "recv_lock": 300, "recv_cqe_slot": 300, "recv_cqe": 300}
CM_POINTS = {"doorbell": 200, "qp_lock": 200, "cq_lock": 200, "heap_alloc": 5,
             "slot_create": 5, "engine_lock": 200, "recv_lock": 200, "recv_cqe_slot": 200,
             "recv_cqe": 200, "event_raise": 200,
             "cm_req_sent": 1, "cm_established": 1}
ONLY = {"cm_req_sent": "client", "cm_established": "server"}  # who passes it
# Points an rping passes only once connected: after a kill there the survivor's CM gets the
# peer's death as DISCONNECTED and rping must end by itself; waiting for good is a hang. (Before
# the connection, a server waiting for a client that died waits for good, as on hardware.)
CM_CONNECTED_POINTS = {"doorbell", "qp_lock", "cq_lock", "engine_lock", "recv_lock",
                       "recv_cqe_slot", "recv_cqe", "event_raise", "cm_established"}
# rping's client after a failed connect joins its CQ thread, which waits for a completion that
# nothing makes (no QP went to ERR): it waits for good, on hardware too. A server killed at
# cm_established (the RTU received) leaves the client ESTABLISHED and DISCONNECTED back to back,
# and when its main thread wakes after both it reads "wait for CONNECTED state 10" and takes that
# path (1 run in 5 beside a busy machine). Its own line says so; it is no hang of ours.
RPING_CONNECT_FAILED = "connect error"
DEADLINE = 120  # seconds for any one step: generous on a loaded machine, never an assertion


class Sweep:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.totals = dict(kills=0, rc=0, cm=0, xrc=0, misses=0, hangs=0, crashes=0, bad_exits=0,
                           dead_owned=0, leaked_heap_blocks=0, waited_for_dead=0, races=0,
                           retry_exc=0)
        self.shm = os.environ.get("EMU_SHM_DIR", "/dev/shm")

    def env(self, fabric):
        e = dict(os.environ)
        e.update(EMU_FABRIC=fabric, EMU_RACE_LOG="1", EMU_ACK_TIMEOUT_SCALE="0.01")
        return e

    def census(self, env):
        try:
            out = subprocess.run([self.a.emu_ctl, "census", "--json"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=DEADLINE).stdout
        except subprocess.TimeoutExpired:
            return None
        # The fabric's last process gone and its segment removed with it (the survivor ended
        # between the kill and this census): nothing is left, which is an empty census.
        if "has no segment" in out:
            return dict(objects=[], dead_owned=[], locks_held_by_dead=[], leaked_heap_blocks=0)
        try:
            return json.loads(out)
        except ValueError:
            print("census said:", out)
            return None

    def fail(self, what, key, label, procs):
        self.totals[key] += 1
        print(f"FAIL {label}: {what}")
        for name, p in procs:
            print(f"--- {name}\n{p.text()}")

    # Nothing owed to the survivor: its QPs hold no send the device has not executed.
    def waits_for_dead(self, env, pid):
        c = self.census(env)
        if c is None:
            return False
        return all(o["sq_pending"] == 0 for o in c["objects"]
                   if o["kind"] == "qp" and o["owner_pid"] == pid)

    # The survivor ended, or (the victim killed) waits for it with nothing owed: looked at between
    # bounded waits for its exit, until the deadline.
    def survivor_done(self, surv, env, killed):
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                surv.p.wait(timeout=0.5)
                return True
            except subprocess.TimeoutExpired:
                pass
            if killed and self.waits_for_dead(env, surv.p.pid):
                return True
        return surv.p.poll() is not None

    # dead: the victim's pid, or None once every process is gone. (A survivor that exits while the
    # census runs may be seen dead after the census's sweep: its objects go with the next sweep.)
    def check_census(self, c, label, procs, dead=None):
        if c is None:
            self.fail("the census did not answer (a lock left held?)", "hangs", label, procs)
            return
        left = [o for o in c["dead_owned"] if dead is None or o["owner_pid"] == dead]
        if left:
            self.fail(f"owned by the dead: {left}", "dead_owned", label, procs)
        if c["locks_held_by_dead"]:
            self.fail(f"locks held by the dead after the sweep: {c['locks_held_by_dead']}",
                      "hangs", label, procs)
        if c["leaked_heap_blocks"] != 0:
            self.totals["leaked_heap_blocks"] += max(1, c["leaked_heap_blocks"])
            print(f"FAIL {label}: leaked heap blocks {c['leaked_heap_blocks']}")
        if dead is None and c["objects"]:
            self.fail(f"left after every process went: {c['objects']}", "dead_owned", label, procs)

    def one(self, i, kind):
        points = RC_POINTS if kind == "rc" else CM_POINTS
        point = self.rng.choice(sorted(points))
        n = self.rng.randint(1, min(points[point], self.a.max_n))
        victim = ONLY.get(point) or self.rng.choice(["server", "client"])
        fabric = f"kill-{kind}-{os.getpid()}-{i}"
        env = self.env(fabric)
        label = f"#{i} {kind} {victim} at {point}:{n}"
        # A block of its own below the kernel's ephemeral range (32768-60999), which no other
        # test uses: a port there is never handed to another process's outgoing connection.
        port = 21000 + (os.getpid() * 7 + i) % 1000
        if kind == "rc":
            srv_cmd = f"ibv_rc_pingpong -p {port} -n 300 -s 1024"
            cli_cmd = f"ibv_rc_pingpong -p {port} -n 300 -s 1024 127.0.0.1"
        else:
            srv_cmd = f"rping -s -a 127.0.0.1 -p {port} -C 300"
            cli_cmd = f"rping -c -a 127.0.0.1 -p {port} -C 300"
        # The provider copies through BlueFlame on a locked register only when told to
        # (EMU_BLUEFLAME): a death inside the copy needs the copy.
        if point == "bf_copy":
            env["EMU_BLUEFLAME"] = "always"
        run = lambda cmd, who: Proc([self.a.emu_run] + shlex.split(cmd), dict(
            env, **({"EMU_KILL_AT": f"{point}:{n}"} if who == victim else {})))
        procs = {"server": run(srv_cmd, "server")}
        up = (lambda: listening(port)) if kind == "rc" else \
            (lambda: listener_name(fabric, "106", port))
        if not wait_until(up, DEADLINE, procs["server"]):
            if victim == "server" and procs["server"].finish(DEADLINE) is not None:
                pass  # ended before it listened (a kill, or a failure judged below): no client
            else:
                self.fail("the server never listened", "hangs", label, procs.items())
                procs["server"].p.kill()
                procs["server"].finish(DEADLINE)
                return self.finish_fabric(env, fabric, label, procs)
        else:
            procs["client"] = run(cli_cmd, "client")
        vic = procs.get(victim)
        surv_name = "client" if victim == "server" else "server"
        surv = procs.get(surv_name)
        rc = vic.finish(DEADLINE) if vic else None
        if vic and rc is None:
            self.fail("the victim neither died nor ended", "hangs", label, procs.items())
        killed = rc == -9 and "EMU_KILL_AT: pid" in vic.text()
        if rc is not None and rc < 0 and not killed:
            self.fail(f"the victim crashed (signal {-rc}) before its point", "crashes", label,
                      procs.items())
        elif rc is not None and rc > 0:
            # Not a miss: a victim that failed to start (a port taken, a device refused) or
            # failed by itself never tested the point it was given.
            self.fail(f"the victim exited {rc} without reaching its point", "bad_exits", label,
                      procs.items())
        if rc == 0:
            self.totals["misses"] += 1
        elif killed:
            self.totals["kills"] += 1
            self.totals[kind] += 1
            pid = int(re.search(r"EMU_KILL_AT: pid (\d+)", vic.text()).group(1))
            self.check_census(self.census(env), label, procs.items(), dead=pid)
        if surv:
            ended = self.survivor_done(surv, env, killed)
            if surv.p.poll() is None:
                if ended and kind == "cm" and point in CM_CONNECTED_POINTS and \
                        RPING_CONNECT_FAILED not in surv.text():
                    self.fail("the survivor did not end after its connected peer's death",
                              "hangs", label, procs.items())
                elif ended:
                    self.totals["waited_for_dead"] += 1
                else:
                    self.fail("the survivor hangs with sends owed", "hangs", label, procs.items())
                surv.p.kill()
            surv.finish(DEADLINE)
            if surv.p.returncode is not None and surv.p.returncode < 0 and \
                    surv.p.returncode != -9:
                self.fail(f"the survivor crashed (signal {-surv.p.returncode})", "crashes", label,
                          procs.items())
            src = surv.p.returncode
            # After a miss the pair ran to its end: the survivor too. After a kill, an error
            # exit is the survivor seeing its peer's death; a SIGKILL is the sweep's own.
            # (Crashes and hangs are counted above.)
            if rc == 0 and src != 0:
                self.fail(f"the survivor exited {src} though its peer ended normally", "bad_exits",
                          label, procs.items())
            if "transport retry counter exceeded" in surv.text():
                self.totals["retry_exc"] += 1
        for name, p in procs.items():
            if re.search(r"^rdmaemu race:", p.text(), re.M):
                self.fail(f"{name} reported a race", "races", label, procs.items())
        print(f"{label}: {'killed' if killed else 'missed' if rc == 0 else 'failed'}, survivor "
              f"{'exit ' + str(surv.p.returncode) if surv else 'none'}", flush=True)
        self.finish_fabric(env, fabric, label, procs)

    def finish_fabric(self, env, fabric, label, procs):
        self.check_census(self.census(env), label, procs.items())
        seg = os.path.join(self.shm, f"rdmaemu-{os.getuid()}-{fabric}")
        if os.path.exists(seg):
            self.fail("the fabric's segment file was left", "dead_owned", label, procs.items())
            os.unlink(seg)

    def xrc(self):
        env = dict(os.environ, EMU_XRC_KILL_ITERATIONS=str(self.a.xrc_iterations),
                   EMU_XRC_KILL_SEED=str(self.a.seed), EMU_FABRIC=f"kill-xrc-{os.getpid()}")
        try:
            p = subprocess.run([self.a.emu_run, self.a.xrc_test,
                                "--gtest_filter=XrcKill.RandomKills"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=DEADLINE * 10)
        except subprocess.TimeoutExpired:
            self.totals["hangs"] += 1
            print("FAIL xrc: XrcKill.RandomKills timed out")
            return
        kills = sum(int(k) for k in re.findall(r"^XRC kills (\d+)$", p.stdout, re.M))
        self.totals["kills"] += kills
        self.totals["xrc"] += kills
        if p.returncode == 0 and not re.search(r"^\[  PASSED  \] 1 test\.$", p.stdout, re.M):
            self.totals["bad_exits"] += 1
            print("FAIL xrc: XrcKill.RandomKills did not run (renamed?)\n" + p.stdout[-2000:])
        if p.returncode != 0:
            self.totals["hangs" if "hangs" in p.stdout or "did not answer" in p.stdout
                        else "dead_owned"] += 1
            print("FAIL xrc:\n" + p.stdout[-6000:])
        print(f"xrc: {self.a.xrc_iterations} iterations, {kills} kills, exit {p.returncode}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--kills", type=int, required=True, help="kills of rc and cm pairs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default="rc,cm")
    ap.add_argument("--min-per-kind", type=int, default=1, help="kills of each kind at least")
    ap.add_argument("--max-n", type=int, default=1 << 30, help="cap on N")
    ap.add_argument("--xrc-test")
    ap.add_argument("--xrc-iterations", type=int, default=0)
    a = ap.parse_args()
    s = Sweep(a)
    kinds = a.kinds.split(",")
    t0 = time.monotonic()
    i = 0
    while s.totals["rc"] + s.totals["cm"] < a.kills and i < a.kills * 4:
        s.one(i, kinds[i % len(kinds)])
        i += 1
    if a.xrc_test and a.xrc_iterations:
        s.xrc()
    t = s.totals
    secs = time.monotonic() - t0
    print(f"kills {t['kills']} (rc {t['rc']}, cm {t['cm']}, xrc {t['xrc']}) misses {t['misses']} "
          f"hangs {t['hangs']} crashes {t['crashes']} bad_exits {t['bad_exits']} "
          f"dead_owned {t['dead_owned']} leaked_heap_blocks "
          f"{t['leaked_heap_blocks']} races {t['races']} waited_for_dead {t['waited_for_dead']} "
          f"retry_exc_err {t['retry_exc']} in {secs:.0f} s ({t['kills'] / max(secs, 1):.2f}/s)")
    short = [f"{k} {t[k]} < {a.min_per_kind}" for k in kinds if t[k] < a.min_per_kind]
    if a.xrc_test and a.xrc_iterations and t["xrc"] < a.xrc_iterations:
        short.append(f"xrc {t['xrc']} < {a.xrc_iterations} (one per iteration at least)")
    if short:
        print("FAIL: too few kills:", ", ".join(short))
    ok = (t["rc"] + t["cm"] >= a.kills and not short and not any(t[k] for k in (
        "hangs", "crashes", "bad_exits", "dead_owned", "leaked_heap_blocks", "races")))
    print("PASS kill_sweep" if ok else "FAIL kill_sweep")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
