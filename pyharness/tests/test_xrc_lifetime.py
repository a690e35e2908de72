# SPDX-License-Identifier: BSD-2-Clause
"""docs/design/xrc.md as Python: each row with three players (creator, opener, sender), normal
exits and
SIGKILL, under each policy, the census checked after every step (so before the next one)."""
import errno
import os

import pytest

from rdmaemu import VerbsError, census
from rdmaemu.players import IBV_WC_REM_INV_REQ_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_SUCCESS
from resources import POLICIES, BaseResources, DomainFile, XRCResources

# Emu-only on two counts: soft-RoCE (rxe) implements no XRC, and what every row asserts (a
# domain's opens and objects, a TGT QP's handles and holders, the policies) is the emulated
# census's own: the kernel's resource tracking has no XRCD and no per-handle view of a TGT QP.
pytestmark = pytest.mark.emu_only(reason="XRC: rxe implements none, and the kernel's census "
                                         "tracks no XRC domain or TGT QP handle")



class Setting:
    """The setting of every row: the creator made the domain and a TGT QP, the opener opened the
    domain and owns the XRC SRQ, the sender's INI QP is connected to the TGT QP (timeout 1, one
    retry, so a lost TGT QP shows at once)."""

    def __init__(self, players, fabric, policy_env, domain, stream):
        self.fabric, self.domain, self.tag, self.stream = fabric, domain, 0, stream
        self.creator = XRCResources(players, "creator", domain.path, os.O_CREAT, policy_env)
        self.tgt, self.qpn = self.creator.player.create_qp("xrc_recv", self.creator.xrcd)
        self.opener = XRCResources(players, "opener", domain.path, 0, policy_env)
        o = self.opener
        self.srq, self.srqn = o.player.create_xrc_srq(o.xrcd, o.pd, o.cq, o.mr, 16)
        s = self.sender = BaseResources(players, "sender", policy_env)
        self.ini, ini_qpn = s.player.create_qp("xrc_send", s.pd, s.cq)
        self.creator.player.to_rts(self.tgt, s.lid, ini_qpn)
        s.player.to_rts(self.ini, self.creator.lid, self.qpn, timeout=1, retry=1)

    def census(self):
        c = census(self.fabric)
        assert c.dead_owned == [], c.raw
        self.stream.append({"census": self.summary(c)})
        return c

    def summary(self, c):
        """The census as two runs can compare it: processes by role, no numbers that vary."""
        role = {r.player.pid: r.player.name for r in (self.creator, self.opener, self.sender)}
        t = c.tgt(self.qpn)
        x = c.xrcd_of_inode(self.domain.inode)
        return {"tgt": t and {"handles": t["handles"], "orphaned": t["orphaned"],
                              "holders": sorted(role.get(h["pid"], "?") for h in t["holders"])},
                "xrcd": x and [x["opens"], x["objects"]],
                "objects": sorted((o["kind"], o.get("type", "")) for o in c.objects)}

    def domain_counts(self):
        x = self.census().xrcd_of_inode(self.domain.inode)
        return None if x is None else (x["opens"], x["objects"])

    def send(self, srqn=None):
        """One SEND to the TGT QP: 'lands' (SUCCESS, and the opener's SRQ CQ shows its tag),
        'lost' (RETRY_EXC_ERR, nothing lands) or 'invalid' (REM_INV_REQ_ERR)."""
        self.tag += 1
        s = self.sender
        s.player.send(self.ini, s.mr, self.srqn if srqn is None else srqn, self.tag)
        [(status, _)] = s.player.poll(s.cq, 1)
        if status == IBV_WC_SUCCESS:
            assert self.opener.player.poll(self.opener.cq, 1) == [(IBV_WC_SUCCESS, self.tag)]
            self.stream.append({"send": "lands"})
            return "lands"
        assert self.opener.player.alive() is False or self.opener.player.poll(self.opener.cq, 1, 0) == []
        outcome = {IBV_WC_RETRY_EXC_ERR: "lost", IBV_WC_REM_INV_REQ_ERR: "invalid"}[status]
        self.stream.append({"send": outcome})
        return outcome


def pytest_generate_tests(metafunc):
    """Every test under each policy, or under the one --xrc-policy names."""
    if "policy" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--xrc-policy")
        metafunc.parametrize("policy", [chosen] if chosen else sorted(POLICIES))


@pytest.fixture
def domain():
    d = DomainFile()
    yield d
    d.close()


@pytest.fixture
def setting(players, fabric, policy, domain, stream):
    s = Setting(players, fabric, POLICIES[policy][0], domain, stream)
    t = s.census().tgt(s.qpn)
    assert t["handles"] == 1 and not t["orphaned"]
    assert s.domain_counts() == (2, 2)  # the creator's and the opener's; the TGT QP and the SRQ
    assert s.send() == "lands"
    return s


def rule(policy):
    return POLICIES[policy][1]


