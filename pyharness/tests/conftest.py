# SPDX-License-Identifier: BSD-2-Clause
"""The harness's pytest conventions (docs/guides/pyharness.md): --device (emu0 by default), one
fabric per
test process for the in-process scheduler rig and one per test for players, the emu_only marker,
and strictness about skips."""
import itertools
import os

import pytest

import rdmaemu
from rdmaemu.compare import write_stream

# This process's fabric: the provider reads EMU_FABRIC at its first use, after this import, so
# each xdist worker (and the controller) gets a segment of its own.
_BASE = os.environ.get("EMU_FABRIC", "pyharness")
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
os.environ["EMU_FABRIC"] = f"{_BASE}-{_WORKER}-{os.getpid()}"
_counter = itertools.count()


def segment_path(fabric: str) -> str:
    shm = os.environ.get("EMU_SHM_DIR", "/dev/shm")
    return os.path.join(shm, f"rdmaemu-{os.getuid()}-{fabric}")


def pytest_addoption(parser):
    parser.addoption("--device", default="emu0",
                     help="the verbs device the scenarios run on (emu0, rxe0, mlx5_0, ...)")
    parser.addoption("--xrc-policy", default=None,
                     choices=["kernel", "xrcd", "creator", "creator_xrcd"],
                     help="run the XRC lifetime scenarios under this policy only")
    parser.addoption("--record", metavar="RUN_DIR", default=None,
                     help="write each player scenario's stream there (python -m rdmaemu.compare)")


def is_emu(device: str) -> bool:
    return device.startswith("emu")


def pytest_configure(config):
    if is_emu(config.getoption("--device")) and not rdmaemu.preloaded():
        raise pytest.UsageError("run pytest through build/bin/emu-python (the emulated provider "
                                "and libemu_sched.so must be preloaded)")


def pytest_collection_modifyitems(config, items):
    device = config.getoption("--device")
    for item in items:
        for mark in item.iter_markers(name="skip"):
            if not mark.kwargs.get("reason") and not mark.args:
                raise pytest.UsageError(f"{item.nodeid}: a skip needs a reason")
        emu_only = item.get_closest_marker("emu_only")
        if not is_emu(device) and emu_only:
            why = emu_only.kwargs.get("reason")
            item.add_marker(pytest.mark.skip(
                reason=f"emu-only check ({why}); --device is {device}" if why
                else f"emu-only check; --device is {device}"))


def pytest_sessionfinish(session, exitstatus):
    """On an emulated device every scenario runs: a skip there is a failure of the suite."""
    device = session.config.getoption("--device")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if is_emu(device) and reporter and reporter.stats.get("skipped") and exitstatus == 0:
        session.exitstatus = 1
    seg = segment_path(os.environ["EMU_FABRIC"])
    if os.path.exists(seg):
        os.unlink(seg)


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture
def fabric():
    """A fabric of this test's own (players and census), its segment file removed afterwards."""
    name = f"{os.environ['EMU_FABRIC']}-t{next(_counter)}"
    yield name
    if os.path.exists(segment_path(name)):
        os.unlink(segment_path(name))


@pytest.fixture
def stream(request):
    """The test's stream of records; with --record, written afterwards under the test's name
    without its XRC policy, so that runs under two policies compare scenario by scenario."""
    records = []
    yield records
    run_dir = request.config.getoption("--record")
    if run_dir:
        params = getattr(request.node, "callspec", None)
        rest = [str(v) for k, v in sorted(params.params.items()) if k != "policy"] if params else []
        name = request.node.originalname + (f"[{'-'.join(rest)}]" if rest else "")
        write_stream(run_dir, name, records)


@pytest.fixture
def roster():
    """Every player this test started, in order, alive or not."""
    return []


@pytest.fixture
def players(fabric, device, stream, roster):
    """players(name, env) starts a Player on this test's fabric; all are ended afterwards."""

    def start(name, env=None):
        p = rdmaemu.Player(name, device=device, fabric=fabric, env=env, stream=stream)
        roster.append(p)
        return p

    yield start
    for p in roster:
        p.close()


@pytest.fixture
def census(fabric, device, roster, stream):
    """census() takes this test's census and appends it to the stream, counted by player name
    (Census.by_role): on emu0 the test's fabric's, on a real device the kernel's objects of this
    test's players, the ones that are gone included (the kernel's census is the machine's)."""

    def take():
        pids = [p.pid for p in roster]
        c = rdmaemu.census(fabric) if is_emu(device) else rdmaemu.census(device=device, pids=pids)
        stream.append({"player": "census", "step": "census",
                       **c.by_role({p.pid: p.name for p in roster})})
        return c

    return take
