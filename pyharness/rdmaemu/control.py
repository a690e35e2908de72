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
