#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The segment's life in a 64 MiB tmpfs (issue 16 item 7): fabrics used one after another each work
(ibv_devinfo and an ibv_rc_pingpong pair), and the tmpfs is empty after the last process of each
has exited, or was SIGKILLed and the next process (of another fabric) has attached.

  shm_life.py --emu-run PATH --emu-ctl PATH [--fabrics 20] [--port P] [--timeout S]

The tmpfs is a real one of 64 MiB, mounted in a user and mount namespace of this test's own
(`unshare -rm`), where a filled tmpfs also shows an attach with no room failing with the message,
not a SIGBUS. Where the kernel or the container forbids that mount the test fails, with unshare's
message: without the real tmpfs the full-tmpfs check cannot run, and a pass would hide that (the
fix: allow unprivileged user namespaces, kernel.unprivileged_userns_clone=1, or run the container
with the mount allowed). Every 2nd fabric leaves a
server holding its segment alive while the next fabric works, then SIGKILLs it. `emu-ctl fabrics`,
`rm` and `persist` are checked on the way. Every process is bounded by --timeout; every pingpong
process must show no race event (EMU_RACE_LOG=1).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pair import check, listening  # noqa: E402

TMPFS = "64m"
INVALID = r"invalid data in page"  # ibv_rc_pingpong -c on a bad buffer (it goes on, exit 0)


