// SPDX-License-Identifier: BSD-2-Clause
// Link layers in the device model: EMU_LINK_LAYER / EMU_ROCE_NETDEV parsing, the GID table a RoCE
// port builds from an interface, the interface as libnl reads it (against getifaddrs), and
// path_reaches, the routing rule of both link layers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "device/engine_internal.h"
#include "emu/config.h"
#include "host_netdev.h"
#include "ports/link_layer.h"
#include "ports/netdev.h"

using namespace emu;
using testhost::Gid;

namespace {

Gid gid_at(const PortState& ps, uint32_t i) {
  Gid g;
  std::memcpy(g.data(), ps.gid[i], 16);
  return g;
}

Gid parse_gid(std::initializer_list<uint8_t> bytes) {
  Gid g{};
  std::copy(bytes.begin(), bytes.end(), g.begin());
  return g;
}

Netdev sample_netdev() {
  Netdev nd;
  nd.name = "eth7";
  nd.ifindex = 7;
  nd.mac = {0x02, 0xfc, 0x00, 0x00, 0x00, 0x01};
  nd.mtu = 1500;
  nd.up = true;
  nd.ipv4 = {{192, 0, 2, 2}, {10, 1, 2, 3}};
  // The link-local address equals the default GID and must not be listed twice.
  nd.ipv6 = {{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0xfc, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01},
             {0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
  return nd;
}

}  // namespace

TEST(LinkLayerConfig, DefaultIsInfiniBandEverywhere) {
  unsetenv("EMU_LINK_LAYER");
  unsetenv("EMU_ROCE_NETDEV");
  Config c = config_from_env();
  for (uint32_t p = 1; p <= 4; ++p) {
    EXPECT_EQ(c.link_layer(p), PortLinkLayer::infiniband) << p;
    EXPECT_EQ(c.roce_netdev(p), "") << p;
  }
}

TEST(LinkLayerConfig, PerPortListsWithTheLastEntryRepeating) {
  setenv("EMU_LINK_LAYER", "ib,eth", 1);
  setenv("EMU_ROCE_NETDEV", "auto,lo", 1);
  Config c = config_from_env();
  EXPECT_EQ(c.link_layer(1), PortLinkLayer::infiniband);
  EXPECT_EQ(c.link_layer(2), PortLinkLayer::ethernet);
  EXPECT_EQ(c.link_layer(4), PortLinkLayer::ethernet);
  EXPECT_EQ(c.roce_netdev(1), "");
  EXPECT_EQ(c.roce_netdev(2), "lo");
  EXPECT_EQ(c.roce_netdev(3), "lo");
  setenv("EMU_LINK_LAYER", "eth", 1);
  setenv("EMU_ROCE_NETDEV", "lo", 1);
  c = config_from_env();
  EXPECT_EQ(c.link_layer(1), PortLinkLayer::ethernet);
  EXPECT_EQ(c.link_layer(3), PortLinkLayer::ethernet);
  EXPECT_EQ(c.roce_netdev(1), "lo");
  setenv("EMU_LINK_LAYER", "roce", 1);  // not a link layer: refused (its default stands here)
  EXPECT_NE(knob_errors_in_env().find("rdmaemu: EMU_LINK_LAYER=roce: "), std::string::npos);
  c = config_from_env();
  EXPECT_EQ(c.link_layer(1), PortLinkLayer::infiniband);
  unsetenv("EMU_LINK_LAYER");
  unsetenv("EMU_ROCE_NETDEV");
}

TEST(RoceMtu, LargestIbMtuThatFitsWithTheHeaders) {
  EXPECT_EQ(roce_active_mtu(1500), 3);  // 1024, as rxe on a standard Ethernet
  EXPECT_EQ(roce_active_mtu(1400), 3);
  EXPECT_EQ(roce_active_mtu(1100), 2);  // 1024 + headers do not fit
  EXPECT_EQ(roce_active_mtu(2048 + 96), 4);
  EXPECT_EQ(roce_active_mtu(2048 + 95), 3);
  EXPECT_EQ(roce_active_mtu(9000), 5);
  EXPECT_EQ(roce_active_mtu(65536), 5);  // lo
  EXPECT_EQ(roce_active_mtu(68), 1);     // never below 256
}

TEST(IbPort, OneGidOfPrefixAndPortGuid) {
  PortState ps;
  init_ib_port(&ps, 0x0002c90300000100ull, 2, 6);
  EXPECT_EQ(ps.link_layer, kLinkLayerIb);
  EXPECT_EQ(ps.lid, 6);
  EXPECT_EQ(ps.gid_tbl_len, kIbGidTableLen);
  ASSERT_EQ(ps.gid_count, 1);
  EXPECT_EQ(ps.gid_type[0], kGidTypeIb);
  EXPECT_EQ(gid_at(ps, 0), parse_gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00,
                                      0x00, 0x01, 0x02}));
}

