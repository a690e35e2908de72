# SPDX-License-Identifier: BSD-2-Clause
"""Thread-safety scenarios written in Python: actors, each a list of steps, over the race rig's QP
pairs on emu0 (17 loopback RC pairs; 0 and 16 share a doorbell register), handed to the
deterministic scheduler. The steps run in C++ inside the actors' threads (no Python and no GIL
inside a run); the oracles are emu-race's: the device's race events, every completion taken
exactly once, every payload whole at its target."""
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Union

from . import _rdmaemu


@dataclass(frozen=True)
class Step:
    op: str
    ep: int = 0
    len: int = 0


def post(ep: int = 0, len: int = 64) -> Step:
    """One inline RDMA WRITE of `len` bytes (1..200) through endpoint `ep` (uctlite)."""
    return Step("post", ep, len)


def poll(ep: int = 0) -> Step:
    """One poll of endpoint `ep`: up to 8 completions, none if its CQ is empty (what is left is
    taken by the final check)."""
    return Step("poll", ep)


def flush() -> Step:
    """mmio_flush_writes: the thread's write-combining buffers reach the device."""
    return Step("flush")


def yield_() -> Step:
    """A plain scheduling point."""
    return Step("yield")


@dataclass
class Scenario:
    """A uctlite worker over `pairs` (endpoint i on rig pair pairs[i]) in `thread_mode` (single,
    serialized) and `mmio` (bf_post, bf_post_mt, db_lock), its stores seen by the device under
    `profile` (sc, x86, weak), and the actors that post through it."""
    name: str
    actors: Dict[str, List[Step]]
    pairs: Sequence[int] = (0,)
    thread_mode: str = "single"
    mmio: str = "bf_post"
    profile: str = "sc"
    write_combining: bool = False
    _handle: object = field(default=None, init=False, repr=False, compare=False)

    def handle(self) -> "_rdmaemu.Scenario":
        """The C++ scenario (built and checked once; VerbsError(EINVAL) if malformed)."""
        if self._handle is None:
            actors = [(name, [(s.op, s.ep, s.len) for s in steps])
                      for name, steps in self.actors.items()]
            self._handle = _rdmaemu.step_scenario(self.name, actors, list(self.pairs),
                                                  self.thread_mode, self.mmio, self.profile,
                                                  self.write_combining)
        return self._handle

    def run(self, strategy: str = "random", seed: int = 1, budget: int = 1000, bound: int = 2,
            shrink: bool = True, keep_going: bool = False) -> "_rdmaemu.Campaign":
        return run(self, strategy, seed, budget, bound, shrink, keep_going)

    def replay(self, schedule: str) -> "_rdmaemu.Run":
        return replay(self, schedule)


ScenarioLike = Union[str, Scenario, "_rdmaemu.Scenario"]


def _handle(s: ScenarioLike):
    if isinstance(s, str):
        return _rdmaemu.builtin(s)
    if isinstance(s, Scenario):
        return s.handle()
    return s


def run(scenario: ScenarioLike, strategy: str = "random", seed: int = 1, budget: int = 1000,
        bound: int = 2, shrink: bool = True, keep_going: bool = False) -> "_rdmaemu.Campaign":
    """A campaign: `budget` schedules of `strategy` (random, pct: seeded from `seed`; dfs, delays:
    every schedule within `bound`), stopping at the first failure, which is shrunk."""
    return _rdmaemu.run(_handle(scenario), strategy, seed, budget, bound, shrink, keep_going)


def replay(scenario: ScenarioLike, schedule: str) -> "_rdmaemu.Run":
    """One run of `schedule` (a Run's .schedule string)."""
    return _rdmaemu.replay(_handle(scenario), schedule)