class Run:
    def __init__(self, a, shm_dir):
        self.a = a
        self.dir = shm_dir
        self.base = dict(os.environ, EMU_SHM_DIR=shm_dir, EMU_RACE_LOG="1")
        self.base.pop("EMU_FABRIC_PERSIST", None)
        self.ok = True

    def env(self, fabric):
        return dict(self.base, EMU_FABRIC=fabric)

    def files(self):
        return sorted(os.listdir(self.dir))

    def seg(self, fabric):
        return os.path.join(self.dir, f"rdmaemu-{os.getuid()}-{fabric}")

    def expect(self, cond, what):
        if not cond:
            print("FAIL", what)
            self.ok = False
        return cond

    def run(self, fabric, cmd, patterns=(), rc=0):
        p = subprocess.run(cmd, env=self.env(fabric), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=self.a.timeout)
        self.ok &= check(f"{fabric}: {' '.join(cmd[1:3])}", p.stdout, p.returncode, rc,
                         list(patterns), [r"^rdmaemu race:", r"[Bb]us error", INVALID])
        return p.stdout

    def ctl(self, *args, rc=0, fabric="none"):
        return self.run(fabric, [self.a.emu_ctl, *args], rc=rc)

    def devinfo(self, fabric):
        self.run(fabric, [self.a.emu_run, "ibv_devinfo", "-d", "emu0"],
                 [r"hca_id:\s+emu0", r"state:\s+PORT_ACTIVE"])

    def server(self, fabric, port):
        """An ibv_rc_pingpong server, returned once it listens (its device context is open)."""
        srv = subprocess.Popen([self.a.emu_run, "ibv_rc_pingpong", "-d", "emu0", "-c", "-p", str(port)],
                               env=self.env(fabric), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        polls = int(self.a.timeout / 0.01)
        while not listening(port):
            try:  # a bounded wait on a condition: the server's exit ends it too
                srv.wait(timeout=0.01)
                print("FAIL server of", fabric, "exited before listening:", srv.communicate()[0])
                self.ok = False
                return None
            except subprocess.TimeoutExpired:
                polls -= 1
                if polls == 0:
                    srv.kill()
                    print("FAIL server of", fabric, "never listened:", srv.communicate()[0])
                    self.ok = False
                    return None
        return srv

    def pingpong(self, fabric, port):
        srv = self.server(fabric, port)
        if not srv:
            return
        cmd = [self.a.emu_run, "ibv_rc_pingpong", "-d", "emu0", "-c", "-p", str(port), "localhost"]
        self.run(fabric, cmd, [r"^1000 iters in"])
        try:
            out = srv.communicate(timeout=self.a.timeout)[0]
        except subprocess.TimeoutExpired:
            srv.kill()
            out = srv.communicate()[0]
        self.ok &= check(f"{fabric}: server", out, srv.returncode, 0, [r"^1000 iters in"],
                         [r"^rdmaemu race:", INVALID])


def full_tmpfs(r):
    """A tmpfs all but 256 KiB full (less than the Header, 0.6 MiB since the object tables moved to
    heap chunks): the attach that cannot reserve its header is an error with the message (never a
    SIGBUS) and leaves no file behind."""
    filler = os.path.join(r.dir, "filler")
    st = os.statvfs(r.dir)
    fd = os.open(filler, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize - (256 << 10))
        p = subprocess.run([r.a.emu_run, "ibv_devinfo", "-d", "emu0"], env=r.env("full"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=r.a.timeout)
        print(p.stdout)
        r.expect(p.returncode > 0, f"ibv_devinfo in a full tmpfs: exit {p.returncode}")
        r.expect("no room for" in p.stdout and f"EMU_SHM_DIR={r.dir}" in p.stdout,
                 "the message names the room asked and EMU_SHM_DIR")
        r.expect(r.files() == ["filler"], f"a failed attach left {r.files()}")
    finally:
        os.close(fd)
        os.unlink(filler)


def scenario(r, n, port):
    # persist / fabrics / rm on a fabric nobody uses.
    r.ctl("persist", "kept", "on")
    r.expect(os.path.exists(r.seg("kept")), "persist on did not make the segment")
    listing = r.ctl("fabrics")
    r.expect(any(l.split()[:1] == ["kept"] and l.rstrip().endswith("yes") for l in listing.splitlines()),
             "emu-ctl fabrics does not show 'kept' persistent:\n" + listing)
    r.devinfo("other")
    r.expect(r.files() == [os.path.basename(r.seg("kept"))], f"only 'kept' should stay: {r.files()}")
    r.ctl("rm", "kept")
    r.expect(r.files() == [], f"rm left {r.files()}")

    holder = None  # (fabric, server process) holding its segment while the next fabric works
    peak = 0
    for i in range(1, n + 1):
        fabric = f"life-{i}"
        r.devinfo(fabric)
        if holder:
            hf, hp = holder
            r.expect(os.path.exists(r.seg(hf)), f"{hf}'s segment went while its process lives")
            r.ctl("rm", hf, rc=1)  # refused: a process is attached
            hp.send_signal(signal.SIGKILL)
            hp.communicate(timeout=r.a.timeout)
            r.expect(os.path.exists(r.seg(hf)), f"{hf}'s segment went before another attach")
        r.pingpong(fabric, port + 2 * i)
        # The pair's exits removed its segment; its attaches removed the killed holder's.
        r.expect(r.files() == [], f"after fabric {i}: {r.files()} left")
        holder = None
        if i % 2:
            srv = r.server(fabric, port + 2 * i + 1)
            if srv:
                holder = (fabric, srv)
                peak = max(peak, os.stat(r.seg(fabric)).st_blocks * 512)
    if holder:
        holder[1].kill()
        holder[1].communicate(timeout=r.a.timeout)
        r.devinfo("last")
    r.expect(r.files() == [], f"at the end: {r.files()} left")
    st = os.statvfs(r.dir)
    print(f"{n} fabrics; a fabric with a server attached held {peak >> 10} KiB; "
          f"tmpfs free {st.f_bfree * st.f_frsize >> 20} of {st.f_blocks * st.f_frsize >> 20} MiB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--fabrics", type=int, default=20)
    ap.add_argument("--port", type=int, default=19400)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--inside", help=argparse.SUPPRESS)  # the tmpfs mounted by the namespace
    a = ap.parse_args()
    if a.inside:
        r = Run(a, a.inside)
        full_tmpfs(r)
        scenario(r, a.fabrics, a.port)
        print("PASS" if r.ok else "FAIL", "shm_life (64 MiB tmpfs)")
        return 0 if r.ok else 1
    top = tempfile.mkdtemp(prefix="shm-life-", dir=os.environ.get("EMU_SHM_DIR", "/dev/shm"))
    try:
        try:
            probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                                    f"mount -t tmpfs -o size={TMPFS} tmpfs {top}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=a.timeout)
            said, rc = probe.stdout, probe.returncode
        except OSError as e:  # no unshare at all
            said, rc = str(e), None
        if rc != 0:
            print(f"FAIL shm_life: `unshare -rm` cannot mount a tmpfs here (exit {rc}): {said}\n"
                  "The full-tmpfs check needs it: allow unprivileged user namespaces "
                  "(sysctl kernel.unprivileged_userns_clone=1) or the mount in the container.")
            return 1
        me = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--inside", top]
        inner = f"mount -t tmpfs -o size={TMPFS} tmpfs {top} && exec \"$@\""
        return subprocess.run(["unshare", "-rm", "sh", "-c", inner, "sh", *me],
                              timeout=a.timeout * (3 * a.fabrics + 10)).returncode
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
