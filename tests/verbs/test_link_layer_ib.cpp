// SPDX-License-Identifier: BSD-2-Clause
// The default link layer: InfiniBand ports as they were before RoCE ports existed (LID, an SM,
// one GID of subnet prefix + port GUID in a table of 4), and a GRH on InfiniBand, which is
// optional but must name a GID of the destination port.
#include <cerrno>
#include <cstring>

#include "grh_connect.h"

namespace vt {
namespace {

// QPs on port 1 (GrhPairTest::connect).
class InfiniBandPort : public GrhPairTest {};

TEST_F(InfiniBandPort, AttributesAsBefore) {
  ibv_port_attr p;
  ASSERT_EQ(ibv_query_port(ctx, 1, &p), 0);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.lid, 1);  // emu0 port 1
  EXPECT_EQ(p.sm_lid, 1);
  EXPECT_EQ(p.gid_tbl_len, 4);
  EXPECT_EQ(p.active_mtu, IBV_MTU_4096);
  EXPECT_TRUE(p.port_cap_flags & IBV_PORT_CM_SUP);
  EXPECT_FALSE(p.port_cap_flags & IBV_PORT_IP_BASED_GIDS);
}

TEST_F(InfiniBandPort, OneGidOfSubnetPrefixAndPortGuid) {
  ibv_device_attr d;
  ASSERT_EQ(ibv_query_device(ctx, &d), 0);
  ibv_gid g = gid_of(ctx, 1, 0);
  EXPECT_EQ(be64toh(g.global.subnet_prefix), 0xfe80000000000000ull);
  EXPECT_EQ(be64toh(g.global.interface_id), be64toh(d.node_guid) | 1);  // the port GUID
  for (int i = 1; i < 4; ++i) {
    ibv_gid z = gid_of(ctx, 1, i);
    EXPECT_EQ(z.global.subnet_prefix | z.global.interface_id, 0u) << "GID " << i << " not empty";
  }
  ibv_gid past;
  EXPECT_EQ(ibv_query_gid(ctx, 1, 4, &past), -1);

  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(std::memcmp(e.gid.raw, g.raw, 16), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_IB);
  EXPECT_EQ(e.ndev_ifindex, 0u);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &e, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 4, &e, 0), EINVAL);
  int type = -1;
  ASSERT_EQ(ibv_query_gid_type(ctx, 1, 0, &type), 0);
  EXPECT_EQ(type, 0);

  ibv_gid_entry all[8];
  EXPECT_EQ(ibv_query_gid_table(ctx, all, 8, 0), 1);
  EXPECT_EQ(all[0].port_num, 1u);
  EXPECT_EQ(all[0].gid_index, 0u);
}

TEST_F(InfiniBandPort, GrhNamingTheDestinationsGidConnects) {
  GrhPath p;
  p.dlid = lid;
  p.dgid = gid_of(ctx, 1, 0);
  connect(p, p);
  Buf sa = make_buf(4096, kAllAccess, 0x5a), rb = make_buf(4096);
  EXPECT_TRUE(send_through(a, cqa, sa.sge(0, 4096), b, cqb, rb.sge(0, 4096), 1));
  EXPECT_EQ(std::memcmp(sa.p, rb.p, 4096), 0);
}

TEST_F(InfiniBandPort, GrhNamingAnotherGidGoesNowhere) {
  GrhPath p;
  p.dlid = lid;
  p.dgid = gid_of(ctx, 1, 0);
  GrhPath wrong = p;
  wrong.dgid.raw[15] ^= 0x40;  // right LID, but no such GID on the port: dropped
  ASSERT_NO_FATAL_FAILURE(connect(wrong, p, /*timeout=*/1, /*retry_cnt=*/1));
  expect_unreachable();
}

TEST_F(InfiniBandPort, SourceGidIndexBeyondTheTableIsInvalid) {
  ibv_cq* cq = make_cq();
  ibv_qp* q = make_qp(cq, cq);
  ASSERT_TRUE(q);
  ASSERT_EQ(to_init_on(q, 1), 0);
  GrhPath p;
  p.dlid = lid;
  p.dgid = gid_of(ctx, 1, 0);
  p.sgid_index = 4;
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, 1), EINVAL);
  EXPECT_EQ(qp_state(q), IBV_QPS_INIT);
  p.is_global = false;  // no GRH at all: fine on InfiniBand
  EXPECT_EQ(to_rtr_grh(q, p, q->qp_num, 1), 0);
}

}  // namespace
}  // namespace vt
