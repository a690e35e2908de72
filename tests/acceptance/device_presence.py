#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Device presence (docs/design/rdma-cm-and-presence.md, "Device presence"): what unmodified
programs read from
/sys and /dev about emu devices agrees with what libibverbs answers, and the host's own files are
untouched.

  device_presence.py --emu-run PATH --case ib|roce|untouched

ib, roce: emu0 with two ports (InfiniBand, or RoCE with EMU_LINK_LAYER=eth). Debian's python3 walks
/sys/class/infiniband/emu0 (through its links, as a program would), cat reads some files again, and
both are compared with `ibv_devinfo -v`. untouched: host paths read the same with and without
emu-run. Every run also asserts that the device reported no race (EMU_RACE_LOG=1), and the fabric's
segment file is removed afterwards.
"""
import argparse
import ipaddress
import json
import os
import re
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # Debian's interpreter, unmodified

# Walks emu0's directory and its bus device's ("device/..."), not into links:
# {relative path: contents, "->target" for links, or "!error"}.
WALK = r"""
import json, os, sys
out = {}
def walk(top, rel=""):
    for name in sorted(os.listdir(top)):
        path, r = os.path.join(top, name), os.path.join(rel, name)
        if os.path.islink(path):
            out[r] = "->" + os.readlink(path)
        elif os.path.isdir(path):
            walk(path, r)
        else:
            try:
                with open(path) as f:
                    out[r] = f.read()
            except OSError as e:
                out[r] = "!" + os.strerror(e.errno)
