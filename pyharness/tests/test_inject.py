# SPDX-License-Identifier: BSD-2-Clause
"""Error injection from Python (rdmaemu.set_inject / inject / inject_qp_error, through emu-ctl),
seen by a Player: the Nth creation verb fails with the chosen errno, and a QP moved to ERR from
outside is in ERR with IBV_EVENT_QP_FATAL (docs/design/reliability.md, "Error injection")."""
import errno
import subprocess

import pytest

import rdmaemu

IBV_EVENT_QP_FATAL = 1
IBV_QPS_ERR = 6


@pytest.mark.emu_only
def test_nth_reg_mr_fails_with_the_chosen_errno(players, fabric):
    p = players("p")
    pd = p.alloc_pd()  # the player's fabric exists from here
    rdmaemu.set_inject("fail:verb=reg_mr,errno=ENOSPC,nth=2", fabric=fabric)
    try:
        p.reg_mr(pd)
        with pytest.raises(rdmaemu.VerbsError) as e:
            p.reg_mr(pd)
        assert e.value.errno == errno.ENOSPC
        p.reg_mr(pd)  # the rule acted once
        assert rdmaemu.inject(fabric=fabric) == {
            "rules": f"fail:verb=reg_mr,errno={errno.ENOSPC},nth=2", "fired": [1]}
        with pytest.raises(subprocess.CalledProcessError):
            rdmaemu.set_inject("wc:status=no_such_status", fabric=fabric)
    finally:
        rdmaemu.clear_inject(fabric=fabric)
    assert rdmaemu.inject(fabric=fabric) == {"rules": "none", "fired": []}


@pytest.mark.emu_only
def test_qp_error_from_outside(players, fabric):
    p = players("p")
    pd = p.alloc_pd()
    cq = p.create_cq()
    qp, qpn = p.create_qp("rc", pd, cq, cq)
    p.to_rts(qp, p.lid, qpn)
    rdmaemu.inject_qp_error(qpn, fabric=fabric)
    assert p.query_qp(qp)["state"] == IBV_QPS_ERR
    assert p.async_events() == [IBV_EVENT_QP_FATAL]
