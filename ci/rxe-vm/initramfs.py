# SPDX-License-Identifier: BSD-2-Clause
"""The VM's initramfs: busybox-static, the init script and the kernel modules, as a newc cpio
archive (written here: no cpio tool needed). Userspace beyond that is the host's own, over 9p."""
import os
import shutil
import stat

from kernel import Unusable


def _entry(out, name: str, mode: int, data: bytes, ino: int):
    name_b = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_b), 0]
    out.write(b"070701" + b"".join(b"%08X" % v for v in fields) + name_b)
    out.write(b"\0" * (-(110 + len(name_b)) % 4))
    out.write(data)
    out.write(b"\0" * (-len(data) % 4))


def build(path: str, init_script: str, modules: list) -> None:
    """Writes the archive: /init, /bin/busybox, /modules/NN-name.ko (NN = load order)."""
    busybox = shutil.which("busybox")
    if not busybox or b"ELF" not in open(busybox, "rb").read(4) or _is_dynamic(busybox):
        raise Unusable("no static busybox (install busybox-static; ci/setup.sh does)")
    files = [("init", init_script, 0o755), ("bin/busybox", busybox, 0o755)]
    files += [(f"modules/{i:02d}-{os.path.basename(m)}", m, 0o644) for i, m in enumerate(modules)]
    dirs = ["bin", "dev", "proc", "sys", "host", "io", "modules"]
    with open(path, "wb") as out:
        ino = 1
        for d in dirs:
            _entry(out, d, stat.S_IFDIR | 0o755, b"", ino)
            ino += 1
        for name, src, mode in files:
            with open(src, "rb") as f:
                _entry(out, name, stat.S_IFREG | mode, f.read(), ino)
            ino += 1
        _entry(out, "TRAILER!!!", 0, b"", 0)


def _is_dynamic(path: str) -> bool:
    with open(path, "rb") as f:
        return b"ld-linux" in f.read(1 << 20)
