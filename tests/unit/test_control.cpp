// SPDX-License-Identifier: BSD-2-Clause
// The control API (emu/control.h): port state changes, the port events they send to the contexts
// of the device, and what a port that is down does to the responder lookup.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "device/engine_internal.h"
#include "emu/control.h"
#include "emu/notify.h"
#include "emu/objects.h"

using namespace emu;

namespace {

// A context slot of this process whose async pipe the test reads (non-blocking).
struct FakeContext {
  Segment* s = Segment::get();
  uint32_t idx = 0;
  int p[2] = {-1, -1};

  explicit FakeContext(uint32_t dev) {
    EXPECT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    EXPECT_EQ(create_ctx(s, ContextSpec{dev, 1, p[1]}, &idx), Status::ok);
  }
  ~FakeContext() {
    s->release_context_objects(idx);
    close(p[0]);
    close(p[1]);
  }
  // The next record, or false if none is waiting.
  bool next(AsyncEventRecord* rec) {
    ssize_t n = read(p[0], rec, sizeof *rec);
    if (n < 0)
      EXPECT_EQ(errno, EAGAIN);
    else
      EXPECT_EQ(n, static_cast<ssize_t>(sizeof *rec));
    return n == static_cast<ssize_t>(sizeof *rec);
  }
};

// Leaves port 1 of emu0 up whatever the test did.
struct PortUpAtEnd {
  ~PortUpAtEnd() { set_port_state(Segment::get(), 0, 1, true); }
};

}  // namespace

TEST(Control, FindsDevicesAndPortsThatExist) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  uint32_t dev = 99;
  ASSERT_EQ(find_device(s, "emu0", &dev), Status::ok);
  EXPECT_EQ(dev, 0u);
  EXPECT_EQ(find_device(s, "emu", &dev), Status::not_found);
  EXPECT_EQ(find_device(s, "emu00", &dev), Status::not_found);
  uint8_t st = 0;
  ASSERT_EQ(get_port_state(s, 0, 1, &st), Status::ok);
  EXPECT_EQ(st, kPortActive);
  uint32_t nports = s->hdr()->devices[0].num_ports;
  EXPECT_EQ(get_port_state(s, 0, 0, &st), Status::not_found);
  EXPECT_EQ(get_port_state(s, 0, nports + 1, &st), Status::not_found);
  EXPECT_EQ(get_port_state(s, s->hdr()->num_devices, 1, &st), Status::not_found);
  EXPECT_EQ(set_port_state(s, 0, nports + 1, false), Status::not_found);
  EXPECT_EQ(set_port_state(s, s->hdr()->num_devices, 1, false), Status::not_found);
}

TEST(Control, DownAndUpChangeTheStateOnlyOnce) {
  Segment* s = Segment::get();
  PortUpAtEnd restore;
  bool changed = false;
  uint8_t st = 0;
  ASSERT_EQ(set_port_state(s, 0, 1, false, &changed), Status::ok);
  EXPECT_TRUE(changed);
  ASSERT_EQ(get_port_state(s, 0, 1, &st), Status::ok);
  EXPECT_EQ(st, kPortDown);
  EXPECT_EQ(port_phys_state(st), kPhysDisabled);
  EXPECT_FALSE(port_carries(s->hdr(), 0, 1));
  ASSERT_EQ(set_port_state(s, 0, 1, false, &changed), Status::ok);
  EXPECT_FALSE(changed);
  ASSERT_EQ(set_port_state(s, 0, 1, true, &changed), Status::ok);
  EXPECT_TRUE(changed);
  ASSERT_EQ(get_port_state(s, 0, 1, &st), Status::ok);
  EXPECT_EQ(st, kPortActive);
  EXPECT_EQ(port_phys_state(st), kPhysLinkUp);
  EXPECT_TRUE(port_carries(s->hdr(), 0, 1));
  ASSERT_EQ(set_port_state(s, 0, 1, true, &changed), Status::ok);
  EXPECT_FALSE(changed);
}

