// SPDX-License-Identifier: BSD-2-Clause
// RoCE ports: emu0 with an InfiniBand port 1, a RoCE port 2 on the default interface and a RoCE
// port 3 on lo (this binary sets EMU_PORTS, EMU_LINK_LAYER and EMU_ROCE_NETDEV before the
// provider reads them). The GID tables are checked against the interfaces' addresses as
// getifaddrs reports them; QPs on RoCE ports connect by GID.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "grh_connect.h"
#include "host_netdev.h"

namespace {

struct RoceEnv {
  RoceEnv() {
    setenv("EMU_PORTS", "3", 1);
    setenv("EMU_LINK_LAYER", "ib,eth,eth", 1);
    setenv("EMU_ROCE_NETDEV", "auto,auto,lo", 1);
  }
} g_roce_env;

}  // namespace

namespace vt {
namespace {

using testhost::Gid;

constexpr uint8_t kRocePort = 2;
constexpr uint8_t kLoPort = 3;

Gid to_array(const ibv_gid& g) {
  Gid a;
  std::memcpy(a.data(), g.raw, 16);
  return a;
}

ibv_gid to_gid(const Gid& a) {
  ibv_gid g;
  std::memcpy(g.raw, a.data(), 16);
  return g;
}

// The GID table a RoCE port bound to `nd` must hold, as sets per section (the order of addresses
// within a family is the kernel's, which getifaddrs need not share).
void expect_gid_table(ibv_context* ctx, uint8_t port, const testhost::HostNetdev& nd) {
  SCOPED_TRACE("port " + std::to_string(port) + " on " + nd.name);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, port, &pa), 0);
  ASSERT_EQ(pa.gid_tbl_len, 16);
  size_t want = 2 * (1 + nd.ipv4.size() + nd.ipv6.size());
  // More addresses than 16 entries hold: the table is the head of the same order, full.
  bool truncated = want > 16;
  size_t filled = truncated ? 16 : want;
  std::vector<Gid> got;
  for (int i = 0; i < pa.gid_tbl_len; ++i) got.push_back(to_array(gid_of(ctx, port, i)));
  EXPECT_EQ(got[0], testhost::link_local_from_mac(nd.mac));
  EXPECT_EQ(got[1], got[0]);
  size_t i = 2;
  std::set<Gid> v4, v6;
  for (; i < std::min(filled, 2 + 2 * nd.ipv4.size()); i += 2) {
    EXPECT_EQ(got[i], got[i + 1]) << "GID " << i << " and " << i + 1 << " (v1, v2)";
    v4.insert(got[i]);
  }
  for (; i < filled; i += 2) {
    EXPECT_EQ(got[i], got[i + 1]) << "GID " << i << " and " << i + 1 << " (v1, v2)";
    v6.insert(got[i]);
  }
  if (truncated) {
    for (const Gid& g : v4) EXPECT_TRUE(nd.ipv4.count(g)) << "a GID of no IPv4 address";
    for (const Gid& g : v6) EXPECT_TRUE(nd.ipv6.count(g)) << "a GID of no IPv6 address";
  } else {
    EXPECT_EQ(v4, nd.ipv4);
    EXPECT_EQ(v6, nd.ipv6);
  }
  for (; i < 16; ++i) EXPECT_EQ(got[i], Gid{}) << "GID " << i << " should be empty";

  for (uint32_t k = 0; k < 16; ++k) {
    ibv_gid_entry e;
    int type = -1;
    ASSERT_EQ(ibv_query_gid_type(ctx, port, k, &type), 0);
    int rc = ibv_query_gid_ex(ctx, port, k, &e, 0);
    if (k >= want) {
      EXPECT_EQ(rc, ENODATA) << "GID " << k;
      EXPECT_EQ(type, 0) << "GID " << k;
      continue;
    }
    ASSERT_EQ(rc, 0) << "GID " << k;
    EXPECT_EQ(to_array(e.gid), got[k]);
    EXPECT_EQ(e.gid_index, k);
    EXPECT_EQ(e.port_num, port);
    EXPECT_EQ(e.ndev_ifindex, nd.ifindex);
    EXPECT_EQ(e.gid_type, k % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1) << "GID " << k;
    EXPECT_EQ(type, k % 2 ? 1 : 0) << "GID " << k;  // ibv_query_gid_type: 1 = RoCE v2
  }
  ibv_gid_entry e;
  EXPECT_EQ(ibv_query_gid_ex(ctx, port, 16, &e, 0), EINVAL);
  ibv_gid g;
  EXPECT_EQ(ibv_query_gid(ctx, port, 16, &g), -1);
}

