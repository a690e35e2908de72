// Connecting RC QPs with a global route header in the address vector (destination GID, source
// GID index), on any port: what RoCE requires and InfiniBand allows.
#pragma once
#include <cstring>

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

inline int to_init_on(ibv_qp* qp, uint8_t port, int access = kAllAccess) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  a.qp_access_flags = access;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// INIT -> RTR with `path` as the address vector (ah_attr.port_num 0 = the QP's port if av_port
// is 0).
inline int to_rtr_grh(ibv_qp* qp, const GrhPath& path, uint32_t dest_qpn, uint8_t av_port) {
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = path.dlid;
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

inline ibv_gid gid_of(ibv_context* ctx, uint8_t port, int index) {
  ibv_gid g;
  std::memset(&g, 0, sizeof g);
  EXPECT_EQ(ibv_query_gid(ctx, port, index, &g), 0)
      << "ibv_query_gid " << int(port) << "/" << index;
  return g;
}

}  // namespace vt
