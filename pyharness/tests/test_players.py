# SPDX-License-Identifier: BSD-2-Clause
"""Players on their own: every object kind and QP type created and destroyed with the census
following, RC traffic between two players, UD to RTS, and a SIGKILLed player's objects released.
The census is emu0's fabric's or, on a real device, the kernel's (RDMA netlink): the same
assertions hold on both."""
import pytest

from rdmaemu.players import IBV_WC_SUCCESS
from resources import BaseResources, RCResources, UDResources

# rxe has no XRC (no IBV_DEVICE_XRC, no XRC QP types), so an XRC INI QP is made on emu0 only.
NO_XRC = pytest.mark.emu_only(reason="XRC: soft-RoCE (rxe) implements none")
QP_TYPES = ["rc", "uc", "ud", pytest.param("xrc_send", marks=NO_XRC)]
KINDS = ("context", "pd", "mr", "cq", "srq", "qp")


@pytest.mark.parametrize("qp_type", QP_TYPES)
def test_create_and_destroy_each_qp_type_with_the_census(players, census, qp_type):
    r = BaseResources(players, "p")
    assert census().count("qp") == 0
    qp, qpn = r.player.create_qp(qp_type, r.pd, r.cq, r.cq)
    c = census()
    assert c.count("qp", qp_type.upper()) == 1 and qpn > 0
    assert [o["state"] for o in c.objects if o["kind"] == "qp"] == ["RESET"]
    r.player.destroy(qp)
    assert census().count("qp") == 0


def test_srq_cq_mr_pd_each_counted_and_released(players, census):
    r = BaseResources(players, "p")
    srq = r.player.create_srq(r.pd)
    c = census()
    assert [c.count(k) for k in KINDS] == [1, 1, 1, 1, 1, 0]
    assert c.count("srq", "BASIC") == 1
    for h in (srq, r.cq, r.mr, r.pd):
        r.player.destroy(h)
    c = census()
    assert [c.count(k) for k in KINDS] == [1, 0, 0, 0, 0, 0]  # the open device remains


def test_rc_send_between_two_players(players, census):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    a.connect(b)
    b.connect(a)
    c = census()
    assert c.count("qp", "RC") == 2
    assert {o["state"] for o in c.objects if o["kind"] == "qp"} == {"RTS"}
    b.player.recv(b.qp, b.mr, 1)
    a.player.send(a.qp, a.mr, 0, 7)
    [(status, _)] = a.player.poll(a.cq, 1)  # (mlx5 flags a SEND_WITH_IMM's own CQE WITH_IMM)
    assert status == IBV_WC_SUCCESS
    assert b.player.poll(b.cq, 1) == [(IBV_WC_SUCCESS, 7)]


def test_ud_qp_reaches_rts(players):
    u = UDResources(players, "u")
    u.connect()


def test_a_killed_player_leaves_nothing(players, census):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    c = census()
    assert c.count("qp") == 2
    assert {o["owner_pid"] for o in c.objects} == {a.player.pid, b.player.pid}
    a.player.kill()  # reaped: the kernel closed its files (and released its objects) before that
    c = census()
    assert c.count("qp") == 1 and c.dead_owned == []
    assert all(o["owner_pid"] == b.player.pid for o in c.objects)
