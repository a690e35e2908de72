#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs commands on soft-RoCE (rdma_rxe, device rxe0) in a VM booting Debian 12's own kernel.

  rxe_vm.py [options] [--] 'COMMAND' ['COMMAND' ...]

Each COMMAND is a bash command line, run in the guest in this directory with the host's own
userspace (the host's / shared read-only over 9p; /tmp, /dev/shm and /run are the guest's own).
Their outputs and exit statuses are printed; the exit status is the first non-zero one, else 0.
Exit 4: the VM cannot run here (no qemu, no static busybox, no kernel with rdma_rxe, the kernel's
fetch failed): the reason is printed, and the tests that need the VM fail with it. Only where
EMU_RXEVM_OPTIONAL=1 is set (a machine known not to run the VM) is that exit 77 instead, which the
tests take as a skip with the reason. Exit 3: the VM was not up in time. Exit 124:
the whole run took longer than --total-timeout. qemu dies with this process, on every path
(PR_SET_PDEATHSIG), and is killed and reaped on every exit. See docs/guides/comparison.md.
"""
import argparse
import ctypes
import fcntl
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import initramfs  # noqa: E402
import kernel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KVM_GET_API_VERSION = 0xAE00
KVM_API_VERSION = 12
KVM_BOOT_BOUND = 30  # s: KVM boots to rxe0 in a few seconds; past this it is not going to
NOT_UP = 3


def kvm_usable() -> bool:
    """/dev/kvm opens read-write and speaks the KVM API qemu expects."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return fcntl.ioctl(fd, KVM_GET_API_VERSION) == KVM_API_VERSION
    except OSError:
        return False
    finally:
        os.close(fd)


def _die_with_parent():
    # qemu must not outlive this process, even when ctest SIGKILLs it at a timeout.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def qemu_argv(qemu, accel, kdir, initrd, io, writable):
    kvm = accel == "kvm"
    return [qemu, "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none",
            "-serial", "stdio", "-no-reboot", "-m", "1024", "-smp", "2",
            "-accel", accel, "-cpu", "host" if kvm else "max",
            "-kernel", kernel.vmlinuz(kdir), "-initrd", initrd,
            "-append", "console=ttyS0 quiet loglevel=3 panic=-1",
            "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev", f"local,id=io,path={io},security_model=none",
            "-device", "virtio-9p-pci,fsdev=io,mount_tag=io",
            "-fsdev", f"local,id=out,path={writable or io},security_model=none",
            "-device", "virtio-9p-pci,fsdev=out,mount_tag=out"]


class Console:
    """The guest's serial console, read line by line against deadlines."""

    def __init__(self, proc, echo):
        self.proc, self.echo, self.buf, self.log, self.eof = proc, echo, b"", [], False

    def next_marker(self, deadline):
        """The next "@@rxevm ..." line, or None at the deadline or when qemu has exited."""
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace").rstrip("\r")
                self.log.append(text)
                if text.startswith("@@rxevm"):
                    return text
                if self.echo:
                    print("console: " + text, flush=True)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.eof = True
                    return None
                self.buf += chunk


def prepare(args):
    """(qemu, kernel dir, module list): what a boot needs, or kernel.Unusable saying what lacks."""
    kdir = args.kernel_dir or kernel.fetch(args.cache)
    mods = kernel.modules(kdir)
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        raise kernel.Unusable("no qemu-system-x86_64 on PATH (install qemu-system-x86)")
    return qemu, kdir, mods


def kvm_verdict_file(cache):
    # KVM can open and answer its API yet not boot a guest (nested virtualisation without the
    # CPU features qemu asks for): the first such boot leaves this note, and later runs on the same
    # host kernel go straight to TCG.
    return os.path.join(cache, f"kvm-does-not-boot-{os.uname().release}")


def choose_accel(args):
    if args.accel != "auto":
        return args.accel
    if kvm_usable() and not os.path.exists(kvm_verdict_file(args.cache)):
        return "kvm"
    return "tcg"


