"""Players on their own: every object kind and QP type created and destroyed with the census
following, RC traffic between two players, UD to RTS, and a SIGKILLed player's objects swept."""
import pytest

from rdmaemu import census
from rdmaemu.players import IBV_WC_SUCCESS
from resources import BaseResources, RCResources, UDResources

QP_TYPES = ["rc", "uc", "ud", "xrc_send"]


@pytest.mark.emu_only
@pytest.mark.parametrize("qp_type", QP_TYPES)
def test_create_and_destroy_each_qp_type_with_the_census(players, fabric, qp_type):
    r = BaseResources(players, "p")
    assert census(fabric).count("qp") == 0
    qp, qpn = r.player.create_qp(qp_type, r.pd, r.cq, r.cq)
    c = census(fabric)
    assert c.count("qp") == 1 and qpn > 0
    r.player.destroy(qp)
    assert census(fabric).count("qp") == 0


@pytest.mark.emu_only
def test_srq_cq_mr_pd_each_counted_and_released(players, fabric):
    r = BaseResources(players, "p")
    srq = r.player.create_srq(r.pd)
    c = census(fabric)
    assert [c.count(k) for k in ("pd", "mr", "cq", "srq")] == [1, 1, 1, 1]
    for h in (srq, r.cq, r.mr, r.pd):
        r.player.destroy(h)
    c = census(fabric)
    assert [c.count(k) for k in ("pd", "mr", "cq", "srq")] == [0, 0, 0, 0]


def test_rc_send_between_two_players(players):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    a.connect(b)
    b.connect(a)
    b.player.recv(b.qp, b.mr, 1)
    a.player.send(a.qp, a.mr, 0, 7)
    [(status, _)] = a.player.poll(a.cq, 1)  # (mlx5 flags a SEND_WITH_IMM's own CQE WITH_IMM)
    assert status == IBV_WC_SUCCESS
    assert b.player.poll(b.cq, 1) == [(IBV_WC_SUCCESS, 7)]


def test_ud_qp_reaches_rts(players):
    u = UDResources(players, "u")
    u.connect()


@pytest.mark.emu_only
def test_a_killed_player_leaves_nothing(players, fabric):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    assert census(fabric).count("qp") == 2
    a.player.kill()
    c = census(fabric)
    assert c.count("qp") == 1 and c.dead_owned == []
    assert all(o["owner_pid"] == b.player.pid for o in c.objects)
