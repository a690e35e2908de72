// SPDX-License-Identifier: BSD-2-Clause
// The rows of docs/design/xrc.md: what happens to XRC domains and TGT QPs when processes create,
// open, destroy, close, exit and die, under each lifetime policy. Three processes (xrc_players.h):
// the creator makes the domain and the TGT QP; the opener opens the domain, owns the XRC SRQ the
// traffic lands in and (in some rows) holds an ibv_open_qp handle; the sender has an INI QP
// connected to the TGT QP. Each step checks what verbs show (traffic lands, or the sender's
// completion is RETRY_EXC_ERR; errnos) and the census taken in a separate process.
#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <ostream>
#include <string>

#include "verbs_fixture.h"
#include "xrc_players.h"

namespace vt {
namespace {

struct Variant {
  const char* name;
  const char* policy;           // EMU_XRC_POLICY in the creator when it makes the domain
  const char* lifetime;         // EMU_XRC_TGT_LIFETIME in the creator when it makes the TGT QP
  bool kept;                    // a TGT QP whose handles all went with their processes stays
  bool explicit_destroy_kills;  // ibv_destroy_qp of any handle destroys the real QP
};

const Variant kVariants[] = {
    {"kernel", "kernel", "process", false, false},
    {"xrcd_2a", "xrcd", "process", true, true},
    {"creator_process", "creator", "process", false, false},
    {"creator_xrcd", "creator", "xrcd", true, true},
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

bool has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Everything the census shows is owned, held or opened by a live process, unless a policy keeps
// it (a TGT QP bound to its domain).
void expect_nothing_of_the_dead(const CensusView& c) {
  EXPECT_EQ(c.dead_owned, 0u) << c.json;
  for (const CensusView::Tgt& t : c.tgts)
    for (bool a : t.holder_alive)
      EXPECT_TRUE(a) << "TGT QP " << t.qpn << " held by the dead\n" << c.json;
  for (const CensusView::Xrcd& d : c.xrcds)
    for (bool a : d.opener_alive) EXPECT_TRUE(a) << "domain opened by the dead\n" << c.json;
}

class XrcLifetime : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { signal(SIGPIPE, SIG_IGN); }

  // The domain and the TGT QP (creator), the domain and the SRQ (opener, and its handle if
  // opener_handle), the INI QP (sender), both QPs connected.
  void setup(bool opener_handle) {
    const Variant& v = GetParam();
    ASSERT_FALSE(file.path.empty());
    ASSERT_TRUE(creator.start());
    ASSERT_TRUE(opener.start());
    ASSERT_TRUE(sender.start());
    ASSERT_TRUE(creator.call(std::string("setenv EMU_XRC_POLICY ") + v.policy).ok());
    ASSERT_TRUE(creator.call(std::string("setenv EMU_XRC_TGT_LIFETIME ") + v.lifetime).ok());
    ASSERT_TRUE(creator.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT)).ok());
    Reply r = creator.call("create_tgt");
    ASSERT_TRUE(r.ok()) << r.text;
    tgt = static_cast<uint32_t>(r.val(0));
    ASSERT_TRUE(opener.call("open_xrcd " + file.path + " 0").ok());
    r = opener.call("create_srq 16");
    ASSERT_TRUE(r.ok()) << r.text;
    srqn = static_cast<uint32_t>(r.val(0));
    r = sender.call("create_ini");
    ASSERT_TRUE(r.ok()) << r.text;
    uint32_t ini = static_cast<uint32_t>(r.val(0));
    lid = static_cast<uint16_t>(r.val(1));
    r = creator.call("connect_tgt " + std::to_string(lid) + " " + std::to_string(ini));
    ASSERT_TRUE(r.ok()) << r.text;
    r = sender.call("connect_ini " + std::to_string(lid) + " " + std::to_string(tgt));
    ASSERT_TRUE(r.ok()) << r.text;
    if (opener_handle) {
      r = opener.call("open_qp " + std::to_string(tgt));
      ASSERT_TRUE(r.ok()) << r.text;
    }
    CensusView c = take_census_view();
    ASSERT_TRUE(c.ok);
    const CensusView::Tgt* t = c.tgt(tgt);
    ASSERT_NE(t, nullptr) << c.json;
    EXPECT_EQ(t->handles, opener_handle ? 2u : 1u) << c.json;
    EXPECT_TRUE(has(t->holders, creator.pid())) << c.json;
    EXPECT_EQ(has(t->holders, opener.pid()), opener_handle) << c.json;
    EXPECT_FALSE(t->orphaned);
    EXPECT_EQ(t->dies_with_xrcd, v.kept) << c.json;
    const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
    ASSERT_NE(d, nullptr) << c.json;
    EXPECT_EQ(d->policy, v.policy);
    EXPECT_EQ(d->opens, 2u);
    EXPECT_EQ(d->objects, 2u);  // the TGT QP and the XRC SRQ
    expect_nothing_of_the_dead(c);
  }

