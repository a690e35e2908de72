# SPDX-License-Identifier: BSD-2-Clause
"""Type stubs of the C++ module (pyharness/module/): devices, race log, scheduler."""
from typing import Dict, List, Optional, Sequence, Tuple, Union

class VerbsError(OSError):
    """A verb's failure: .errno is its errno."""

class PortInfo:
    num: int
    state: str
    lid: int
    link_layer: str
    active_mtu: int

class DeviceInfo:
    name: str
    guid: int
    max_qp: int
    max_cq: int
    max_mr: int
    max_pd: int
    max_srq: int
    ports: List[PortInfo]

class RaceEvent:
    seq: int
    kind: str
    pid: int
    qpn: int
    reg: int
    slot: int
    executed: str

def devices() -> List[DeviceInfo]: ...
def races_recorded() -> int: ...
def race_events(since: int = 0) -> List[RaceEvent]: ...
def kernel_objects(device: str) -> List[Dict[str, Union[int, str]]]:
    """Every object the kernel tracks on a real device (RDMA netlink): kind, dev, number, type,
    state, owner_pid (0: the kernel's own), kern_name. VerbsError: ENODEV, or the kernel's errno."""

class ScenarioInfo:
    name: str
    report: str
    link: str
    buggy: bool
    counterpart: str
    signatures: List[str]
    pairs: List[int]
    what: str

class Scenario:
    @property
    def info(self) -> ScenarioInfo: ...
    @property
    def name(self) -> str: ...

class Run:
    outcome: str  # "ok", "failed", "deadlock"
    signature: str
    steps: int
    trace_hash: int
    schedule: str
    choices: int
    preemptions: int
    actors: List[str]
    races: List[str]
    def describe(self) -> str: ...
    def write_trace(self, path: str) -> None: ...

class Campaign:
    failed: bool
    schedules: int
    failures: int
    failing_run: int
    failing_seed: int
    exhausted: bool
    failure: Optional[Run]
    shrunk: Optional[Run]
    shrink_runs: int

def builtin_scenarios() -> List[str]: ...
def builtin(name: str) -> Scenario: ...
def step_scenario(name: str, actors: Sequence[Tuple[str, Sequence[Tuple[str, int, int]]]],
                  pairs: Sequence[int], thread_mode: str, mmio: str, profile: str,
                  write_combining: bool) -> Scenario: ...
def run(scenario: Scenario, strategy: str = "random", seed: int = 1, budget: int = 1000,
        bound: int = 2, shrink: bool = True, keep_going: bool = False) -> Campaign: ...
def replay(scenario: Scenario, schedule: str) -> Run: ...