class Roce : public GrhPairTest {
 protected:
  void SetUpObjects() override {
    ASSERT_TRUE(testhost::host_netdev("", &dflt));
    ASSERT_TRUE(testhost::host_netdev("lo", &lo));
  }

  // The RoCE v2 GID of an interface's first IPv4 address: index 3, as perftest picks it.
  static constexpr int kIpv4V2 = 3;

  static GrhPath path(uint8_t from_port, const ibv_gid& dgid, uint8_t sgid_index) {
    GrhPath p;
    p.port = from_port;
    p.dgid = dgid;
    p.sgid_index = sgid_index;
    return p;
  }

  // A SEND and an RDMA WRITE from a to b; both must arrive.
  void send_and_write() {
    Buf src = make_buf(8192), dst = make_buf(8192);
    for (size_t i = 0; i < 8192; ++i) src.p[i] = static_cast<uint8_t>(i * 7 + 1);
    EXPECT_TRUE(send_through(a, cqa, src.sge(0, 4096), b, cqb, dst.sge(0, 4096), 10));
    ibv_sge ws = src.sge(4096, 4096);
    ibv_send_wr ww = rdma_wr(12, IBV_WR_RDMA_WRITE, &ws, 1, dst.addr() + 4096, dst.rkey());
    ASSERT_EQ(post_one(a, &ww), 0);
    EXPECT_TRUE(wait_wc(cqa, IBV_WC_SUCCESS, 12));
    EXPECT_EQ(std::memcmp(src.p, dst.p, 8192), 0);
  }

  testhost::HostNetdev dflt, lo;
};

TEST_F(Roce, PortAttributesOfAnEthernetPort) {
  for (uint8_t port : {kRocePort, kLoPort}) {
    const testhost::HostNetdev& nd = port == kRocePort ? dflt : lo;
    SCOPED_TRACE(nd.name);
    ibv_port_attr p;
    ASSERT_EQ(ibv_query_port(ctx, port, &p), 0);
    EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(p.lid, 0);
    EXPECT_EQ(p.sm_lid, 0);
    EXPECT_EQ(p.lmc, 0);
    EXPECT_FALSE(p.port_cap_flags & IBV_PORT_SM);
    EXPECT_TRUE(p.port_cap_flags & IBV_PORT_CM_SUP);
    EXPECT_TRUE(p.port_cap_flags & IBV_PORT_IP_BASED_GIDS);
    EXPECT_EQ(p.gid_tbl_len, 16);
    bool up = (nd.flags & IFF_UP) && (nd.flags & IFF_RUNNING);
    EXPECT_EQ(p.state, up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN);
    // The largest IB MTU that fits the interface's MTU with the RoCE v2 headers (96 bytes).
    unsigned mtu = testhost::host_mtu(nd.name);
    ASSERT_GT(mtu, 0u);
    ibv_mtu want = IBV_MTU_256;
    for (int m = IBV_MTU_4096; m > IBV_MTU_256; --m)
      if (mtu >= (128u << m) + 96) {
        want = static_cast<ibv_mtu>(m);
        break;
      }
    EXPECT_EQ(p.active_mtu, want) << "interface MTU " << mtu;
    EXPECT_EQ(p.max_mtu, IBV_MTU_4096);
  }
}

