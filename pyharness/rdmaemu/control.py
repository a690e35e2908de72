# SPDX-License-Identifier: BSD-2-Clause
"""The fabric's controls from outside the verbs API, through emu-ctl (docs/design/wire.md,
"Ports and the control tool")."""
import os
import subprocess

from ._paths import BIN_DIR


def _ctl(args, fabric, timeout):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if fabric:
        env["EMU_FABRIC"] = fabric
    return subprocess.run([os.path.join(BIN_DIR, "emu-ctl")] + args, env=env, check=True,
                          capture_output=True, text=True, timeout=timeout).stdout


def set_port(dev: str, port: int, up: bool, fabric: str = None, timeout: float = 30) -> None:
    """Takes a port down (a cable pull: every context gets IBV_EVENT_PORT_ERR) or up."""
    _ctl(["port", dev, str(port), "up" if up else "down"], fabric, timeout)


def port_state(dev: str, port: int, fabric: str = None, timeout: float = 30) -> str:
    """The port's state as emu-ctl prints it."""
    return _ctl(["port", dev, str(port)], fabric, timeout).strip()


def hold_timers(held: bool, fabric: str = None, timeout: float = 30) -> bool:
    """Holds the fabric's transport timers (no QP's ACK timeout or RNR timer counts, in any
    process) or lets them run on from where they stood; returns whether the state changed."""
    out = _ctl(["timers", "hold" if held else "run"], fabric, timeout)
    return "(unchanged)" not in out


def timers_held(fabric: str = None, timeout: float = 30) -> bool:
    """Whether the fabric's transport timers are held."""
    return _ctl(["timers"], fabric, timeout).strip() == "transport timers: held"


def set_faults(rules: str, fabric: str = None, timeout: float = 30) -> None:
    """Replaces the fabric's wire fault rules (the EMU_FAULTS grammar, docs/design/reliability.md)
    and
    zeroes their counters."""
    _ctl(["faults", "set", rules], fabric, timeout)


def clear_faults(fabric: str = None, timeout: float = 30) -> None:
    """Removes every wire fault rule: messages go as one DMA again."""
    _ctl(["faults", "clear"], fabric, timeout)


def faults(fabric: str = None, timeout: float = 30) -> dict:
    """The fabric's rules (key "rules", a string, "none" without any) and counters: faults
    injected per kind ("drop", "dup", "reorder", "delay", "corrupt"), "retransmitted", "naks",
    "timeouts" (ints)."""
    out = {}
    for line in _ctl(["faults"], fabric, timeout).splitlines():
        key, _, value = line.partition(" ")
        out[key] = value if key == "rules" else int(value)
    return out


def set_inject(rules: str, fabric: str = None, timeout: float = 30) -> None:
    """Replaces the fabric's error injection rules (EMU_INJECT's grammar, docs/design/reliability.md
    "Error injection"): `wc:status=...` completes a chosen send WR with a chosen status,
    `fail:verb=...,errno=...` fails the Nth creation verb. Their counts start at zero."""
    _ctl(["inject", "set", rules], fabric, timeout)


def clear_inject(fabric: str = None, timeout: float = 30) -> None:
    """Removes every error injection rule."""
    _ctl(["inject", "clear"], fabric, timeout)


def inject(fabric: str = None, timeout: float = 30) -> dict:
    """The fabric's injection rules (key "rules", a string, "none" without any) and, per rule
    index, how often it acted (key "fired", a list of ints)."""
    out = {"rules": "none", "fired": []}
    for line in _ctl(["inject"], fabric, timeout).splitlines():
        key, _, value = line.partition(" ")
        if key == "rules":
            out["rules"] = value
        elif key == "fired":
            out["fired"].append(int(value.split()[1]))
    return out


def inject_event(event: str, obj, port: int = None, fabric: str = None,
                 timeout: float = 30) -> None:
    """Raises async event `event` (qp_fatal, cq_err, srq_limit_reached, port_err, device_fatal,
    ...; any ibv_event_type name) on obj (a QP number, a CQ or SRQ handle, or a device name for
    port and device events, with port) with the state change hardware makes with it."""
    args = ["inject", "event", event, str(obj)] + ([str(port)] if port is not None else [])
    _ctl(args, fabric, timeout)


def inject_qp_error(qpn: int, fabric: str = None, timeout: float = 30) -> None:
    """Moves QP qpn to ERR as a fatal error would (IBV_EVENT_QP_FATAL to its owner)."""
    _ctl(["inject", "qp-error", str(qpn)], fabric, timeout)


def inject_cq_overrun(cq: int, fabric: str = None, timeout: float = 30) -> None:
    """Makes the next CQE of the CQ with handle cq find it full: IBV_EVENT_CQ_ERR, and its QPs to
    ERR with IBV_EVENT_QP_FATAL."""
    _ctl(["inject", "overrun", str(cq)], fabric, timeout)
