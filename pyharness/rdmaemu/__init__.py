# SPDX-License-Identifier: BSD-2-Clause
"""rdmaemu: the Python harness of the RDMA NIC emulator (docs/guides/pyharness.md).

Run Python through build/bin/emu-python, which preloads the emulated provider and the scheduler's
libc interposer and puts this package on the path:

    devices(), race_events()          what this process sees (the C++ module)
    census(), port(), set_port()      the fabric from outside (emu-ctl); census(device=) on a
                                      real device: the kernel's RDMA netlink
    hold_timers(), timers_held()      the transport timers held or running (emu-ctl timers)
    set_faults(), clear_faults(), faults()   wire faults by seed (docs/design/reliability.md)
    set_inject(), inject(), inject_event(), inject_qp_error(), inject_cq_overrun()   error
                                      injection on demand (docs/design/reliability.md)
    Scenario, post, poll, run(), replay(), builtin()   the deterministic scheduler
    Player                            a process that runs verbs steps on command
"""
import os

from ._rdmaemu import (Campaign, DeviceInfo, PortInfo, RaceEvent, Run, VerbsError, builtin,
                       builtin_scenarios, devices, race_events, races_recorded)
from .census import Census, census, kernel_census
from .control import (clear_faults, clear_inject, faults, hold_timers, inject, inject_cq_overrun,
                      inject_event, inject_qp_error, port_state, set_faults, set_inject, set_port,
                      timers_held)
from .players import Player
from .scenario import Scenario, flush, poll, post, replay, run, yield_

__all__ = [
    "Campaign", "Census", "DeviceInfo", "Player", "PortInfo", "RaceEvent", "Run", "Scenario",
    "VerbsError", "builtin", "builtin_scenarios", "census", "clear_faults", "devices", "faults",
    "flush", "hold_timers", "kernel_census", "poll", "set_faults", "timers_held", "clear_inject",
    "inject", "inject_cq_overrun", "inject_event", "inject_qp_error", "set_inject",
    "port_state", "post", "race_events", "races_recorded", "replay", "run", "set_port",
    "yield_", "preloaded",
]


def preloaded() -> bool:
    """Whether this process runs with the emulated provider and the scheduler's interposer."""
    libs = os.environ.get("LD_PRELOAD", "")
    return "libemu_verbs.so" in libs and "libemu_sched.so" in libs