TEST(RocePort, GidTableAsSoftRoceListsIt) {
  PortState ps;
  init_roce_port(&ps, 0x0002c90300000100ull, 1, sample_netdev());
  EXPECT_EQ(ps.link_layer, kLinkLayerEthernet);
  EXPECT_EQ(ps.lid, 0);
  EXPECT_EQ(ps.state, 4);
  EXPECT_EQ(ps.active_mtu, 3);
  EXPECT_EQ(ps.ndev_ifindex, 7u);
  EXPECT_STREQ(ps.ndev_name, "eth7");
  EXPECT_EQ(ps.gid_tbl_len, kGidTableLen);
  const Gid want[] = {
      parse_gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0xfc, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01}),
      parse_gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2}),
      parse_gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3}),
      parse_gid({0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}),
  };
  ASSERT_EQ(ps.gid_count, 8);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(gid_at(ps, i), want[i / 2]) << "GID " << i;
    EXPECT_EQ(ps.gid_type[i], i % 2 ? kGidTypeRoceV2 : kGidTypeRoceV1) << "GID " << i;
  }
  for (uint32_t i = 8; i < kGidTableLen; ++i) EXPECT_EQ(gid_at(ps, i), Gid{}) << "GID " << i;
}

TEST(RocePort, TableStopsWhenFullAndDownFollowsTheInterface) {
  Netdev nd = sample_netdev();
  nd.up = false;
  nd.ipv4.clear();
  for (uint8_t i = 0; i < 20; ++i) nd.ipv4.push_back({10, 0, 0, i});
  PortState ps;
  init_roce_port(&ps, 0, 1, nd);
  EXPECT_EQ(ps.gid_count, kGidTableLen);
  EXPECT_EQ(gid_at(ps, kGidTableLen - 1),
            parse_gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, kGidTableLen / 2 - 2}));
  EXPECT_EQ(ps.state, 1);  // DOWN
}

TEST(Netdev, LoopbackAsGetifaddrsSeesIt) {
  Netdev nd;
  std::string err;
  ASSERT_TRUE(read_netdev("lo", &nd, &err)) << err;
  testhost::HostNetdev host;
  ASSERT_TRUE(testhost::host_netdev("lo", &host));
  EXPECT_EQ(nd.name, "lo");
  EXPECT_EQ(nd.ifindex, host.ifindex);
  EXPECT_EQ(nd.mac, host.mac);
  EXPECT_EQ(nd.mtu, testhost::host_mtu("lo"));
  std::set<Gid> v4;
  for (const auto& a : nd.ipv4) v4.insert(testhost::v4_mapped(a.data()));
  EXPECT_EQ(v4, host.ipv4);
}

TEST(Netdev, DefaultChoiceAndAddressesMatchGetifaddrs) {
  Netdev nd;
  std::string err;
  ASSERT_TRUE(read_netdev("", &nd, &err)) << err;
  testhost::HostNetdev host;
  ASSERT_TRUE(testhost::host_netdev("", &host));
  EXPECT_EQ(nd.name, host.name);
  EXPECT_EQ(nd.ifindex, host.ifindex);
  EXPECT_EQ(nd.mac, host.mac);
  EXPECT_EQ(nd.up, (host.flags & IFF_UP) && (host.flags & IFF_RUNNING));
  std::set<Gid> v4, v6;
  for (const auto& a : nd.ipv4) v4.insert(testhost::v4_mapped(a.data()));
  for (const auto& a : nd.ipv6) v6.insert(a);
  v6.erase(testhost::link_local_from_mac(nd.mac));
  EXPECT_EQ(v4, host.ipv4);
  EXPECT_EQ(v6, host.ipv6);
}

