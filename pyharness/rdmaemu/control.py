"""The fabric's controls from outside the verbs API, through emu-ctl (docs/architecture.md,
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


def set_faults(rules: str, fabric: str = None, timeout: float = 30) -> None:
    """Replaces the fabric's wire fault rules (the EMU_FAULTS grammar, docs/reliability.md) and
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
