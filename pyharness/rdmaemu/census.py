# SPDX-License-Identifier: BSD-2-Clause
"""The census: what objects live, per process and type. On emu0 the fabric's, taken as `emu-ctl
census --json` takes it: in a short-lived process that attaches (which sweeps dead processes
first), so this process's own mapping is never attached a second time. On a real device the
kernel's resource tracking (RDMA netlink, what `rdma resource show` prints), read by the module;
the kernel has no XRC domains or TGT handles to show, so those lists are empty there."""
import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Dict, Iterable, Optional

from ._paths import BIN_DIR


@dataclass
class Census:
    raw: dict = field(repr=False)

    @property
    def objects(self) -> list:
        return self.raw["objects"]

    @property
    def xrcds(self) -> list:
        return self.raw["xrcds"]

    @property
    def tgt_qps(self) -> list:
        return self.raw["tgt_qps"]

    @property
    def dead_owned(self) -> list:
        return self.raw["dead_owned"]

    def count(self, kind: str, type_: str = "") -> int:
        """Live objects of a kind ("qp", "cq", "srq", "mr", "pd", "context"), of a type if given."""
        return sum(1 for o in self.objects
                   if o["kind"] == kind and (not type_ or o.get("type") == type_))

    def tgt(self, qpn: int):
        """The TGT QP of that number, or None."""
        return next((t for t in self.tgt_qps if t["qpn"] == qpn), None)

    def xrcd_of_inode(self, inode: int):
        return next((x for x in self.xrcds if x["inode"] == inode), None)


    def by_role(self, roles: Dict[int, str]) -> Dict[str, int]:
        """Live objects counted by owner and kind, type and state ("a qp RC RESET": 1), the owner
        named by `roles` (pid -> name; "?" for another process): what two runs, or two devices,
        can compare, with no pids or numbers in it."""
        counts: Dict[str, int] = {}
        for o in self.objects:
            words = [roles.get(o["owner_pid"], "?"), o["kind"], o.get("type", ""), o.get("state", "")]
            key = " ".join(w for w in words if w)
            counts[key] = counts.get(key, 0) + 1
        return counts


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kernel_census(device: str, pids: Optional[Iterable[int]] = None) -> Census:
    """A real device's census from the kernel's RDMA netlink, of the processes `pids` only if given
    (the kernel's census is the whole machine's: other programs, and the kernel's own objects, such
    as ib_core's GSI QP, which have no pid). An object whose owner no longer runs is dead_owned:
    the kernel releases a process's objects as its files close, before it can be reaped."""
    from ._rdmaemu import kernel_objects
    keep = None if pids is None else set(pids)
    objects = [dict(o, owner_alive=_alive(o["owner_pid"])) for o in kernel_objects(device)
               if o["owner_pid"] and (keep is None or o["owner_pid"] in keep)]
    return Census({"device": device, "source": "netlink", "objects": objects, "xrcds": [],
                   "tgt_qps": [], "dead_owned": [o for o in objects if not o["owner_alive"]]})


def census(fabric: str = None, timeout: float = 30, device: str = None,
           pids: Optional[Iterable[int]] = None) -> Census:
    """The census of `fabric` (default: $EMU_FABRIC); for a real `device` (not emuN), the
    kernel's census of that device (kernel_census, `pids` as there)."""
    if device and not device.startswith("emu"):
        return kernel_census(device, pids)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if fabric:
        env["EMU_FABRIC"] = fabric
    out = subprocess.run([os.path.join(BIN_DIR, "emu-ctl"), "census", "--json"], env=env,
                         check=True, capture_output=True, text=True, timeout=timeout).stdout
    return Census(json.loads(out))