TEST_F(Roce, InfiniBandPortBesideIsUnchanged) {
  ibv_port_attr p;
  ASSERT_EQ(ibv_query_port(ctx, 1, &p), 0);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(p.lid, 1);
  EXPECT_EQ(p.sm_lid, 1);
  EXPECT_EQ(p.gid_tbl_len, 4);
  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_IB);
  EXPECT_EQ(be64toh(e.gid.global.subnet_prefix), 0xfe80000000000000ull);
}

TEST_F(Roce, GidTableHoldsTheDefaultInterfacesAddresses) { expect_gid_table(ctx, kRocePort, dflt); }

TEST_F(Roce, GidTableOfAPortOnLoopback) {
  expect_gid_table(ctx, kLoPort, lo);
  // lo has no MAC: the default GID is fe80::200:ff:fe00:0, and 127.0.0.1 follows it.
  ibv_gid g = gid_of(ctx, kLoPort, 0);
  EXPECT_EQ(to_array(g), (Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0xff, 0xfe, 0, 0, 0}));
  EXPECT_TRUE(lo.ipv4.count(testhost::v4_mapped("\x7f\x00\x00\x01")));
}

TEST_F(Roce, GidTableQueryListsEveryPort) {
  std::vector<ibv_gid_entry> all(64);
  ssize_t n = ibv_query_gid_table(ctx, all.data(), all.size(), 0);
  ASSERT_GT(n, 0);
  size_t per_port[4] = {};
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = all[i];
    ASSERT_GE(e.port_num, 1u);
    ASSERT_LE(e.port_num, 3u);
    ++per_port[e.port_num];
    ibv_gid_entry one;
    ASSERT_EQ(ibv_query_gid_ex(ctx, e.port_num, e.gid_index, &one, 0), 0);
    EXPECT_EQ(std::memcmp(&one, &e, sizeof e), 0)
        << "port " << e.port_num << " GID " << e.gid_index;
  }
  EXPECT_EQ(per_port[1], 1u);
  EXPECT_EQ(per_port[2], std::min<size_t>(16, 2 * (1 + dflt.ipv4.size() + dflt.ipv6.size())));
  EXPECT_EQ(per_port[3], std::min<size_t>(16, 2 * (1 + lo.ipv4.size() + lo.ipv6.size())));
  EXPECT_EQ(ibv_query_gid_table(ctx, all.data(), static_cast<size_t>(n - 1), 0), -EINVAL);
}

TEST_F(Roce, AddressVectorWithoutGrhIsInvalid) {
  ibv_cq* cq = make_cq();
  ibv_qp* q = make_qp(cq, cq);
  ASSERT_TRUE(q);
  ASSERT_EQ(to_init_on(q, kRocePort), 0);
  GrhPath p = path(kRocePort, gid_of(ctx, kRocePort, 1), 1);
  p.is_global = false;
  p.dlid = 1;
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, kRocePort), EINVAL);
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, 0), EINVAL) << "AV port 0: the QP's port (RoCE)";
  p.is_global = true;
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, kRocePort, &pa), 0);
  ibv_gid_entry e;
  uint8_t empty = 0;
  while (empty < 16 && ibv_query_gid_ex(ctx, kRocePort, empty, &e, 0) == 0) ++empty;
  if (empty < 16) {
    p.sgid_index = empty;
    EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, kRocePort), EINVAL) << "source GID " << int(empty);
  }
  p.sgid_index = 16;
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, kRocePort), EINVAL);
  EXPECT_EQ(qp_state(q), IBV_QPS_INIT);
  p.sgid_index = 1;
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, kRocePort), 0);
  EXPECT_EQ(qp_state(q), IBV_QPS_RTR);

  // The AV's port decides: a QP initialised on the IB port, its AV naming the RoCE port.
  ibv_qp* q2 = make_qp(cq, cq);
  ASSERT_TRUE(q2);
  ASSERT_EQ(to_init_on(q2, 1), 0);
  p.is_global = false;
  EXPECT_EQ(to_rtr_grh(q2, p, q->qp_num, kRocePort), EINVAL);
  EXPECT_EQ(to_rtr_grh(q2, p, q->qp_num, 1), 0);
}