  // A SEND through the TGT QP lands in the opener's SRQ.
  void expect_lands(long tag) {
    Reply r = sender.call("send " + std::to_string(srqn) + " " + std::to_string(tag));
    ASSERT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.val(0), IBV_WC_SUCCESS);
    r = opener.call("poll 1 5000");
    ASSERT_TRUE(r.ok()) << r.text;
    ASSERT_EQ(r.val(0), 1) << r.text;
    EXPECT_EQ(r.val(1), IBV_WC_SUCCESS);
    EXPECT_EQ(r.val(2), tag);
  }

  // The TGT QP is gone: the sender's SEND completes with RETRY_EXC_ERR, nothing lands.
  void expect_lost() {
    Reply r = sender.call("send " + std::to_string(srqn) + " 99");
    ASSERT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.val(0), IBV_WC_RETRY_EXC_ERR);
    r = opener.call("poll 1 0");
    ASSERT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.val(0), 0) << r.text;
  }

  void creator_goes(bool kill) {
    if (kill)
      creator.kill_now();
    else
      ASSERT_TRUE(creator.exit_normally());
  }

  // Rows of docs/design/xrc.md shared by the exit and the SIGKILL variants.
  void row_opener_holds(bool kill);
  void row_no_other_handle(bool kill);

  DomainFile file;
  Player creator, opener, sender;
  uint32_t tgt = 0, srqn = 0;
  uint16_t lid = 0;
};

void XrcLifetime::row_opener_holds(bool kill) {
  ASSERT_NO_FATAL_FAILURE(setup(true));
  ASSERT_NO_FATAL_FAILURE(creator_goes(kill));
  {
    CensusView c = take_census_view();
    const CensusView::Tgt* q = c.tgt(tgt);
    ASSERT_NE(q, nullptr) << c.json;
    EXPECT_EQ(q->handles, 1u);
    EXPECT_EQ(q->holders, std::vector<int>{opener.pid()}) << c.json;
    EXPECT_TRUE(q->orphaned) << c.json;
    EXPECT_FALSE(q->creator_alive);
    const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->opens, 1u);
    EXPECT_EQ(d->objects, 2u);
    expect_nothing_of_the_dead(c);
  }
  ASSERT_NO_FATAL_FAILURE(expect_lands(7));
  // The last handle destroyed: the real QP goes, under every policy.
  ASSERT_TRUE(opener.call("destroy_tgt").ok());
  {
    CensusView c = take_census_view();
    EXPECT_EQ(c.tgt(tgt), nullptr) << c.json;
    const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->objects, 1u);
    expect_nothing_of_the_dead(c);
  }
  ASSERT_NO_FATAL_FAILURE(expect_lost());
}

