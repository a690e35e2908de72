// SPDX-License-Identifier: BSD-2-Clause
// Connecting RC QPs with a global route header in the address vector (destination GID, source
// GID index), on any port: what RoCE requires and InfiniBand allows.
#pragma once
#include <cstring>
#include <tuple>

#include "verbs_fixture.h"

// libibverbs exports this (IBVERBS_PRIVATE_34) without declaring it in a public header;
// ibv_devinfo uses it. 0 = InfiniBand or RoCE v1, 1 = RoCE v2.
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  int* type);

namespace vt {

struct GrhPath {
  uint8_t port = 1;   // the local port (INIT and the AV)
  uint16_t dlid = 0;  // ignored on RoCE
  bool is_global = true;
  ibv_gid dgid{};
  uint8_t sgid_index = 0;
};

inline int to_init_on(ibv_qp* qp, uint8_t port) { return to_init(qp, kAllAccess, port); }

// INIT -> RTR with `path` as the address vector (ah_attr.port_num 0 = the QP's port if av_port
// is 0).
inline int to_rtr_grh(ibv_qp* qp, const GrhPath& path, uint32_t dest_qpn, uint8_t av_port) {
  ibv_qp_attr a = rtr_attr(path.dlid, dest_qpn, 0, 1);
  a.ah_attr.port_num = av_port;
  a.ah_attr.is_global = path.is_global;
  a.ah_attr.grh.dgid = path.dgid;
  a.ah_attr.grh.sgid_index = path.sgid_index;
  a.ah_attr.grh.hop_limit = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// RESET -> RTS along `path`. retry_cnt/timeout small: a path that leads nowhere fails quickly.
inline int connect_grh(ibv_qp* qp, const GrhPath& path, uint32_t dest_qpn, uint8_t timeout = 14,
                       uint8_t retry_cnt = 7) {
  if (int rc = to_init_on(qp, path.port)) return rc;
  if (int rc = to_rtr_grh(qp, path, dest_qpn, path.port)) return rc;
  return to_rts(qp, 0, timeout, retry_cnt, 7);
}

// A fixture with two RC QPs, a and b (each with its own CQ), connected along GRH paths.
class GrhPairTest : public VerbsTest {
 protected:
  // a connects along `to_b`, b along `to_a` (their ports and GIDs; destination QPNs filled in).
  void connect(GrhPath to_b, GrhPath to_a, uint8_t timeout = 14, uint8_t retry_cnt = 7) {
    Pair p = make_qps(IBV_QPT_RC);
    ASSERT_TRUE(p.a && p.b);
    std::tie(a, b, cqa, cqb) = std::tie(p.a, p.b, p.cqa, p.cqb);
    ASSERT_EQ(connect_grh(a, to_b, b->qp_num, timeout, retry_cnt), 0);
    ASSERT_EQ(connect_grh(b, to_a, a->qp_num), 0);
  }
  // a's first message goes nowhere: RETRY_EXC_ERR, and b sees nothing.
  void expect_unreachable() {
    Buf sa = make_buf(64), rb = make_buf(64);
    ibv_sge r = rb.sge(0, 64);
    ASSERT_EQ(post_recv(b, 20, &r, 1), 0);
    ibv_sge s = sa.sge(0, 64);
    ibv_send_wr w = send_wr(21, IBV_WR_SEND, &s, 1);
    ASSERT_EQ(post_one(a, &w), 0);
    EXPECT_TRUE(wait_wc(cqa, IBV_WC_RETRY_EXC_ERR, 21));
    EXPECT_TRUE(drain(cqb).empty());
  }
  ibv_cq *cqa = nullptr, *cqb = nullptr;
  ibv_qp *a = nullptr, *b = nullptr;
};

inline ibv_gid gid_of(ibv_context* ctx, uint8_t port, int index) {
  ibv_gid g;
  std::memset(&g, 0, sizeof g);
  EXPECT_EQ(ibv_query_gid(ctx, port, index, &g), 0)
      << "ibv_query_gid " << int(port) << "/" << index;
  return g;
}

}  // namespace vt