TEST_F(Roce, RcSendAndWriteAddressedByGid) {
  // By the link-local RoCE v2 GID.
  ibv_gid g1 = gid_of(ctx, kRocePort, 1);
  connect(path(kRocePort, g1, 1), path(kRocePort, g1, 1));
  send_and_write();
  ibv_qp_attr at;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(a, &at, IBV_QP_AV, &ia), 0);
  EXPECT_EQ(at.ah_attr.is_global, 1);
  EXPECT_EQ(at.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(std::memcmp(at.ah_attr.grh.dgid.raw, g1.raw, 16), 0);
  EXPECT_EQ(at.ah_attr.port_num, kRocePort);
}

TEST_F(Roce, RcOverIpv4GidsBothVersions) {
  for (uint8_t sgid : {2, 3}) {  // ::ffff:a.b.c.d as RoCE v1, then v2
    SCOPED_TRACE("source GID " + std::to_string(sgid));
    ibv_gid g = gid_of(ctx, kRocePort, sgid);
    ASSERT_EQ(g.raw[10], 0xff) << "no IPv4 GID at " << int(sgid);
    connect(path(kRocePort, g, sgid), path(kRocePort, g, sgid));
    send_and_write();
  }
}

TEST_F(Roce, PortsOnTwoInterfacesConnectByEachOthersGid) {
  connect(path(kRocePort, gid_of(ctx, kLoPort, kIpv4V2), kIpv4V2),
          path(kLoPort, gid_of(ctx, kRocePort, kIpv4V2), kIpv4V2));
  send_and_write();
}

TEST_F(Roce, AGidNoPortHoldsGoesNowhere) {
  ibv_gid nowhere = to_gid(testhost::v4_mapped("\xcb\x00\x71\x63"));  // 203.0.113.99
  ibv_gid g = gid_of(ctx, kRocePort, kIpv4V2);
  connect(path(kRocePort, nowhere, kIpv4V2), path(kRocePort, g, kIpv4V2), 1, 1);
  expect_unreachable();
}

// b is on port 2, but a addresses lo's GID (port 3's). Where the default interface is lo itself,
// ports 2 and 3 hold the same GIDs, so the GID reaches port 2 too and the QP number decides (the
// documented consequence of binding two ports to one interface).
TEST_F(Roce, TheGidOfAnotherInterfaceDoesNotReachThisPort) {
  connect(path(kRocePort, gid_of(ctx, kLoPort, kIpv4V2), kIpv4V2),
          path(kRocePort, gid_of(ctx, kRocePort, kIpv4V2), kIpv4V2), 1, 1);
  if (dflt.name == "lo")
    send_and_write();
  else
    expect_unreachable();
}

TEST_F(Roce, InfiniBandPortDoesNotReachARocePort) {
  // a on the IB port addresses LID 0 (what the RoCE port reports), b on the RoCE port.
  GrhPath to_b;
  to_b.port = 1;
  to_b.is_global = false;
  to_b.dlid = 0;
  connect(to_b, path(kRocePort, gid_of(ctx, 1, 0), kIpv4V2), 1, 1);
  expect_unreachable();
}

// After traffic, b is reset and connected again on the InfiniBand port: a (on a RoCE port, its
// cached responder b still connected back to it) must find no path there. ibv_modify_qp tells the
// device that paths changed (device_routes_changed).
TEST_F(Roce, AResponderReconnectedOnAnotherPortIsOutOfReach) {
  ibv_gid g = gid_of(ctx, kRocePort, kIpv4V2);
  connect(path(kRocePort, g, kIpv4V2), path(kRocePort, g, kIpv4V2), 1, 1);
  send_and_write();

  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(b, &reset, IBV_QP_STATE), 0);
  GrhPath ib;
  ib.port = 1;
  ib.is_global = false;
  ib.dlid = 0;
  ASSERT_EQ(connect_grh(b, ib, a->qp_num), 0);
  expect_unreachable();
}

}  // namespace
}  // namespace vt
