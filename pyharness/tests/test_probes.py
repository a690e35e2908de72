# SPDX-License-Identifier: BSD-2-Clause
"""Verbs probes for the comparison with real devices (docs/guides/comparison.md): error paths and
queries
where devices may answer differently. Each asserts what every device must do (the error is seen)
and, on an emulated device, the specification's exact answer; with --record the streams keep each
device's own answer, and the comparison with soft-RoCE declares every known departure."""
import errno

from rdmaemu import VerbsError
from rdmaemu.players import (IBV_EVENT_QP_ACCESS_ERR, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR,
                             IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
                             IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR)
from resources import RCResources

IBV_QPS_RTS = 3
RECV_BYTES = 64  # what emu-player posts per receive
# How many times a probe polls an idle device before it records "no completion": a count, not a
# clock, so the record does not depend on the machine's speed.
IDLE_POLLS = 1000
# An rkey offset that names no MR at the responder on either device: rxe's keys are an MR index
# above an 8-bit key, and this moves the index past its pool; emu0's key table is as small.
BAD_RKEY_DELTA = 0x10000000


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


def refused(step) -> int:
    """The errno of a step the device must refuse (0 if it accepted it)."""
    try:
        step()
    except VerbsError as e:
        return e.errno
    return 0


def test_posts_refused_in_reset_and_init_leave_nothing_behind(players, device):
    a, b = RCResources(players, "a"), RCResources(players, "b")
    b.connect(a)
    p = a.player
    in_reset = [refused(lambda: p.send(a.qp, a.mr, 0, 1)), refused(lambda: p.recv(a.qp, a.mr, 1))]
    p.modify_state(a.qp, "init")
    in_init = refused(lambda: p.send(a.qp, a.mr, 0, 2))  # a receive in INIT is allowed
    a.connect(b)
    b.player.recv(b.qp, b.mr, 3)
    p.send(a.qp, a.mr, 0, 3)
    # RC delivers in order: a refused SEND kept in the queue would arrive before tag 3 (and could
    # not arrive after it), so the first receive tells, with no wait for something not to happen.
    first = b.player.poll(b.cq, 1)
    [(status, _)] = p.poll(a.cq, 1)
    assert status == IBV_WC_SUCCESS and first and first[0][0] == IBV_WC_SUCCESS
    if device.startswith("emu"):
        assert in_reset == [errno.EINVAL] * 2 and in_init == errno.EINVAL
        assert first == [(IBV_WC_SUCCESS, 3)]


def test_receive_posted_in_err_is_flushed(players, device):
    a, b = connected_pair(players)
    a.player.modify_state(a.qp, "err")
    a.player.recv(a.qp, a.mr, 1)
    got = a.player.poll_tries(a.cq, 1, IDLE_POLLS)
    if device.startswith("emu"):
        assert got == [(IBV_WC_WR_FLUSH_ERR, -1)]  # a WR posted in ERR is flushed


def test_write_with_a_bad_rkey_raises_the_responders_access_event(players, device):
    a, b = connected_pair(players)
    a.player.write(a.qp, a.mr, BAD_RKEY_DELTA)
    [(status, _)] = a.player.poll(a.cq, 1)
    assert status == IBV_WC_REM_ACCESS_ERR
    # The responder raised its event before it NAKed, so it is pending now; the requester's error
    # is its completion alone.
    responder, requester = b.player.async_events(), a.player.async_events()
    if device.startswith("emu"):
        assert responder == [IBV_EVENT_QP_ACCESS_ERR] and requester == []
