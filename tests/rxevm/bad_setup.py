#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Bad set-ups of the soft-RoCE VM get a clear message and a failing exit status, never a hang or a
silent skip (a skip, 77, only where EMU_RXEVM_OPTIONAL=1 declares the machine unable):

  bad_setup.py --rxe-vm PATH --case no_qemu|no_rxe|kernel_does_not_boot|not_up_in_time

no_qemu and no_rxe need no boot (a stand-in kernel directory whose modules.dep lists what rxe_vm.py
looks for, or all but rdma_rxe); kernel_does_not_boot gives qemu a vmlinuz that is no kernel;
not_up_in_time boots the real kernel with a 1 s bound. Each checks that qemu is gone afterwards.
no_qemu and no_rxe run twice: by default (exit 4, a failure) and with EMU_RXEVM_OPTIONAL=1 (77);
a malformed EMU_RXEVM_OPTIONAL is refused.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../ci/rxe-vm"))
import kernel  # noqa: E402

REL = "6.1.0-0-standin"


def standin_kernel(root, modules):
    mdir = os.path.join(root, "lib/modules", REL, "kernel")
    os.makedirs(mdir)
    os.makedirs(os.path.join(root, "boot"))
    with open(os.path.join(root, "boot", "vmlinuz-" + REL), "wb") as f:
        f.write(b"not a kernel\n")
    with open(os.path.join(mdir, "..", "modules.dep"), "w") as f:
        for m in modules:
            open(os.path.join(mdir, m + ".ko"), "wb").close()
            f.write(f"kernel/{m}.ko:\n")
    return root


def run(rxe_vm, args, env=None):
    p = subprocess.run([sys.executable, rxe_vm, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=240)
    print(f"$ rxe_vm.py {' '.join(args)}  -> exit {p.returncode}\n{p.stdout}")
    return p.returncode, p.stdout


def qemu_gone(out):
    for pid in re.findall(r"qemu pid (\d+)", out):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"qemu-system" in f.read():
                    return False
        except OSError:
            pass
    return True


def expect(rc, out, want_rc, want_text):
    if rc != want_rc or want_text not in out:
        print(f"FAIL: expected exit {want_rc} and '{want_text}'")
        return 1
    if not qemu_gone(out):
        print("FAIL: a qemu process was left behind")
        return 1
    print(f"PASS: exit {rc}, '{want_text}'")
    return 0


def unusable_both_ways(rxe_vm, args, env, want_text):
    """A VM that cannot run: exit 4 by default, 77 only under EMU_RXEVM_OPTIONAL=1, refused for a
    malformed value."""
    env = dict(env)
    env.pop("EMU_RXEVM_OPTIONAL", None)
    rc, out = run(rxe_vm, args, env)
    bad = expect(rc, out, 4, want_text)
    rc, out = run(rxe_vm, args, dict(env, EMU_RXEVM_OPTIONAL="1"))
    bad |= expect(rc, out, 77, want_text)
    rc, out = run(rxe_vm, args, dict(env, EMU_RXEVM_OPTIONAL="yes"))
    bad |= expect(rc, out, 1, "EMU_RXEVM_OPTIONAL='yes': allowed values are 0 and 1")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rxe-vm", required=True)
    ap.add_argument("--case", required=True,
                    choices=["no_qemu", "no_rxe", "kernel_does_not_boot", "not_up_in_time"])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rxevm-bad-") as tmp:
        if a.case == "no_qemu":
            k = standin_kernel(os.path.join(tmp, "k"), kernel.ROOTS)
            os.makedirs(os.path.join(tmp, "bin"))  # a PATH with no qemu on it
            return unusable_both_ways(a.rxe_vm, ["--kernel-dir", k, "true"],
                                      dict(os.environ, PATH=os.path.join(tmp, "bin")),
                                      "no qemu-system-x86_64 on PATH")
        if a.case == "no_rxe":
            k = standin_kernel(os.path.join(tmp, "k"), [m for m in kernel.ROOTS if m != "rdma_rxe"])
            return unusable_both_ways(a.rxe_vm, ["--kernel-dir", k, "true"], os.environ,
                                      f"kernel {REL} has no module rdma_rxe")
        if not shutil.which("qemu-system-x86_64"):
            print("FAIL: no qemu-system-x86_64 here (ci/setup.sh installs qemu-system-x86)")
            return 1
        if a.case == "kernel_does_not_boot":
            k = standin_kernel(os.path.join(tmp, "k"), kernel.ROOTS)
            rc, out = run(a.rxe_vm, ["--kernel-dir", k, "--accel", "tcg", "true"])
            return expect(rc, out, 3, "the VM stopped before rxe0 was up")
        rc, out = run(a.rxe_vm, ["--check"])
        if rc != 0:
            print("FAIL: the VM cannot run here: " + out.strip())
            return 1
        rc, out = run(a.rxe_vm, ["--boot-timeout", "1", "--accel", "tcg", "true"])
        return expect(rc, out, 3, "the VM was not up with rxe0 within 1s (tcg)")


if __name__ == "__main__":
    sys.exit(main())
