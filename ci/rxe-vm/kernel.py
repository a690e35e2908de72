# SPDX-License-Identifier: BSD-2-Clause
"""Debian 12's own kernel for the soft-RoCE VM: fetched with `apt-get download` into a cache
directory (never installed on the host), unpacked with `dpkg-deb -x`, indexed with `depmod -b`, and
the modules rdma_rxe and the VM's plumbing need, in load order, from that modules.dep."""
import fcntl
import glob
import os
import shutil
import subprocess

# What the VM loads by name; everything they depend on comes from modules.dep. crc32_generic is
# here because rxe asks the crypto API for "crc32" by name (its ICRC), which no symbol records.
ROOTS = ["virtio_pci", "9pnet_virtio", "9p", "dummy", "crc32_generic", "rdma_rxe", "rdma_ucm"]
META = "linux-image-amd64"


class Unusable(Exception):
    """The VM cannot run here; the message says why (rxe_vm.py: a failure, exit 4, unless
    EMU_RXEVM_OPTIONAL=1 makes it a skip)."""


def _run(argv, cwd=None):
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise Unusable(f"{' '.join(argv)} failed ({p.returncode}): {p.stdout.strip()[-400:]}")
    return p.stdout


def fetch(cache: str) -> str:
    """The unpacked kernel package under `cache` (downloaded and unpacked on first use)."""
    for tool in ("apt-get", "apt-cache", "dpkg-deb", "depmod"):
        if not shutil.which(tool):
            raise Unusable(f"{tool} not found (Debian's apt, dpkg and kmod fetch the VM's kernel)")
    deps = _run(["apt-cache", "depends", META])
    image = next((l.split()[-1] for l in deps.splitlines()
                  if "Depends: linux-image-" in l), None)
    if not image:
        raise Unusable(f"apt-cache depends {META} names no linux-image package")
    root = os.path.join(cache, image)
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # runs in parallel (ctest -j) fetch and unpack once
        _unpack(cache, image, root)
    return root


def _unpack(cache: str, image: str, root: str) -> None:
    if not os.path.exists(os.path.join(root, ".complete")):
        debs = os.path.join(cache, "debs")
        os.makedirs(debs, exist_ok=True)
        if not glob.glob(os.path.join(debs, image + "_*.deb")):
            _run(["apt-get", "download", "-q", image], cwd=debs)
        shutil.rmtree(root, ignore_errors=True)
        _run(["dpkg-deb", "-x", glob.glob(os.path.join(debs, image + "_*.deb"))[0], root])
        _run(["depmod", "-b", root, release_of(root)])
        open(os.path.join(root, ".complete"), "w").close()


def release_of(root: str) -> str:
    mods = glob.glob(os.path.join(root, "lib/modules/*/"))
    if len(mods) != 1 or not glob.glob(os.path.join(root, "boot/vmlinuz-*")):
        raise Unusable(f"{root}: not an unpacked kernel package (boot/vmlinuz-*, lib/modules/REL)")
    return os.path.basename(mods[0].rstrip("/"))


def vmlinuz(root: str) -> str:
    return glob.glob(os.path.join(root, "boot/vmlinuz-" + release_of(root)))[0]


def modules(root: str) -> list:
    """Paths of the modules to insmod, each after the ones it needs."""
    rel = release_of(root)
    mdir = os.path.join(root, "lib/modules", rel)
    dep_file = os.path.join(mdir, "modules.dep")
    if not os.path.exists(dep_file):
        _run(["depmod", "-b", root, rel])
    deps = {}
    with open(dep_file) as f:
        for line in f:
            mod, _, needs = line.partition(":")
            deps[mod] = needs.split()
    by_name = {os.path.basename(m)[:-len(".ko")].replace("-", "_"): m for m in deps}
    missing = [r for r in ROOTS if r not in by_name]
    if missing:
        raise Unusable(f"kernel {rel} has no module {', '.join(missing)} "
                       f"(modules.dep in {mdir}): this kernel cannot run soft-RoCE")
    order = []

    def visit(m):
        # modules.dep lists every transitive dependency, nearest first; load the farthest first.
        for d in reversed(deps[m]):
            visit(d)
        if m not in order:
            order.append(m)

    for r in ROOTS:
        visit(by_name[r])
    return [os.path.join(mdir, m) for m in order]