walk(sys.argv[1])
walk(os.path.realpath(sys.argv[1] + "/device"), "device")
print(json.dumps(out))
"""

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


class Runner:
    def __init__(self, emu_run, env):
        self.emu_run = emu_run
        self.env = env

    def run(self, *cmd, under_emu=True):
        argv = ([self.emu_run] if under_emu else []) + list(cmd)
        p = subprocess.run(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
        expect(not re.search(r"^rdmaemu race:", p.stdout, re.M), f"race reported by {cmd[0]}")
        expect(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}: {p.stdout[-400:]}")
        return p.stdout


def devinfo(text):
    """ibv_devinfo -v: device keys, and per port its keys and GIDs ("GID[i]" -> (gid, type))."""
    dev, ports, cur = {}, {}, None
    for line in text.splitlines():
        m = re.match(r"\s+port:\s+(\d+)$", line)
        if m:
            cur = ports.setdefault(int(m.group(1)), {"gids": {}})
            continue
        m = re.match(r"\s+GID\[\s*(\d+)\]:\s+([0-9a-f:.]+)(?:, (.*))?$", line)
        if m and cur is not None:
            cur["gids"][int(m.group(1))] = (ipaddress.IPv6Address(m.group(2)), m.group(3))
            continue
        m = re.match(r"\s*([a-z_0-9]+):\s+(.*)$", line)
        if m:
            (cur if cur is not None else dev).setdefault(m.group(1), m.group(2).strip())
    return dev, ports


def check_device(fs, dev):
    text = lambda k: fs.get(k, "<missing>").strip()
    for key in ("fw_ver", "node_guid", "sys_image_guid", "board_id"):
        expect(text(key) == dev[key], f"{key}: sysfs {text(key)!r}, ibv_devinfo {dev[key]!r}")
    expect(int(text("hw_rev"), 16) == int(dev["hw_ver"], 16), "hw_rev against hw_ver")
    expect(int(text("device/vendor"), 16) == int(dev["vendor_id"], 16), "vendor against vendor_id")
    expect(int(text("device/device"), 16) == int(dev["vendor_part_id"]), "device against vendor_part_id")
    expect(text("node_type") == "1: CA", "node_type")
    expect(text("device/numa_node") == "-1", "numa_node")
    nports = {k.split("/")[1] for k in fs if k.startswith("ports/")}
    expect(len(nports) == int(dev["phys_port_cnt"]), f"ports {sorted(nports)} against phys_port_cnt")


def check_port(fs, n, port, roce_netdev):
    text = lambda k: fs.get(f"ports/{n}/{k}", "<missing>").strip()
    state = re.match(r"PORT_(\w+) \((\d+)\)", port["state"])
    expect(text("state") == f"{state.group(2)}: {state.group(1)}", f"port {n} state {text('state')!r}")
    phys = re.match(r".* \((\d+)\)", port["phys_state"]).group(1)
    expect(text("phys_state").split(":")[0] == phys, f"port {n} phys_state")
    expect(int(text("lid"), 16) == int(port["port_lid"]), f"port {n} lid")
    expect(int(text("sm_lid"), 16) == int(port["sm_lid"]), f"port {n} sm_lid")
    expect(int(text("lid_mask_count")) == int(port["port_lmc"], 16), f"port {n} lid_mask_count")
    expect(int(text("sm_sl")) == int(port["sm_sl"]), f"port {n} sm_sl")
    expect(int(text("cap_mask"), 16) == int(port["port_cap_flags"], 16), f"port {n} cap_mask")
    expect(text("link_layer") == port["link_layer"], f"port {n} link_layer")
    lanes = int(port["active_width"].split("X")[0])
    gbps = float(port["active_speed"].split()[0])
    expect(text("rate").startswith(f"{lanes * gbps:g} Gb/sec ({lanes}X"), f"port {n} rate {text('rate')!r}")
    gids = sorted(int(k.split("/")[-1]) for k in fs if k.startswith(f"ports/{n}/gids/"))
    expect(len(gids) == int(port["gid_tbl_len"]), f"port {n} gids against gid_tbl_len")
    pkeys = [k for k in fs if k.startswith(f"ports/{n}/pkeys/")]
    expect(len(pkeys) == int(port["pkey_tbl_len"]), f"port {n} pkeys against pkey_tbl_len")
    expect(text("pkeys/0") == "0xffff", f"port {n} pkey 0")
    for i, (gid, gtype) in port["gids"].items():
        expect(ipaddress.IPv6Address(text(f"gids/{i}")) == gid, f"port {n} GID {i}")
        want = "RoCE v2" if gtype == "RoCE v2" else "IB/RoCE v1"
        expect(text(f"gid_attrs/types/{i}") == want, f"port {n} GID {i} type {text(f'gid_attrs/types/{i}')!r}")
        ndev = text(f"gid_attrs/ndevs/{i}")
        expect(ndev == (roce_netdev or "!Invalid argument"), f"port {n} GID {i} netdev {ndev!r}")
    # Entries past the valid ones read as the zero GID and have no type, as in the kernel.
    empty = [i for i in gids if i not in port["gids"]]
    for i in empty[:1]:
        expect(ipaddress.IPv6Address(text(f"gids/{i}")) == ipaddress.IPv6Address("::"), f"port {n} empty GID {i}")
        expect(text(f"gid_attrs/types/{i}") == "!Invalid argument", f"port {n} empty GID {i} type")


def check_view(r, roce):
    dev, ports = devinfo(r.run("ibv_devinfo", "-v", "-d", "emu0"))
    expect(dev.get("hca_id") == "emu0", "ibv_devinfo describes emu0")
    fs = json.loads(r.run(PYTHON, "-c", WALK, "/sys/class/infiniband/emu0"))
    netdev = r.env.get("EMU_ROCE_NETDEV") if roce else None
    check_device(fs, dev)
    for n, port in ports.items():
        check_port(fs, n, port, (netdev or fs.get(f"ports/{n}/gid_attrs/ndevs/0", "").strip()) if roce else None)
    if roce:
        nd = fs.get("ports/1/gid_attrs/ndevs/0", "").strip()
        expect(fs.get(f"device/net/{nd}") == f"->/sys/class/net/{nd}", f"device/net/{nd} is the netdev")
    # Another unmodified reader of the same files, and the uverbs and CM entries.
    files = ["node_guid", "ports/1/state", "ports/1/gids/0", "ports/2/link_layer", "device/numa_node"]
    got = r.run("cat", *[f"/sys/class/infiniband/emu0/{f}" for f in files])
    expect(got == "".join(fs[f] for f in files), f"cat reads what python3 read: {got!r}")
    got = r.run("cat", "/sys/class/infiniband_verbs/uverbs-emu0/ibdev",
                "/sys/class/infiniband_verbs/uverbs-emu0/dev",
                "/sys/class/infiniband_ucma/abi_version", "/sys/class/misc/rdma_cm/abi_version")
    expect(got.split() == ["emu0", "231:192", "4", "4"], f"uverbs and ucma entries: {got!r}")
    got = r.run("ls", "-l", "/dev/infiniband/uverbs-emu0", "/dev/infiniband/rdma_cm")
    expect(re.search(r"^crw-rw-rw- .* 231, 192 .*uverbs-emu0$", got, re.M), f"uverbs node: {got}")
    expect(re.search(r"^crw-rw-rw- .* 10, +58 .*rdma_cm$", got, re.M), f"rdma_cm node: {got}")
    got = r.run("ls", "/sys/class/infiniband")
    expect("emu0" in got.split(), f"ls /sys/class/infiniband lists emu0: {got!r}")


# Host paths, read by python3 with and without the view in the process.
HOST = r"""
import json, os
out = {"net": sorted(os.listdir("/sys/class/net")), "dev": sorted(os.listdir("/dev")),
       "devnull": list(os.stat("/dev/null"))[:7], "lo": open("/sys/class/net/lo/address").read(),
       "real": os.path.realpath("/sys/class/net/lo"), "link": os.readlink("/sys/class/net/lo"),
       "exists": [os.path.exists(p) for p in ("/sys/class/infiniband/nosuchdev", "/dev/infiniband_x",
                                             "/sys/class/infinibandx")]}
print(json.dumps(out))
"""


def check_untouched(r):
    inside = json.loads(r.run(PYTHON, "-c", HOST))
    outside = json.loads(r.run(PYTHON, "-c", HOST, under_emu=False))
    for k in outside:
        expect(inside[k] == outside[k], f"host path {k}: {inside[k]!r} under emu-run, {outside[k]!r} without")
    expect(inside["exists"] == [False, False, False], "names beside the view's do not exist")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--case", choices=["ib", "roce", "untouched"], required=True)
    a = ap.parse_args()
    env = dict(os.environ)
    env["EMU_FABRIC"] = f"test-presence-{a.case}-{os.getpid()}"
    env["EMU_RACE_LOG"] = "1"
    env["EMU_PORTS"] = "2"
    if a.case == "roce":
        env["EMU_LINK_LAYER"] = "eth"
    seg = os.path.join(env.get("EMU_SHM_DIR", "/dev/shm"), f"rdmaemu-{os.getuid()}-{env['EMU_FABRIC']}")
    r = Runner(a.emu_run, env)
    try:
        if a.case == "untouched":
            check_untouched(r)
        else:
            check_view(r, a.case == "roce")
    finally:
        try:
            os.unlink(seg)
        except OSError:
            pass
    print("FAIL" if failures else "PASS", a.case, f"({len(failures)} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
