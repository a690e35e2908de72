// SPDX-License-Identifier: BSD-2-Clause
// The census (emu/census.h) and the XRC lifetime model (emu/xrc.h) on forged process records: what
// it reports for live and dead owners, domains, TGT QPs and their holders, and what a dead
// process's release leaves under each policy.
#include <gtest/gtest.h>

#include <string>

#include "emu/census.h"
#include "emu/objects.h"
#include "emu/xrc.h"

using namespace emu;

namespace {

// A process record for a pid that does not run (the census and the sweep see it as dead).
uint32_t forge_dead_proc(Segment* s) {
  Header* h = s->hdr();
  for (uint32_t i = 0; i < kMaxProcs; ++i) {
    if (h->procs[i].state.load() != kProcFree) continue;
    h->procs[i].pid = 0x3ffffff0;  // beyond pid_max
    h->procs[i].start_time = 1;
    h->procs[i].state.store(kProcAlive);
    return i;
  }
  ADD_FAILURE() << "no free process record";
  return 0;
}

// A TGT QP slot in domain xi, created (and held) by process `proc`.
uint32_t forge_tgt_qp(Segment* s, uint32_t xi, uint32_t proc, uint32_t* handle) {
  uint32_t qi = 0;
  EXPECT_EQ(create_tgt_qp(s, 0, 0, &qi), Status::ok);
  QpSlot& q = qp_slot(s->hdr(), qi);
  q.qp_state.store(kQpsRts);
  EXPECT_EQ(tgt_qp_attach(s, qi, xi, false, 0, 77, handle), Status::ok);
  s->hdr()->xrc_handles[*handle].owner = proc;
  q.owner = proc;
  q.creator_pid = s->hdr()->procs[proc].pid;
  q.creator_start = s->hdr()->procs[proc].start_time;
  return qi;
}

const CensusTgtQp* tgt(const Census& c, uint32_t qpn) {
  for (const CensusTgtQp& t : c.tgt_qps)
    if (t.qpn == qpn) return &t;
  return nullptr;
}

}  // namespace

TEST(Census, ReportsOwnersDomainsAndTgtQps) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  uint32_t cq = 0;
  ASSERT_EQ(create_cq(s, CqSpec{0, 0, 4, -1, 0}, &cq), Status::ok);
  uint32_t xi = 0, open = 0;
  ASSERT_EQ(xrcd_open(s, {0, 10, 20}, true, false, kXrcPolicyKernel, 0, &xi, &open), Status::ok);
  uint32_t th = 0;
  uint32_t qi = forge_tgt_qp(s, xi, s->self(), &th);
  uint32_t qpn = qp_slot(s->hdr(), qi).qpn;

  Census c = take_census(s);
  bool saw_cq = false;
  for (const CensusObject& o : c.objects)
    if (o.kind == "cq" && o.index == cq) saw_cq = o.owner_alive && o.owner_pid == s->pid();
  EXPECT_TRUE(saw_cq);
  ASSERT_EQ(c.xrcds.size(), 1u);
  EXPECT_TRUE(c.xrcds[0].shared);
  EXPECT_EQ(c.xrcds[0].inode, 20u);
  EXPECT_EQ(c.xrcds[0].inode_dev, 9u) << "reported as the file's st_dev";
  EXPECT_EQ(c.xrcds[0].opens, 1u);
  EXPECT_EQ(c.xrcds[0].objects, 1u);
  EXPECT_EQ(c.xrcds[0].policy, "kernel");
  const CensusTgtQp* t = tgt(c, qpn);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->handles, 1u);
  ASSERT_EQ(t->holders.size(), 1u);
  EXPECT_EQ(t->holders[0].pid, s->pid());
  EXPECT_FALSE(t->orphaned);
  EXPECT_TRUE(c.dead_owned.empty());
  std::string json = census_json(c);
  EXPECT_NE(json.find("\"tgt_qps\":[{\"qpn\":" + std::to_string(qpn)), std::string::npos) << json;
  EXPECT_NE(census_text(c).find("policy kernel opens 1 objects 1"), std::string::npos);

  tgt_qp_close(s, th, 77);  // the last handle: the kernel rule destroys the real QP
  c = take_census(s);
  EXPECT_EQ(tgt(c, qpn), nullptr);
  ASSERT_EQ(c.xrcds.size(), 1u);
  EXPECT_EQ(c.xrcds[0].objects, 0u);
  xrcd_close(s, open);
  EXPECT_TRUE(take_census(s).xrcds.empty()) << "no opens, no objects: the domain is gone";
  retire_cq(s, cq_slot(s->hdr(), cq));
}

TEST(Census, DeadCreatorUnderEachPolicy) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  for (uint32_t policy : {kXrcPolicyKernel, kXrcPolicyXrcd}) {
    SCOPED_TRACE(policy == kXrcPolicyKernel ? "kernel" : "xrcd");
    uint32_t dead = forge_dead_proc(s);
    // We keep the domain open; the dead process created a TGT QP in it and held its only handle.
    uint32_t xi = 0, open = 0;
    ASSERT_EQ(xrcd_open(s, {0, 11, 30 + policy}, true, false, policy, 0, &xi, &open), Status::ok);
    uint32_t th = 0;
    uint32_t qpn = qp_slot(s->hdr(), forge_tgt_qp(s, xi, dead, &th)).qpn;
    Census before = take_census(s);
    const CensusTgtQp* t = tgt(before, qpn);
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(t->orphaned);
    EXPECT_TRUE(before.dead_owned.empty()) << "a TGT QP is never counted as dead-owned";

    EXPECT_EQ(s->sweep_dead(), 1);  // what the next attach does
    Census after = take_census(s);
    if (policy == kXrcPolicyKernel) {
      EXPECT_EQ(tgt(after, qpn), nullptr) << "its last handle went with the process";
    } else {
      t = tgt(after, qpn);
      ASSERT_NE(t, nullptr) << "2a: bound to the domain, which we still hold open";
      EXPECT_EQ(t->handles, 0u);
      EXPECT_TRUE(t->orphaned);
      EXPECT_TRUE(t->dies_with_xrcd);
    }
    xrcd_close(s, open);
    EXPECT_EQ(tgt(take_census(s), qpn), nullptr) << "the domain's last open takes the rest";
    EXPECT_TRUE(take_census(s).xrcds.empty());
  }
}