TEST_P(XrcLifetime, CreatorExitsWhileOpenerHoldsHandle) { row_opener_holds(false); }
TEST_P(XrcLifetime, CreatorKilledWhileOpenerHoldsHandle) { row_opener_holds(true); }

// Row "creator exits / is SIGKILLed, no other handle, the domain still open elsewhere": the kernel
// rule destroys the QP with its last handle; 2a (and 2b "xrcd") keep it, orphaned, reachable by
// number — the leak a domain shared across jobs shows.
void XrcLifetime::row_no_other_handle(bool kill) {
  const Variant& v = GetParam();
  ASSERT_NO_FATAL_FAILURE(setup(false));
  ASSERT_NO_FATAL_FAILURE(creator_goes(kill));
  {
    CensusView c = take_census_view();
    const CensusView::Tgt* q = c.tgt(tgt);
    const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
    ASSERT_NE(d, nullptr) << c.json;
    EXPECT_EQ(d->opens, 1u);
    if (v.kept) {
      ASSERT_NE(q, nullptr) << c.json;
      EXPECT_EQ(q->handles, 0u);
      EXPECT_TRUE(q->holders.empty());
      EXPECT_TRUE(q->orphaned);
      EXPECT_TRUE(q->dies_with_xrcd);
      EXPECT_EQ(d->objects, 2u);
    } else {
      EXPECT_EQ(q, nullptr) << c.json;
      EXPECT_EQ(d->objects, 1u);
    }
    expect_nothing_of_the_dead(c);
  }
  if (v.kept)
    ASSERT_NO_FATAL_FAILURE(expect_lands(8));
  else
    ASSERT_NO_FATAL_FAILURE(expect_lost());
  Reply r = opener.call("open_qp " + std::to_string(tgt));
  EXPECT_EQ(r.err, v.kept ? 0 : EINVAL) << r.text;
  if (v.kept) {
    CensusView c = take_census_view();
    const CensusView::Tgt* q = c.tgt(tgt);
    ASSERT_NE(q, nullptr) << c.json;
    EXPECT_EQ(q->handles, 1u);
    EXPECT_EQ(q->holders, std::vector<int>{opener.pid()});
  }
}

TEST_P(XrcLifetime, CreatorExitsNoOtherHandle) { row_no_other_handle(false); }
TEST_P(XrcLifetime, CreatorKilledNoOtherHandle) { row_no_other_handle(true); }

// Row "a handle destroyed while another process holds one": the kernel rule only drops a count;
// 2a destroys the real QP (explicitly destroyed), and the other handle is stale. Destroying the
// stale handle later must not release anything else (its slot may hold someone's new reference).
TEST_P(XrcLifetime, HandleDestroyedWhileAnotherHolds) {
  const Variant& v = GetParam();
  ASSERT_NO_FATAL_FAILURE(setup(true));
  ASSERT_TRUE(creator.call("destroy_tgt").ok());
  {
    CensusView c = take_census_view();
    const CensusView::Tgt* q = c.tgt(tgt);
    if (v.explicit_destroy_kills) {
      EXPECT_EQ(q, nullptr) << c.json;
    } else {
      ASSERT_NE(q, nullptr) << c.json;
      EXPECT_EQ(q->handles, 1u);
      EXPECT_EQ(q->holders, std::vector<int>{opener.pid()});
      EXPECT_FALSE(q->orphaned);  // the creator lives
    }
    expect_nothing_of_the_dead(c);
  }
  if (v.explicit_destroy_kills)
    ASSERT_NO_FATAL_FAILURE(expect_lost());
  else
    ASSERT_NO_FATAL_FAILURE(expect_lands(9));
  // New references take the free handle slots, under 2a the stale handle's too: the sender opens
  // the domain, the creator makes a second TGT QP.
  ASSERT_TRUE(sender.call("open_xrcd " + file.path + " 0").ok());
  Reply r = creator.call("create_tgt");
  ASSERT_TRUE(r.ok()) << r.text;
  uint32_t tgt2 = static_cast<uint32_t>(r.val(0));
  ASSERT_TRUE(opener.call("destroy_tgt").ok());
  CensusView c = take_census_view();
  EXPECT_EQ(c.tgt(tgt), nullptr) << c.json;
  const CensusView::Tgt* q2 = c.tgt(tgt2);
  ASSERT_NE(q2, nullptr) << "the stale handle's destroy took another QP\n" << c.json;
  EXPECT_EQ(q2->handles, 1u) << c.json;
  EXPECT_EQ(q2->holders, std::vector<int>{creator.pid()}) << c.json;
  const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
  ASSERT_NE(d, nullptr) << c.json;
  EXPECT_EQ(d->opens, 3u) << c.json;
  EXPECT_TRUE(has(d->openers, sender.pid())) << c.json;
  EXPECT_EQ(d->objects, 2u) << c.json;  // the SRQ and the second TGT QP
  expect_nothing_of_the_dead(c);
}