TEST(Netdev, UnknownInterfaceIsAnError) {
  Netdev nd;
  std::string err;
  EXPECT_FALSE(read_netdev("emu-no-such-if", &nd, &err));
  EXPECT_NE(err.find("emu-no-such-if"), std::string::npos) << err;
}

// path_reaches on a hand-made header: device 0 with an InfiniBand port 1 and RoCE ports 2 and 3
// bound to different interfaces.
class PathReaches : public ::testing::Test {
 protected:
  void SetUp() override {
    h->num_devices = 1;
    h->devices[0].num_ports = 3;
    init_ib_port(&h->devices[0].ports[0], 0x100, 1, 1);
    init_roce_port(&h->devices[0].ports[1], 0x100, 2, sample_netdev());
    Netdev other = sample_netdev();
    other.mac = {0x02, 0, 0, 0, 0, 0x99};
    other.ipv4 = {{198, 51, 100, 9}};
    other.ipv6.clear();
    init_roce_port(&h->devices[0].ports[2], 0x100, 3, other);
  }
  QpSlot& qp_on(QpSlot& q, uint8_t port) {
    q.dev = 0;
    q.port = port;
    return q;
  }
  void address_gid(QpSlot& q, const PortState& dst, uint32_t index, uint8_t sgid_index) {
    q.is_global = 1;
    q.sgid_index = sgid_index;
    std::memcpy(q.dgid, dst.gid[index], 16);
  }
  const PortState& port(int p) { return h->devices[0].ports[p - 1]; }

  std::unique_ptr<Header> h = std::make_unique<Header>();
  QpSlot a{}, b{};
};

TEST_F(PathReaches, InfiniBandRoutesByLid) {
  qp_on(a, 1);
  qp_on(b, 1);
  a.dlid = port(1).lid;
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
  a.dlid = port(1).lid + 1;
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
}

TEST_F(PathReaches, InfiniBandGrhMustNameAGidOfTheDestination) {
  qp_on(a, 1);
  qp_on(b, 1);
  a.dlid = port(1).lid;
  address_gid(a, port(1), 0, 0);
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
  a.dgid[15] ^= 1;
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
}

TEST_F(PathReaches, RoceRoutesByDestinationGidOnly) {
  qp_on(a, 2);
  qp_on(b, 2);
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b)) << "no GRH";
  for (uint32_t i = 0; i < port(2).gid_count; ++i) {
    address_gid(a, port(2), i, static_cast<uint8_t>(i));
    EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b)) << "GID " << i;
  }
  a.dlid = 1234;  // ignored on Ethernet
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
  address_gid(a, port(2), 2, 0);
  a.dgid[15] ^= 1;
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b)) << "a GID nobody has";
}

TEST_F(PathReaches, RoceGidTypeOfTheSourceMustMatch) {
  qp_on(a, 2);
  qp_on(b, 3);
  address_gid(a, port(3), 3, 1);  // v2 to a v2 entry
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
  // Port 3 holds its IPv4 GID as v1 and v2 alike; with a v1-only table the v2 packet is lost.
  h->devices[0].ports[2].gid_type[3] = kGidTypeRoceV1;
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
  a.sgid_index = 0;  // a v1 source
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
  a.sgid_index = static_cast<uint8_t>(port(2).gid_count);  // an empty source entry
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
}

TEST_F(PathReaches, ARoceGidOfAnotherInterfaceDoesNotReach) {
  qp_on(a, 2);
  qp_on(b, 3);
  address_gid(a, port(2), 2, 2);  // port 2's IPv4 GID, but the responder is on port 3
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
  address_gid(a, port(3), 2, 2);
  EXPECT_TRUE(engine_detail::path_reaches(h.get(), a, b));
}

TEST_F(PathReaches, InfiniBandAndEthernetNeverMeet) {
  qp_on(a, 1);
  qp_on(b, 2);
  a.dlid = port(2).lid;  // 0, as the RoCE port reports
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
  qp_on(a, 2);
  qp_on(b, 1);
  address_gid(a, port(1), 0, 0);
  EXPECT_FALSE(engine_detail::path_reaches(h.get(), a, b));
}
