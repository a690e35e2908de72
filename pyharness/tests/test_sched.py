# SPDX-License-Identifier: BSD-2-Clause
"""The scheduler from Python: every built-in emu-race scenario (buggy ones found with their
signature and replayed to the same trace hash, fixed ones passing a fixed budget), and the seed's
thread-safety case written in Python (two threads through one SINGLE-mode endpoint) reproduced
with a fixed seed, shrunk, replayed and drawn, its locked counterpart passing every schedule
within two preemptions. Fixed seeds and budgets: the results do not depend on the machine."""
import json
import pathlib

import pytest

import rdmaemu
from rdmaemu import Scenario, post

pytestmark = pytest.mark.emu_only

# The budget within which each buggy scenario's failure is found from seed 1 (as ctest -L race).
BUDGETS = {"bf-flush-outside-lock": 10000, "bf-flush-outside-lock-x86": 10000,
           "missing-barrier": 500}
BUILTINS = rdmaemu.builtin_scenarios()


@pytest.mark.parametrize("name", [n for n in BUILTINS if rdmaemu.builtin(n).info.buggy])
def test_builtin_buggy_scenario_is_found_and_replays(name):
    info = rdmaemu.builtin(name).info
    c = rdmaemu.run(name, "random", seed=1, budget=BUDGETS.get(name, 200))
    assert c.failed, f"{name}: no failure in {c.schedules} schedules"
    assert c.failure.signature in info.signatures
    assert c.shrunk.signature == c.failure.signature
    again = rdmaemu.replay(name, c.shrunk.schedule)
    assert (again.signature, again.trace_hash) == (c.shrunk.signature, c.shrunk.trace_hash)


@pytest.mark.parametrize("name", [n for n in BUILTINS if not rdmaemu.builtin(n).info.buggy])
@pytest.mark.parametrize("strategy,seed", [("random", 1), ("pct", 2)])
def test_builtin_fixed_scenario_passes_a_fixed_budget(name, strategy, seed):
    c = rdmaemu.run(name, strategy, seed=seed, budget=300)
    assert not c.failed and c.schedules == 300, c.failure and c.failure.describe()


def two_threads(thread_mode):
    """The seed's case (ucx#2464): two threads post through one endpoint by BlueFlame."""
    return Scenario(f"two-threads-{thread_mode}", thread_mode=thread_mode, mmio="bf_post",
                    actors={"t0": [post(ep=0, len=35)], "t1": [post(ep=0, len=200)]})


def test_seed_case_is_reproduced_replayed_and_drawn(tmp_path):
    c = two_threads("single").run("random", seed=1, budget=200)
    assert c.failed and c.failure.signature in ("race:bf_torn", "race:double_write")
    assert c.shrunk.signature == c.failure.signature and c.shrunk.preemptions <= 3
    for _ in range(3):
        r = two_threads("single").replay(c.shrunk.schedule)
        assert (r.signature, r.trace_hash) == (c.shrunk.signature, c.shrunk.trace_hash)
    c.shrunk.write_trace(str(tmp_path / "t.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"t0", "t1", "device"} <= tracks


def test_same_seed_same_campaign():
    a = two_threads("single").run("pct", seed=7, budget=200)
    b = two_threads("single").run("pct", seed=7, budget=200)
    assert a.failed and (a.failing_run, a.failure.trace_hash) == (b.failing_run, b.failure.trace_hash)


@pytest.mark.parametrize("strategy,bound", [("dfs", 2), ("delays", 2)])
def test_locked_counterpart_passes_every_schedule_within_the_bound(strategy, bound):
    c = two_threads("serialized").run(strategy, bound=bound, budget=200000)
    assert not c.failed and c.exhausted, c.failure and c.failure.describe()


def test_locked_counterpart_passes_a_random_budget():
    c = two_threads("serialized").run("random", seed=1, budget=1000)
    assert not c.failed and c.schedules == 1000


def test_a_scenario_under_the_weak_profile_runs():
    s = Scenario("weak-one-poster", profile="weak", thread_mode="single",
                 actors={"t0": [post(0, 64), post(0, 64), rdmaemu.poll(0)]})
    c = s.run("random", seed=3, budget=50)
    assert not c.failed, c.failure and c.failure.describe()


def test_the_example_of_docs_pyharness_runs(tmp_path, monkeypatch):
    """docs/guides/pyharness.md's scenario is run as written, so the example stays true."""
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "guides" / "pyharness.md"
    example = doc.read_text().split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(doc), "exec"), {})
    assert json.loads((tmp_path / "two-threads.json").read_text())["traceEvents"]