// Row "the domain's last open goes": a TGT QP kept by the policy goes with its domain; under the
// kernel rule there is nothing left by then. The census ends empty.
TEST_P(XrcLifetime, LastOpenOfDomainGoes) {
  ASSERT_NO_FATAL_FAILURE(setup(false));
  creator.kill_now();
  ASSERT_TRUE(opener.call("destroy_srq").ok());
  ASSERT_TRUE(opener.call("close_xrcd").ok());
  CensusView c = take_census_view();
  EXPECT_EQ(c.tgt(tgt), nullptr) << c.json;
  EXPECT_EQ(c.xrcd_of_inode(file.inode), nullptr) << c.json;
  EXPECT_EQ(c.count("qp", "XRC_RECV"), 0u) << c.json;
  expect_nothing_of_the_dead(c);
  ASSERT_NO_FATAL_FAILURE(expect_lost());
}

// Row "a handle holder other than the creator is SIGKILLed": its handle, its open and its XRC SRQ
// go; the creator's handle keeps the QP (every policy).
TEST_P(XrcLifetime, OpenerKilledWhileHoldingHandle) {
  ASSERT_NO_FATAL_FAILURE(setup(true));
  opener.kill_now();
  CensusView c = take_census_view();
  const CensusView::Tgt* q = c.tgt(tgt);
  ASSERT_NE(q, nullptr) << c.json;
  EXPECT_EQ(q->handles, 1u);
  EXPECT_EQ(q->holders, std::vector<int>{creator.pid()});
  EXPECT_FALSE(q->orphaned);
  const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->opens, 1u);
  EXPECT_EQ(d->objects, 1u);  // the SRQ went with its process
  EXPECT_EQ(c.count("srq", "XRC"), 0u) << c.json;
  expect_nothing_of_the_dead(c);
}

INSTANTIATE_TEST_SUITE_P(Policies, XrcLifetime, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.name);
                         });

// The rows where every policy answers alike: the kernel's errnos.
class XrcErrnos : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_FALSE(file.path.empty());
    ASSERT_TRUE(a.start());
    ASSERT_TRUE(b.start());
  }
  DomainFile file;
  Player a, b;
};

// Row "ibv_close_xrcd while this process still has objects on the domain": EBUSY, nothing changes.
TEST_F(XrcErrnos, CloseXrcdWithOwnObjectsIsEbusy) {
  ASSERT_TRUE(a.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT)).ok());
  ASSERT_TRUE(a.call("create_tgt").ok());
  ASSERT_TRUE(b.call("open_xrcd " + file.path + " 0").ok());
  ASSERT_TRUE(b.call("create_srq 1").ok());
  EXPECT_EQ(a.call("close_xrcd").err, EBUSY);
  EXPECT_EQ(b.call("close_xrcd").err, EBUSY);
  CensusView c = take_census_view();
  const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
  ASSERT_NE(d, nullptr) << c.json;
  EXPECT_EQ(d->opens, 2u);
  EXPECT_EQ(d->objects, 2u);
  EXPECT_EQ(c.tgts.size(), 1u) << c.json;
  ASSERT_TRUE(a.call("destroy_tgt").ok());
  ASSERT_TRUE(b.call("destroy_srq").ok());
  EXPECT_TRUE(a.call("close_xrcd").ok());
  EXPECT_TRUE(b.call("close_xrcd").ok());
  c = take_census_view();
  EXPECT_EQ(c.xrcd_of_inode(file.inode), nullptr) << c.json;
  EXPECT_TRUE(c.tgts.empty()) << c.json;
}

