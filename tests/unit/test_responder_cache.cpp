// SPDX-License-Identifier: BSD-2-Clause
// The requester's cached responder (engine_detail::responder_of): after each change that makes a
// responder unreachable, the cached lookup gives what a fresh connected_responder gives. Path
// changes are seen through Header::route_gen (device_routes_changed), everything else per message.
#include <gtest/gtest.h>

#include "device/engine_internal.h"
#include "emu/control.h"
#include "emu/device.h"
#include "engine_rig.h"

using namespace emu;
using engine_detail::connected_responder;
using engine_detail::responder_of;

namespace {

class ResponderCache : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(responder_of(r.s, a()), &b());  // found, and cached
    ASSERT_NE(a().resp_off, 0u);
  }
  QpSlot& a() { return qp_slot(r.h, r.a); }
  QpSlot& b() { return qp_slot(r.h, r.b); }
  // The cached lookup agrees with a fresh one, which is `want`.
  void expect_responder(QpSlot* want, const char* what) {
    EXPECT_EQ(connected_responder(r.s, a()), want) << what << " (fresh)";
    EXPECT_EQ(responder_of(r.s, a()), want) << what << " (cached)";
  }
  test::Rig r;
};

TEST_F(ResponderCache, APortGoingDownAndUpIsSeen) {
  ASSERT_EQ(set_port_state(r.s, 0, 1, false), Status::ok);
  expect_responder(nullptr, "port down");
  ASSERT_EQ(set_port_state(r.s, 0, 1, true), Status::ok);
  expect_responder(&b(), "port up again");
}

// ibv_modify_qp stores the attributes, then calls device_routes_changed: the same here by hand.
TEST_F(ResponderCache, APathChangedByAModifyIsSeen) {
  uint16_t lid = a().dlid;
  a().dlid = static_cast<uint16_t>(lid + 1);
  device_routes_changed(r.h);
  expect_responder(nullptr, "the requester's DLID leads elsewhere");
  a().dlid = lid;
  device_routes_changed(r.h);
  expect_responder(&b(), "the DLID back");
}

TEST_F(ResponderCache, TheGenerationIsWhatGuardsThePath) {
  uint64_t gen = r.h->route_gen.load();
  device_routes_changed(r.h);
  EXPECT_EQ(r.h->route_gen.load(), gen + 1);
  EXPECT_EQ(responder_of(r.s, a()), &b());
  EXPECT_EQ(a().resp_gen, gen + 1) << "looked up again under the new generation";
}

TEST_F(ResponderCache, AResponderLeavingTheReceivingStatesIsSeenWithoutAModify) {
  // As the engine's enter_error does: no device_routes_changed.
  b().qp_state.store(kQpsErr);
  expect_responder(nullptr, "responder in ERR");
  b().qp_state.store(kQpsReset);
  expect_responder(nullptr, "responder in RESET");
  b().qp_state.store(kQpsRts);
  expect_responder(&b(), "responder in RTS again");
}

TEST_F(ResponderCache, AResponderConnectedElsewhereIsSeen) {
  uint32_t dest = b().dest_qpn;
  b().dest_qpn = b().qpn;  // to itself, not to a
  expect_responder(nullptr, "responder's destination changed");
  b().dest_qpn = dest;
  expect_responder(&b(), "connected back");
}

TEST_F(ResponderCache, AResponderInADeadProcessIsSeen) {
  uint32_t owner = b().owner;
  uint32_t dead = kMaxProcs;
  for (uint32_t p = 0; p < kMaxProcs && dead == kMaxProcs; ++p)
    if (r.h->procs[p].state.load() != kProcAlive) dead = p;
  ASSERT_LT(dead, kMaxProcs);
  b().owner = dead;  // a process record not alive, as the sweep leaves a dead one's
  expect_responder(nullptr, "responder's process not alive");
  b().owner = owner;
  expect_responder(&b(), "alive again");
}

TEST_F(ResponderCache, ADestroyedResponderAndTheNextQpAreSeen) {
  uint32_t old_qpn = b().qpn;
  retire_qp(r.s, b());
  expect_responder(nullptr, "responder destroyed");
  // A new QP, even in the same slot, has another number: a's destination names nothing.
  r.b = r.make_qp();
  ASSERT_NE(b().qpn, old_qpn);
  b().dest_qpn = a().qpn;
  b().qp_state.store(kQpsRts);
  expect_responder(nullptr, "another QP");
  a().dest_qpn = b().qpn;  // (a modify would follow; the number alone tells it apart)
  expect_responder(&b(), "connected to the new QP");
}

TEST_F(ResponderCache, AResetRequesterForgetsItsResponder) {
  reset_qp_device_state(r.s, a());
  EXPECT_EQ(a().resp_off, 0u);
}

}  // namespace