def end(player, how):
    player.exit() if how == "exit" else player.kill()


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_creator_goes_while_opener_holds_handle(setting, how):
    s = setting
    handle = s.opener.player.open_qp(s.opener.xrcd, s.qpn)
    assert s.census().tgt(s.qpn)["handles"] == 2
    end(s.creator.player, how)
    t = s.census().tgt(s.qpn)
    assert t["handles"] == 1 and t["orphaned"]
    assert [h["pid"] for h in t["holders"]] == [s.opener.player.pid]
    assert s.domain_counts() == (1, 2)
    assert s.send() == "lands"
    s.opener.player.destroy(handle)  # the last handle: the real QP goes, under every policy
    assert s.census().tgt(s.qpn) is None
    assert s.domain_counts() == (1, 1)
    assert s.send() == "lost"


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_creator_goes_with_no_other_handle(setting, policy, how):
    s = setting
    end(s.creator.player, how)
    t = s.census().tgt(s.qpn)
    if rule(policy) == "kernel":
        assert t is None
        assert s.domain_counts() == (1, 1)
        assert s.send() == "lost"
        with pytest.raises(VerbsError) as e:
            s.opener.player.open_qp(s.opener.xrcd, s.qpn)
        assert e.value.errno == errno.EINVAL
    else:
        assert t["handles"] == 0 and t["orphaned"] and t["dies_with_xrcd"]
        assert s.domain_counts() == (1, 2)
        assert s.send() == "lands"
        s.opener.player.open_qp(s.opener.xrcd, s.qpn)
        assert s.census().tgt(s.qpn)["handles"] == 1
    assert s.census().dead_owned == []


def test_handle_destroyed_while_another_holds(setting, policy):
    s = setting
    handle = s.opener.player.open_qp(s.opener.xrcd, s.qpn)
    s.creator.player.destroy(s.tgt)
    t = s.census().tgt(s.qpn)
    if rule(policy) == "kernel":
        assert t["handles"] == 1 and [h["pid"] for h in t["holders"]] == [s.opener.player.pid]
        assert s.send() == "lands"
        s.opener.player.destroy(handle)
        assert s.census().tgt(s.qpn) is None
    else:
        assert t is None  # an explicit destroy takes the real QP under 2a
        assert s.domain_counts() == (2, 1)
        assert s.send() == "lost"
        s.opener.player.destroy(handle)  # the stale handle: 0, and nothing else released
        assert s.domain_counts() == (2, 1)


@pytest.mark.parametrize("how", ["close", "exit", "kill"])
def test_last_open_of_domain_goes(setting, policy, how):
    s = setting
    s.creator.player.exit()
    kept = rule(policy) == "2a"
    assert (s.census().tgt(s.qpn) is not None) == kept
    assert s.domain_counts() == (1, 2 if kept else 1)
    if how == "close":
        s.opener.player.destroy(s.srq)
        s.opener.player.destroy(s.opener.xrcd)
    else:
        end(s.opener.player, how)
    c = s.census()
    assert c.tgt(s.qpn) is None and c.xrcd_of_inode(s.domain.inode) is None


def test_opener_killed_while_holding_handle(setting):
    s = setting
    s.opener.player.open_qp(s.opener.xrcd, s.qpn)
    s.opener.player.kill()
    t = s.census().tgt(s.qpn)
    assert t["handles"] == 1 and [h["pid"] for h in t["holders"]] == [s.creator.player.pid]
    assert s.domain_counts() == (1, 1)  # the creator's open; the TGT QP


def test_close_xrcd_with_own_objects_is_ebusy(setting):
    s = setting
    before = s.domain_counts()
    with pytest.raises(VerbsError) as e:
        s.creator.player.destroy(s.creator.xrcd)
    assert e.value.errno == errno.EBUSY
    assert s.domain_counts() == before


def test_exclusive_open_of_existing_domain_is_einval(setting):
    s = setting
    with pytest.raises(VerbsError) as e:
        s.sender.player.open_xrcd(s.domain.path, os.O_CREAT | os.O_EXCL)
    assert e.value.errno == errno.EINVAL
    assert s.domain_counts() == (2, 2)


def test_open_without_create_of_missing_domain_is_eagain(setting):
    s = setting
    other = DomainFile()
    try:
        with pytest.raises(VerbsError) as e:
            s.sender.player.open_xrcd(other.path, 0)
        assert e.value.errno == errno.EAGAIN
        assert s.census().xrcd_of_inode(other.inode) is None
    finally:
        other.close()


def test_open_qp_of_unknown_number_is_einval(setting):
    s = setting
    for qpn in (s.qpn + 0x100000, 0xfffff0):
        with pytest.raises(VerbsError) as e:
            s.opener.player.open_qp(s.opener.xrcd, qpn)
        assert e.value.errno == errno.EINVAL
    assert s.census().tgt(s.qpn)["handles"] == 1


def test_send_to_unknown_srq_is_an_invalid_request(setting):
    s = setting
    assert s.send(srqn=s.srqn + 0x1000) == "invalid"
    assert s.census().tgt(s.qpn)["handles"] == 1