// Row "O_EXCL on an existing domain": EINVAL (the kernel's answer), nothing changes.
TEST_F(XrcErrnos, ExclusiveOpenOfExistingDomainIsEinval) {
  ASSERT_TRUE(a.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT | O_EXCL)).ok());
  EXPECT_EQ(b.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT | O_EXCL)).err, EINVAL);
  CensusView c = take_census_view();
  const CensusView::Xrcd* d = c.xrcd_of_inode(file.inode);
  ASSERT_NE(d, nullptr) << c.json;
  EXPECT_EQ(d->opens, 1u);
  EXPECT_EQ(d->openers, std::vector<int>{a.pid()});
}

// Row "open without O_CREAT of a domain nobody made": EAGAIN, no domain appears.
TEST_F(XrcErrnos, OpenWithoutCreateOfMissingDomainIsEagain) {
  EXPECT_EQ(a.call("open_xrcd " + file.path + " 0").err, EAGAIN);
  CensusView c = take_census_view();
  EXPECT_EQ(c.xrcd_of_inode(file.inode), nullptr) << c.json;
  // And once the domain is gone again, the same answer.
  ASSERT_TRUE(b.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT)).ok());
  ASSERT_TRUE(b.call("close_xrcd").ok());
  EXPECT_EQ(a.call("open_xrcd " + file.path + " 0").err, EAGAIN);
}

// Row "ibv_open_qp of a number that is no TGT QP of the domain": EINVAL — an unknown number, an
// INI QP's number, a TGT QP of another domain.
TEST_F(XrcErrnos, OpenQpOfUnknownNumberIsEinval) {
  DomainFile other;
  ASSERT_TRUE(a.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT)).ok());
  Reply t = a.call("create_tgt");
  ASSERT_TRUE(t.ok()) << t.text;
  Reply ini = a.call("create_ini");
  ASSERT_TRUE(ini.ok()) << ini.text;
  ASSERT_TRUE(b.call("open_xrcd " + other.path + " " + std::to_string(O_CREAT)).ok());
  EXPECT_EQ(b.call("open_qp " + std::to_string(t.val(0) ^ 0x800000)).err, EINVAL);
  EXPECT_EQ(b.call("open_qp " + std::to_string(ini.val(0))).err, EINVAL);
  EXPECT_EQ(b.call("open_qp " + std::to_string(t.val(0))).err, EINVAL);  // another domain's
  CensusView c = take_census_view();
  ASSERT_EQ(c.tgts.size(), 1u) << c.json;
  EXPECT_EQ(c.tgts[0].handles, 1u);
}

}  // namespace
// The packet names an SRQ the TGT QP's domain does not have (no such number, or an XRC SRQ of
// another domain): the responder answers with an invalid-request NAK, the sender completes with
// REM_INV_REQ_ERR and nothing lands.
class XrcBadSrq : public XrcErrnos {
 protected:
  // Player a: domain `file` and a TGT QP in it; the TGT QP's number.
  long make_tgt() {
    Reply r = a.call("open_xrcd " + file.path + " " + std::to_string(O_CREAT));
    EXPECT_TRUE(r.ok()) << r.text;
    r = a.call("create_tgt");
    EXPECT_TRUE(r.ok()) << r.text;
    return r.val(0);
  }
  // Player a: an INI QP connected to its TGT QP `tgt`, and a SEND through it to `srqn`; the
  // sender's status (-1: the SEND failed).
  long send_from_ini(long tgt, uint32_t srqn) {
    Reply r = a.call("create_ini");
    EXPECT_TRUE(r.ok()) << r.text;
    long ini = r.val(0), lid = r.val(1);
    EXPECT_TRUE(a.call("connect_tgt " + std::to_string(lid) + " " + std::to_string(ini)).ok());
    EXPECT_TRUE(a.call("connect_ini " + std::to_string(lid) + " " + std::to_string(tgt)).ok());
    r = a.call("send " + std::to_string(srqn) + " 5");
    EXPECT_TRUE(r.ok()) << r.text;
    return r.ok() ? r.val(0) : -1;
  }
  // Player a: domain `file`, a TGT QP and an INI QP connected to it. Returns the sender's status
  // for a SEND to `srqn`.
  long send_to(uint32_t srqn) { return send_from_ini(make_tgt(), srqn); }
  // Player b: domain `path` and an XRC SRQ with one receive posted (*srqn: its number).
  void srq_of_b(const std::string& path, uint32_t* srqn) {
    ASSERT_TRUE(b.call("open_xrcd " + path + " " + std::to_string(O_CREAT)).ok());
    Reply r = b.call("create_srq 1");
    ASSERT_TRUE(r.ok()) << r.text;
    *srqn = static_cast<uint32_t>(r.val(0));
  }
  // b's SRQ has completed nothing.
  void expect_nothing_landed(const std::string& what) {
    Reply r = b.call("poll 1 0");
    ASSERT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.val(0), 0) << what << ": " << r.text;
  }
  DomainFile other;
};

