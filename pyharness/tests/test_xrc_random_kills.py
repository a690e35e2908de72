# SPDX-License-Identifier: BSD-2-Clause
"""docs/design/xrc.md's random-kill row (XrcKill.RandomKills) as Python: creator, opener and sender
run
every XRC lifetime step while one or two of them are SIGKILLed at a step drawn from the seed,
between two steps or inside one (the command sent, the SIGKILL on its heels). Any answer is
acceptable from a step (a death may fail it); no answer from a survivor is not. Then the census
shows nothing of the dead except TGT QPs a policy keeps on purpose, and once the survivors have
gone too, nothing at all. Seeds are fixed, so a failure repeats with its seed."""
import os
import random

import pytest

from rdmaemu import VerbsError
from resources import POLICIES, BaseResources, DomainFile

pytestmark = pytest.mark.emu_only(reason="XRC: rxe implements none, and the kernel's census "
                                         "tracks no XRC domain or TGT QP handle")
WHO = ("creator", "opener", "sender")


def scenario(r, path, v):
    """(who, the command's words or None to skip it, what to keep of its answer), in order; `v`
    collects the handles and numbers the later steps need (absent when a death prevented them)."""
    c, o, s = r["creator"], r["opener"], r["sender"]
    need = lambda *keys: all(k in v for k in keys)  # noqa: E731
    keep = lambda **names: lambda a: v.update({k: a[w] for k, w in names.items()})  # noqa: E731
    return [
        ("creator", lambda: ("xrcd", path, os.O_CREAT), keep(cx="handle")),
        ("creator", lambda: need("cx") and ("qp", "xrc_recv", v["cx"], 0, 0, -1),
         keep(tgt="handle", qpn="qpn")),
        ("opener", lambda: ("xrcd", path, 0), keep(ox="handle")),
        ("opener", lambda: need("ox") and ("xrc_srq", v["ox"], o.pd, o.cq, o.mr, 4),
         keep(srq="handle", srqn="srqn")),
        ("sender", lambda: ("qp", "xrc_send", s.pd, s.cq, 0, -1), keep(ini="handle", ini_qpn="qpn")),
        ("creator", lambda: need("tgt", "ini") and ("rts", v["tgt"], s.lid, v["ini_qpn"], 14, 7), None),
        ("sender", lambda: need("tgt", "ini") and ("rts", v["ini"], c.lid, v["qpn"], 1, 1), None),
        ("opener", lambda: need("ox", "qpn") and ("open_qp", v["ox"], v["qpn"]), keep(handle="handle")),
        ("sender", lambda: need("srqn", "ini") and ("send", v["ini"], s.mr, v["srqn"], 1, 16, 0), None),
        ("sender", lambda: need("srqn", "ini") and ("poll", s.cq, 1, 5000), None),
        ("opener", lambda: ("poll", o.cq, 1, 0), None),
        ("creator", lambda: need("tgt") and ("destroy", v["tgt"]), None),
        ("sender", lambda: need("srqn", "ini") and ("send", v["ini"], s.mr, v["srqn"], 2, 16, 0), None),
        ("opener", lambda: need("handle") and ("destroy", v["handle"]), None),
        ("opener", lambda: need("srq") and ("destroy", v["srq"]), None),
        ("opener", lambda: need("ox") and ("destroy", v["ox"]), None),
        ("creator", lambda: need("cx") and ("destroy", v["cx"]), None),
    ]


def check_mid(c):
    """What the census may show while some players are dead and the others live on."""
    assert c.dead_owned == [], c.raw
    opens = {x["index"]: x["opens"] for x in c.xrcds}
    for t in c.tgt_qps:
        assert all(h["alive"] for h in t["holders"]), c.raw  # no TGT QP held by the dead
        if not t["holders"]:  # handle-less: only bound to its domain, and only while it is open
            assert t["dies_with_xrcd"] and opens.get(t["xrcd"], 0) > 0, c.raw
    for x in c.xrcds:
        assert all(h["alive"] for h in x["openers"]), c.raw
        assert x["opens"] > 0 or x["objects"] > 0, c.raw


@pytest.mark.parametrize("seed", range(1, 13))
def test_random_kills(players, census, seed):
    rng = random.Random(seed)
    policy = sorted(POLICIES)[rng.randrange(len(POLICIES))]
    domain = DomainFile()
    try:
        r = {w: BaseResources(players, w, POLICIES[policy][0]) for w in WHO}
        v = {}
        steps = scenario(r, domain.path, v)
        kill_at = rng.randrange(len(steps) + 1)  # len(steps): after the last step
        victims = {rng.choice(WHO)} | ({rng.choice(WHO)} if rng.randrange(4) == 0 else set())
        mid_verb = rng.randrange(2) == 1
        for i, (who, words, got) in enumerate(steps + [(None, None, None)]):
            p = who and r[who].player
            inside = mid_verb and who in victims
            if i == kill_at:
                # Inside the step: the command is on its way when the SIGKILL comes.
                cmd = inside and p.alive() and words()
                if cmd:
                    p.send_only(*cmd)
                for w in victims:
                    r[w].player.kill()
                if inside:
                    continue
            cmd = p and p.alive() and words()
            if not cmd:
                continue
            try:
                answer = p.call(*cmd)
            except VerbsError:
                continue  # a step may fail because of a death; an answer is what matters
            if got:
                got(answer)
        survivors = [r[w].player for w in WHO if r[w].player.alive()]
        for p in survivors:
            assert p.call("pid")["pid"] == p.pid  # still answers
        check_mid(census())
        for p in survivors:
            if rng.randrange(2):
                p.kill()
            else:
                p.exit()
        c = census()
        assert (c.objects, c.xrcds, c.tgt_qps) == ([], [], []), c.raw
    finally:
        domain.close()