// ibv_destroy_qp of the last TGT QP handle killed between freeing the handle and destroying the
// real QP (pyharness test_random_kills[10], a SIGKILL inside the opener's destroy): no handle of
// the dead names the QP any more, so only a recount from the handles finds that it must go.
TEST(Census, ADestroyCutShortAfterItsHandleWentTakesTheQpAtTheSweep) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  uint32_t dead = forge_dead_proc(s);
  uint32_t xi = 0, open = 0;
  ASSERT_EQ(xrcd_open(s, {0, 13, 50}, true, false, kXrcPolicyKernel, 0, &xi, &open), Status::ok);
  uint32_t th = 0;
  uint32_t qi = forge_tgt_qp(s, xi, dead, &th);
  uint32_t qpn = qp_slot(s->hdr(), qi).qpn;
  s->hdr()->xrc_handles[th].state.store(kSlotFree);  // where the SIGKILL came: count still 1
  ASSERT_NE(tgt(take_census(s), qpn), nullptr);
  EXPECT_EQ(s->sweep_dead(), 1);
  Census after = take_census(s);
  EXPECT_EQ(tgt(after, qpn), nullptr) << "no handle left: the kernel rule destroys it";
  ASSERT_EQ(after.xrcds.size(), 1u);
  EXPECT_EQ(after.xrcds[0].objects, 0u);
  xrcd_close(s, open);
  EXPECT_TRUE(take_census(s).xrcds.empty());
}

TEST(Census, XrcdOpenErrors) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  uint32_t xi = 0, h1 = 0, h2 = 0;
  EXPECT_EQ(xrcd_open(s, {0, 12, 40}, false, false, 0, 0, &xi, &h1), Status::not_found)
      << "no O_CREAT on a missing domain (EAGAIN)";
  ASSERT_EQ(xrcd_open(s, {0, 12, 40}, true, false, 0, 0, &xi, &h1), Status::ok);
  EXPECT_EQ(xrcd_open(s, {0, 12, 40}, true, true, 0, 0, &xi, &h2), Status::busy)
      << "O_EXCL on an existing domain (EINVAL)";
  uint32_t xi2 = 0;
  ASSERT_EQ(xrcd_open(s, {0, 12, 40}, false, false, 0, 0, &xi2, &h2), Status::ok);
  EXPECT_EQ(xi2, xi) << "the same file, the same domain";
  uint32_t qi = 0, h3 = 0;
  EXPECT_EQ(tgt_qp_open(s, xi, 0x123456, 0, 1, &qi, &h3), Status::not_found);
  xrcd_close(s, h2);
  xrcd_close(s, h1);
}

// Race events reach the census (counts per device and kind, and the events) and its JSON.
TEST(CensusRaces, RecordedEventsAreCountedAndListed) {
  Segment* s = Segment::get();
  Census before = take_census(s);
  RaceReport r;
  r.kind = kRaceBfTorn;
  r.action = kActExecutedBf;
  r.reg = 16;
  r.dev = 0;
  r.qpn = 0x1234;
  r.ctx = 2;
  r.slot = 41;
  r.writers[0] = 1001;
  r.writers[1] = 1002;
  record_race(s, r);
  Census c = take_census(s);
  EXPECT_EQ(c.races_total, before.races_total + 1);
  ASSERT_FALSE(c.race_counts.empty());
  EXPECT_EQ(c.race_counts[0][kRaceBfTorn], before.race_counts[0][kRaceBfTorn] + 1);
  ASSERT_FALSE(c.races.empty());
  const RaceRecord& e = c.races.back();
  EXPECT_EQ(e.kind, kRaceBfTorn);
  EXPECT_EQ(e.qpn, 0x1234u);
  EXPECT_EQ(e.writers[1], 1002u);
  std::string j = census_json(c);
  EXPECT_NE(j.find("\"races\":{\"total\":"), std::string::npos);
  EXPECT_NE(j.find("\"writer_threads\":[1001,1002]"), std::string::npos) << j;
  EXPECT_NE(j.find("\"executed\":\"executed_bf_copy\""), std::string::npos);
  EXPECT_NE(census_text(c).find("emu0 bf_torn"), std::string::npos);
}

// The log keeps the last kRaceLogLen events, numbered; a reader asking from N gets N onwards.
TEST(CensusRaces, TheLogKeepsTheLastEventsInOrder) {
  Segment* s = Segment::get();
  uint64_t first = races_recorded(s);
  RaceReport r;
  r.kind = kRaceDoubleWrite;
  for (uint32_t i = 0; i < kRaceLogLen + 10; ++i) {
    r.slot = i;
    record_race(s, r);
  }
  std::vector<RaceRecord> all = read_races(s);
  ASSERT_EQ(all.size(), kRaceLogLen);
  EXPECT_EQ(all.back().slot, kRaceLogLen + 9);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_EQ(all[i].seq, all[i - 1].seq + 1);
  std::vector<RaceRecord> tail = read_races(s, first + kRaceLogLen + 5);
  ASSERT_EQ(tail.size(), 5u);
  EXPECT_EQ(tail.front().slot, kRaceLogLen + 5);
}