TEST_F(XrcBadSrq, UnknownSrqNumberIsAnInvalidRequest) {
  uint32_t srqn = 0;
  ASSERT_NO_FATAL_FAILURE(srq_of_b(file.path, &srqn));
  EXPECT_EQ(send_to(srqn ^ 0x3), IBV_WC_REM_INV_REQ_ERR);
  expect_nothing_landed("nothing landed");
}

TEST_F(XrcBadSrq, SrqOfAnotherDomainIsAnInvalidRequest) {
  uint32_t srqn = 0;
  ASSERT_NO_FATAL_FAILURE(srq_of_b(other.path, &srqn));
  EXPECT_EQ(send_to(srqn), IBV_WC_REM_INV_REQ_ERR);
  expect_nothing_landed("nothing landed in the other domain's SRQ");
}

// Events on a TGT QP go to every handle: an invalid request (a SEND naming no SRQ) puts the TGT QP
// in ERR with IBV_EVENT_QP_REQ_ERR, which the creator's handle and the opener's both receive.
TEST_F(XrcBadSrq, TgtQpEventsReachEveryHandle) {
  uint32_t srqn = 0;
  ASSERT_NO_FATAL_FAILURE(srq_of_b(file.path, &srqn));
  // a creates the TGT QP; b opens a handle to it before the bad SEND goes.
  long tgt = make_tgt();
  ASSERT_FALSE(HasFailure()) << "player a has no TGT QP";
  ASSERT_TRUE(b.call("open_qp " + std::to_string(tgt)).ok());
  long status = send_from_ini(tgt, srqn ^ 0x3);
  ASSERT_FALSE(HasFailure()) << "player a's SEND did not complete";
  EXPECT_EQ(status, IBV_WC_REM_INV_REQ_ERR);
  for (Player* p : {&a, &b}) {
    Reply r = p->call("async_event 5000");
    ASSERT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.val(0), IBV_EVENT_QP_REQ_ERR) << (p == &a ? "creator" : "opener") << ": " << r.text;
    EXPECT_EQ(r.val(1), tgt) << "the event names the handle's QP";
  }
}

}  // namespace vt
