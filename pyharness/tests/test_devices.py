# SPDX-License-Identifier: BSD-2-Clause
"""The module's first face: devices and ports, port down/up, wire faults, the race log, errors
with errno."""
import errno
import os
import subprocess

import pytest

import rdmaemu


def emu0():
    return next(d for d in rdmaemu.devices() if d.name == "emu0")


@pytest.mark.emu_only
def test_emu0_is_listed_with_active_ports():
    d = emu0()
    assert d.guid != 0 and d.max_qp > 0 and d.max_cq > 0
    assert d.ports and all(p.state == "active" for p in d.ports)
    assert [p.num for p in d.ports] == list(range(1, len(d.ports) + 1))
    assert all(p.link_layer == "InfiniBand" and p.lid > 0 for p in d.ports)


@pytest.mark.emu_only
def test_port_down_and_up_show_in_query_port():
    emu0()  # the segment exists once this process has used the provider
    fabric = os.environ["EMU_FABRIC"]
    rdmaemu.set_port("emu0", 1, up=False, fabric=fabric)
    try:
        assert emu0().ports[0].state == "down"
        assert len(emu0().ports) >= 1
    finally:
        rdmaemu.set_port("emu0", 1, up=True, fabric=fabric)
    assert emu0().ports[0].state == "active"


@pytest.mark.emu_only
def test_transport_timers_hold_and_run():
    emu0()
    fabric = os.environ["EMU_FABRIC"]
    assert not rdmaemu.timers_held(fabric=fabric)
    assert rdmaemu.hold_timers(True, fabric=fabric)
    try:
        assert rdmaemu.timers_held(fabric=fabric)
        assert not rdmaemu.hold_timers(True, fabric=fabric), "already held"
    finally:
        assert rdmaemu.hold_timers(False, fabric=fabric)
    assert not rdmaemu.timers_held(fabric=fabric)


@pytest.mark.emu_only
def test_race_log_reads_from_a_position():
    n = rdmaemu.races_recorded()
    assert rdmaemu.race_events(since=n + 1) == []


def test_errors_are_oserrors_with_the_errno():
    with pytest.raises(rdmaemu.VerbsError) as e:
        rdmaemu.builtin("no-such-scenario")
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOENT
    with pytest.raises(rdmaemu.VerbsError) as e:
        rdmaemu.Scenario("bad", {"t0": [rdmaemu.post(ep=3)]}).handle()
    assert e.value.errno == errno.EINVAL and "endpoint 3" in str(e.value)


def test_a_failed_verb_in_a_player_carries_its_errno(players):
    p = players("p")
    with pytest.raises(rdmaemu.VerbsError) as e:
        p.destroy(12345)
    assert e.value.errno == errno.EBADF


@pytest.mark.emu_only
def test_wire_fault_rules_set_read_and_cleared():
    emu0()
    fabric = os.environ["EMU_FABRIC"]
    rdmaemu.set_faults("seed=5;drop:p=0.5,op=write;dup:nth=3", fabric=fabric)
    try:
        f = rdmaemu.faults(fabric=fabric)
        assert f["rules"] == "seed=5;drop:p=0.5,op=write;dup:nth=3,times=1"
        assert f["drop"] == 0 and f["retransmitted"] == 0
        with pytest.raises(subprocess.CalledProcessError):
            rdmaemu.set_faults("lose:p=1", fabric=fabric)
    finally:
        rdmaemu.clear_faults(fabric=fabric)
    assert rdmaemu.faults(fabric=fabric)["rules"] == "none"


def test_the_kernels_census_of_a_missing_device_is_an_error():
    # Here (no RDMA netlink in the kernel, or no such device) and in the VM alike: VerbsError with
    # the errno, never an empty census that would pass every "nothing left" check.
    with pytest.raises(rdmaemu.VerbsError) as e:
        rdmaemu.kernel_census("nosuchdev9")
    assert e.value.errno in (errno.ENODEV, errno.EPROTONOSUPPORT)