def write_io(io, commands, args):
    with open(os.path.join(io, "path"), "w") as f:
        f.write(io)
    with open(os.path.join(io, "writable"), "w") as f:
        f.write(os.path.abspath(args.writable) if args.writable else "")
    with open(os.path.join(io, "cwd"), "w") as f:
        f.write(os.getcwd())
    # The guest's /tmp is its own tmpfs; a checkout or working directory under the host's /tmp (a
    # CI clone, say) is bound back into it, read-only, at the same path.
    project = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    with open(os.path.join(io, "binds"), "w") as f:
        f.writelines(d + "\n" for d in sorted({project, os.getcwd()}) if d.startswith("/tmp/"))
    env = {k: v for k, v in os.environ.items() if k.startswith("EMU_")}
    env.update(kv.split("=", 1) for kv in args.env)
    env["RXEVM_COMMAND_TIMEOUT"] = str(args.command_timeout)
    with open(os.path.join(io, "env"), "w") as f:
        f.writelines(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    for i, c in enumerate(commands):
        with open(os.path.join(io, f"cmd.{i}"), "w") as f:
            f.write(c + "\n")
    shutil.copy(os.path.join(HERE, "guest.sh"), io)


def boot_and_run(args, qemu, kdir, mods, commands) -> int:
    accel = choose_accel(args)
    rc = boot_once(args, qemu, kdir, mods, commands, accel)
    if rc == NOT_UP and accel == "kvm" and args.accel == "auto":
        os.makedirs(args.cache, exist_ok=True)
        open(kvm_verdict_file(args.cache), "w").close()
        print("rxe-vm: KVM did not boot the guest; again with TCG (and TCG from now on: "
              f"{kvm_verdict_file(args.cache)})", flush=True)
        rc = boot_once(args, qemu, kdir, mods, commands, "tcg")
    return rc


def boot_once(args, qemu, kdir, mods, commands, accel) -> int:
    with tempfile.TemporaryDirectory(prefix="rxe-vm-", dir="/tmp") as io:
        initrd = os.path.join(io, "initramfs.cpio")
        initramfs.build(initrd, os.path.join(HERE, "init"), mods)
        write_io(io, commands, args)
        start = time.monotonic()
        total_deadline = start + args.total_timeout
        argv = qemu_argv(qemu, accel, kdir, initrd, io, args.writable)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
        print(f"rxe-vm: qemu pid {proc.pid} ({accel})", flush=True)
        try:
            return _drive(args, Console(proc, args.verbose), io, accel, start, total_deadline,
                          len(commands))
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _drive(args, con, io, accel, start, total_deadline, count) -> int:
    boot_timeout = args.boot_timeout if accel == "tcg" else min(args.boot_timeout, KVM_BOOT_BOUND)
    marker = con.next_marker(min(start + boot_timeout, total_deadline))
    while marker and marker.startswith("@@rxevm fail"):
        print(f"rxe-vm: {marker[len('@@rxevm '):]}")
        marker = con.next_marker(min(start + boot_timeout, total_deadline))
    if not marker or not marker.startswith("@@rxevm ready"):
        tail = "\n  ".join(con.log[-15:]) or "(no console output)"
        why = ("the VM stopped before rxe0 was up" if con.eof or marker else
               f"the VM was not up with rxe0 within {boot_timeout:g}s")
        print(f"rxe-vm: {why} ({accel}); console's last lines:\n  {tail}")
        return NOT_UP
    uptime = marker.split("uptime=")[1]
    print(f"rxe-vm: rxe0 ready after {time.monotonic() - start:.1f}s wall, "
          f"{uptime}s guest uptime ({accel})", flush=True)
    first_bad = 0
    for i in range(count):
        deadline = min(time.monotonic() + args.command_timeout + 15, total_deadline)
        begin = con.next_marker(deadline)
        end = con.next_marker(deadline) if begin == f"@@rxevm begin {i}" else None
        with open(os.path.join(io, "cmd." + str(i))) as f:
            print(f"rxe-vm: $ {f.read().strip()}")
        if os.path.exists(os.path.join(io, f"out.{i}")):
            with open(os.path.join(io, f"out.{i}"), errors="replace") as f:
                sys.stdout.write(f.read())
        if not end or not end.startswith(f"@@rxevm end {i} rc="):
            late = time.monotonic() >= total_deadline
            how = (" (the VM stopped)" if con.eof else f" within the total {args.total_timeout:g}s"
                   if late else f" within {args.command_timeout}s and the guest's grace")
            print(f"rxe-vm: command {i} did not finish{how}")
            return 1 if con.eof else 124
        rc = int(end.split("rc=")[1])
        print(f"rxe-vm: exit status {rc}" + (" (timed out)" if rc == 124 else ""), flush=True)
        first_bad = first_bad or rc
    return first_bad


CANNOT_RUN = 4  # the VM cannot run here: a failure unless EMU_RXEVM_OPTIONAL=1 allows the skip
SKIP = 77


def optional_vm() -> bool:
    """EMU_RXEVM_OPTIONAL: 0 (the default) or 1; any other value is an error, not a guess."""
    value = os.environ.get("EMU_RXEVM_OPTIONAL", "0")
    if value not in ("0", "1"):
        raise SystemExit(f"rxe-vm: EMU_RXEVM_OPTIONAL={value!r}: allowed values are 0 and 1")
    return value == "1"


def cannot_run(reason) -> int:
    """Says why the VM cannot run; a skip (77) only where the machine was declared unable."""
    print(f"rxe-vm: cannot run the VM: {reason}")
    if optional_vm():
        print("rxe-vm: EMU_RXEVM_OPTIONAL=1: the tests that need the VM skip")
        return SKIP
    print("rxe-vm: this is a failure (ci/setup.sh installs qemu and the kernel is fetched with "
          "apt-get download); on a machine that cannot run the VM, EMU_RXEVM_OPTIONAL=1 makes it "
          "a skip")
    return CANNOT_RUN


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("commands", nargs="*", help="bash command lines to run on rxe0")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/rdmaemu/rxe-vm"),
                    help="where the kernel package is downloaded and unpacked")
    ap.add_argument("--kernel-dir", help="an unpacked kernel package to use instead")
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    ap.add_argument("--boot-timeout", type=float, default=240)
    ap.add_argument("--command-timeout", type=int, default=300)
    ap.add_argument("--total-timeout", type=float, default=900)
    ap.add_argument("--writable", metavar="DIR",
                    help="a host directory the guest may write, at the same path")
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help="set in the guest's environment")
    ap.add_argument("--check", action="store_true",
                    help="only say whether the VM can run here (exit 0, or 4 with the reason; 77 "
                         "where EMU_RXEVM_OPTIONAL=1)")
    ap.add_argument("--verbose", action="store_true", help="echo the guest's console")
    args = ap.parse_args(argv)
    optional_vm()  # a malformed value is refused before anything runs
    if args.writable:
        args.writable = os.path.abspath(args.writable)
    try:
        qemu, kdir, mods = prepare(args)
    except kernel.Unusable as e:
        return cannot_run(e)
    if args.check:
        print(f"rxe-vm: usable ({qemu}, kernel {kernel.release_of(kdir)}, "
              f"{choose_accel(args)})")
        return 0
    try:
        return boot_and_run(args, qemu, kdir, mods, args.commands)
    except kernel.Unusable as e:
        return cannot_run(e)


if __name__ == "__main__":
    sys.exit(main())
