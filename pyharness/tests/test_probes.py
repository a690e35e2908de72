"""Verbs probes for the comparison with real devices (docs/comparison.md): error paths and queries
where devices may answer differently. Each asserts what every device must do (the error is seen)
and, on an emulated device, the specification's exact answer; with --record the streams keep each
device's own answer, and the comparison with soft-RoCE declares every known departure."""
from rdmaemu.players import (IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_INV_REQ_ERR,
                             IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS)
from resources import RCResources

IBV_QPS_RTS = 3
RECV_BYTES = 64  # what emu-player posts per receive


def connected_pair(players, retry=7):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    a.connect(b, retry=retry)
    b.connect(a, retry=retry)
    return a, b


def test_send_with_an_invalid_lkey(players, device):
    a, b = connected_pair(players)
    b.player.recv(b.qp, b.mr, 1)
    a.player.send(a.qp, a.mr, 0, 1, 16, lkey_delta=0x100)
    [(status, _)] = a.player.poll(a.cq, 1)
    assert status != IBV_WC_SUCCESS
    if device.startswith("emu"):
        assert status == IBV_WC_LOC_PROT_ERR  # IBA o10-2.2: the local key check


def test_send_longer_than_the_receive(players, device):
    a, b = connected_pair(players)
    b.player.recv(b.qp, b.mr, 1)
    a.player.send(a.qp, a.mr, 0, 2, RECV_BYTES + 36)
    [(sender, _)] = a.player.poll(a.cq, 1)
    [(receiver, _)] = b.player.poll(b.cq, 1)
    assert sender != IBV_WC_SUCCESS and receiver != IBV_WC_SUCCESS
    if device.startswith("emu"):
        assert (sender, receiver) == (IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR)


def test_send_without_a_receive_and_rnr_retry_zero(players):
    a, b = connected_pair(players, retry=0)
    a.player.send(a.qp, a.mr, 0, 3)
    [(status, _)] = a.player.poll(a.cq, 1)
    assert status == IBV_WC_RNR_RETRY_EXC_ERR


def test_query_qp_in_rts(players, device):
    a, b = connected_pair(players)
    q = a.player.query_qp(a.qp)
    assert q["state"] == IBV_QPS_RTS and q["cap_send_wr"] >= 16 and q["cap_recv_wr"] >= 16
    if device.startswith("emu"):
        assert q["cur_state"] == IBV_QPS_RTS


def test_two_sends_in_order(players):
    a, b = connected_pair(players)
    b.player.recv(b.qp, b.mr, 2)
    a.player.send(a.qp, a.mr, 0, 4)
    a.player.send(a.qp, a.mr, 0, 5)
    assert [s for s, _ in a.player.poll(a.cq, 2)] == [IBV_WC_SUCCESS] * 2
    assert b.player.poll(b.cq, 2) == [(IBV_WC_SUCCESS, 4), (IBV_WC_SUCCESS, 5)]
