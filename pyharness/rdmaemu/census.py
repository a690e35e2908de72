"""The fabric's census, taken as `emu-ctl census --json` takes it: in a short-lived process that
attaches (which sweeps dead processes first), so this process's own mapping is never attached a
second time."""
import json
import os
import subprocess
from dataclasses import dataclass, field

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
        """Live objects of a kind ("qp", "cq", "srq", "mr", "pd", "ctx"), of a QP type if given."""
        return sum(1 for o in self.objects
                   if o["kind"] == kind and (not type_ or o.get("type") == type_))

    def tgt(self, qpn: int):
        """The TGT QP of that number, or None."""
        return next((t for t in self.tgt_qps if t["qpn"] == qpn), None)

    def xrcd_of_inode(self, inode: int):
        return next((x for x in self.xrcds if x["inode"] == inode), None)


def census(fabric: str = None, timeout: float = 30) -> Census:
    """The census of `fabric` (default: $EMU_FABRIC)."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if fabric:
        env["EMU_FABRIC"] = fabric
    out = subprocess.run([os.path.join(BIN_DIR, "emu-ctl"), "census", "--json"], env=env,
                         check=True, capture_output=True, text=True, timeout=timeout).stdout
    return Census(json.loads(out))
