# SPDX-License-Identifier: BSD-2-Clause
"""Player resources in the style of rdma-core's tests/base.py: a base (a player with its device
open, a PD, an MR and a CQ) and, on top of it, the RC, UD and XRC roles."""
import os
import tempfile

# XRC policy -> the creator's environment, and whether it behaves as today's kernel or as 2a.
POLICIES = {
    "kernel": ({"EMU_XRC_POLICY": "kernel"}, "kernel"),
    "xrcd": ({"EMU_XRC_POLICY": "xrcd"}, "2a"),
    "creator": ({"EMU_XRC_POLICY": "creator", "EMU_XRC_TGT_LIFETIME": "process"}, "kernel"),
    "creator_xrcd": ({"EMU_XRC_POLICY": "creator", "EMU_XRC_TGT_LIFETIME": "xrcd"}, "2a"),
}


class BaseResources:
    """A player with a PD, a 4 KiB MR and a CQ."""

    def __init__(self, start, name, env=None):
        self.player = start(name, env)
        self.pd = self.player.alloc_pd()
        self.mr = self.player.reg_mr(self.pd, 4096)
        self.cq = self.player.create_cq()

    @property
    def lid(self):
        return self.player.lid


class RCResources(BaseResources):
    """An RC QP on the CQ, connected by connect()."""

    qp_type = "rc"

    def __init__(self, start, name, env=None):
        super().__init__(start, name, env)
        self.qp, self.qpn = self.player.create_qp(self.qp_type, self.pd, self.cq, self.cq)

    def connect(self, peer, timeout=14, retry=7):
        self.player.to_rts(self.qp, peer.lid, peer.qpn, timeout, retry)


class UDResources(RCResources):
    qp_type = "ud"

    def connect(self, peer=None, timeout=0, retry=0):
        self.player.to_rts(self.qp)


class XRCResources(BaseResources):
    """A player in an XRC domain opened on `path` (O_CREAT for the creator)."""

    def __init__(self, start, name, path, oflags=0, env=None):
        super().__init__(start, name, env)
        self.xrcd = self.player.open_xrcd(path, oflags)


class DomainFile:
    """A fresh file whose inode keys an XRC domain; removed by close()."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix="rdmaemu-xrcd-")
        os.close(fd)
        self.inode = os.stat(self.path).st_ino

    def close(self):
        os.unlink(self.path)