TEST(Control, PortEventsReachTheContextsOfTheDeviceOnChangesOnly) {
  Segment* s = Segment::get();
  PortUpAtEnd restore;
  FakeContext mine(0), other_dev(1);
  AsyncEventRecord rec{};

  ASSERT_EQ(set_port_state(s, 0, 1, false), Status::ok);
  ASSERT_TRUE(mine.next(&rec));
  EXPECT_EQ(rec.type, kEvPortErr);
  EXPECT_EQ(rec.element_uid, 1u);  // the port number
  EXPECT_FALSE(mine.next(&rec)) << "one event per change";
  EXPECT_FALSE(other_dev.next(&rec)) << "a context of another device";

  ASSERT_EQ(set_port_state(s, 0, 1, false), Status::ok);
  EXPECT_FALSE(mine.next(&rec)) << "no event without a change";

  ASSERT_EQ(set_port_state(s, 0, 1, true), Status::ok);
  ASSERT_TRUE(mine.next(&rec));
  EXPECT_EQ(rec.type, kEvPortActive);
  EXPECT_EQ(rec.element_uid, 1u);
  EXPECT_FALSE(other_dev.next(&rec));
}

TEST(Control, AContextStillOpeningHasNoPipeToWriteInto) {
  Segment* s = Segment::get();
  uint32_t idx;
  ASSERT_EQ(s->alloc_ctx(&idx), Status::ok);
  EXPECT_EQ(s->hdr()->ctxs[idx].async_wfd, -1);  // not fd 0, which the owner may read
  s->hdr()->ctxs[idx].state.store(kSlotFree);
}

// Two RC QPs on ports 1 and 2 of emu0 (a second port is laid out by hand if the fabric has one).
TEST(Control, APortThatIsDownCarriesNothingEitherWay) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  // Field by field, not as whole structs: the header is not placed at its declared alignment (64),
  // and a struct copy may be compiled to aligned vector moves.
  DeviceState& d = h->devices[0];
  const uint32_t saved_ports = d.num_ports;
  if (saved_ports < 2) {
    d.ports[1].lid = static_cast<uint16_t>(d.ports[0].lid + 1);
    d.ports[1].state = kPortActive;
    d.ports[1].link_layer = d.ports[0].link_layer;
    d.ports[1].active_mtu = d.ports[0].active_mtu;
    d.num_ports = 2;
  }
  QpSpec spec{};
  spec.type = kQptRc;
  spec.ctx = kMaxContexts;  // no async events
  spec.sq_bbs = spec.rq_wqe_cnt = 1;
  spec.rq_stride = 16;
  uint32_t ia, ib;
  ASSERT_EQ(create_qp(s, spec, &ia), Status::ok);
  ASSERT_EQ(create_qp(s, spec, &ib), Status::ok);
  QpSlot& a = qp_slot(h, ia);
  QpSlot& b = qp_slot(h, ib);
  for (QpSlot* q : {&a, &b}) q->qp_state.store(kQpsRts);
  a.port = 1;
  b.port = 2;
  a.dest_qpn = b.qpn;
  b.dest_qpn = a.qpn;
  a.dlid = d.ports[1].lid;
  b.dlid = d.ports[0].lid;
  using engine_detail::connected_responder;
  EXPECT_EQ(connected_responder(s, a), &b);
  EXPECT_EQ(connected_responder(s, b), &a);

  for (uint32_t port : {1u, 2u}) {
    ASSERT_EQ(set_port_state(s, 0, port, false), Status::ok);
    EXPECT_EQ(connected_responder(s, a), nullptr) << "port " << port << " down";
    EXPECT_EQ(connected_responder(s, b), nullptr) << "port " << port << " down";
    ASSERT_EQ(set_port_state(s, 0, port, true), Status::ok);
    EXPECT_EQ(connected_responder(s, a), &b) << "port " << port << " up again";
    EXPECT_EQ(connected_responder(s, b), &a) << "port " << port << " up again";
  }

  retire_qp(s, a);
  retire_qp(s, b);
  if (saved_ports < 2) {
    d.num_ports = saved_ports;
    d.ports[1].lid = 0;
    d.ports[1].state = 0;
  }
}
