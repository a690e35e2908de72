// SPDX-License-Identifier: BSD-2-Clause
// Sweep cases that touch no device or only ask about one: strings, rates, fork support, the
// kernel-struct copies, context import, ECE and data placement order.
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <cstring>

#include "sweep_case.h"

// The kernel-struct copies of libibverbs (declared in its marshall.h, which Debian does not ship)
// and the fork range calls (driver.h).
extern "C" {
void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src);
void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src);
void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src);
// Exported since IBVERBS_1.1, declared in rdma-core's driver.h only.
int ibv_dontfork_range(void* base, size_t size);
int ibv_dofork_range(void* base, size_t size);
}

namespace sweep {
namespace {

void strings(Env&) {
  EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
  EXPECT_NE(ibv_node_type_str(static_cast<ibv_node_type>(1000)), nullptr);
  EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
  EXPECT_NE(ibv_port_state_str(static_cast<ibv_port_state>(1000)), nullptr);
  EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_COMM_EST), "communication established");
  EXPECT_NE(ibv_event_type_str(static_cast<ibv_event_type>(1000)), nullptr);
  EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
  EXPECT_NE(ibv_wc_status_str(static_cast<ibv_wc_status>(1000)), nullptr);
}

void rates(Env&) {
  EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);  // 4x EDR's data rate
  EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
  EXPECT_EQ(mbps_to_ibv_rate(12345), IBV_RATE_MAX);  // no such rate
  EXPECT_EQ(ibv_rate_to_mbps(static_cast<ibv_rate>(1000)), -1);
  EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
  EXPECT_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
  EXPECT_EQ(ibv_rate_to_mult(static_cast<ibv_rate>(1000)), -1);
}

void fork_support(Env& env) {
  EXPECT_EQ(ibv_fork_init(), 0);
  ibv_fork_status s = ibv_is_fork_initialized();
  EXPECT_TRUE(s == IBV_FORK_ENABLED || s == IBV_FORK_UNNEEDED) << s;
  EXPECT_EQ(ibv_dontfork_range(env.page, 4096), 0);
  EXPECT_EQ(ibv_dofork_range(env.page, 4096), 0);
}

void kern_copies(Env&) {
  ib_uverbs_ah_attr kah = {};
  kah.dlid = 7;
  kah.port_num = 1;
  ibv_ah_attr ah = {};
  ibv_copy_ah_attr_from_kern(&ah, &kah);
  EXPECT_EQ(ah.dlid, 7);
  EXPECT_EQ(ah.port_num, 1);
  ib_uverbs_qp_attr kqp = {};
  kqp.cur_qp_state = IBV_QPS_RTS;
  kqp.dest_qp_num = 99;
  ibv_qp_attr qa = {};
  ibv_copy_qp_attr_from_kern(&qa, &kqp);
  EXPECT_EQ(qa.cur_qp_state, IBV_QPS_RTS);
  EXPECT_EQ(qa.dest_qp_num, 99u);
  ibv_sa_path_rec pr = {};
  pr.dlid = htobe16(9);
  ib_user_path_rec kpr = {};
  ibv_copy_path_rec_to_kern(&kpr, &pr);
  ibv_sa_path_rec back = {};
  ibv_copy_path_rec_from_kern(&back, &kpr);
  EXPECT_EQ(back.dlid, htobe16(9));
}

void resolve_l2(Env& env) {
  ibv_port_attr pa = {};
  ASSERT_EQ(ibv_query_port(env.ctx, 1, &pa), 0);
  ibv_ah_attr aa = {};
  aa.port_num = 1;
  aa.is_global = 1;
  ASSERT_EQ(ibv_query_gid(env.ctx, 1, 0, &aa.grh.dgid), 0);
  uint8_t mac[6];
  uint16_t vid = 0;
  int r = ibv_resolve_eth_l2_from_gid(env.ctx, &aa, mac, &vid);
  if (pa.link_layer == IBV_LINK_LAYER_ETHERNET)
    EXPECT_EQ(r, 0);
  else
    EXPECT_NE(r, 0);  // an IB port has no Ethernet address to resolve
}

void import(Env& env) {
  int fd = dup(env.ctx->cmd_fd);
  ASSERT_GE(fd, 0);
  errno = 0;
  ibv_context* c = ibv_import_device(fd);
  if (!c) {
    EXPECT_EQ(errno, EOPNOTSUPP);
    close(fd);
    SWEEP_EXPECT_NULL(ibv_import_pd(env.ctx, env.pd->handle), EOPNOTSUPP);
    SWEEP_EXPECT_NULL(ibv_import_mr(env.pd, env.mr->handle), EOPNOTSUPP);
    SWEEP_EXPECT_NULL(ibv_import_dm(env.ctx, 1), EOPNOTSUPP);
    ibv_unimport_pd(env.pd);  // nothing imported: a no-op
    ibv_unimport_mr(env.mr);
    return;
  }
  ibv_pd* pd = ibv_import_pd(c, env.pd->handle);
  ASSERT_NE(pd, nullptr) << errno;
  EXPECT_EQ(pd->handle, env.pd->handle);
  ibv_mr* mr = ibv_import_mr(pd, env.mr->handle);
  ASSERT_NE(mr, nullptr) << errno;
  EXPECT_EQ(mr->lkey, env.mr->lkey);
  SWEEP_EXPECT_NULL(ibv_import_pd(c, env.pd->handle + 1000), ENOENT);
  SWEEP_EXPECT_NULL(ibv_import_mr(pd, env.mr->handle + 1000), ENOENT);
  SWEEP_EXPECT_NULL(ibv_import_dm(c, 12345), ENOENT);
  ibv_unimport_mr(mr);
  ibv_unimport_pd(pd);
  EXPECT_EQ(ibv_close_device(c), 0);
  // The originals are untouched by the importer's unimport and close.
  EXPECT_EQ(ibv_dereg_mr(env.mr), 0);
  env.mr = nullptr;
}

void import_dm(Env& env) {
  ibv_alloc_dm_attr a = {64, 0, 0};
  ibv_dm* dm = ibv_alloc_dm(env.ctx, &a);
  ASSERT_NE(dm, nullptr);
  int fd = dup(env.ctx->cmd_fd);
  ibv_context* c = ibv_import_device(fd);
  if (!c) {
    EXPECT_EQ(errno, EOPNOTSUPP);
    close(fd);
    SWEEP_EXPECT_NULL(ibv_import_dm(env.ctx, dm->handle), EOPNOTSUPP);
    ibv_unimport_dm(dm);  // nothing imported: a no-op
  } else {
    ibv_dm* imp = ibv_import_dm(c, dm->handle);
    ASSERT_NE(imp, nullptr) << errno;
    uint32_t word = 0x5a5a5a5a, back = 0;
    EXPECT_EQ(ibv_memcpy_to_dm(imp, 0, &word, 4), 0);
    EXPECT_EQ(ibv_memcpy_from_dm(&back, dm, 0, 4), 0);
    EXPECT_EQ(back, word);
    ibv_unimport_dm(imp);
    EXPECT_EQ(ibv_close_device(c), 0);
  }
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

void ece_and_order(Env& env) {
  ibv_qp* q = make_qp(env);
  ASSERT_NE(q, nullptr);
  ibv_ece ece = {};
  EXPECT_EQ(ibv_query_ece(q, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_set_ece(q, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_query_qp_data_in_order(q, IBV_WR_RDMA_WRITE, 0), 0);
  EXPECT_EQ(ibv_destroy_qp(q), 0);
}

}  // namespace

std::vector<Case> misc_cases() {
  return {
      {"ibv_node_type_str", strings, nullptr},
      {"ibv_port_state_str", strings, nullptr},
      {"ibv_event_type_str", strings, nullptr},
      {"ibv_wc_status_str", strings, nullptr},
      {"ibv_rate_to_mbps", rates, nullptr},
      {"mbps_to_ibv_rate", rates, nullptr},
      {"ibv_rate_to_mult", rates, nullptr},
      {"mult_to_ibv_rate", rates, nullptr},
      {"ibv_fork_init", fork_support, nullptr},
      {"ibv_is_fork_initialized", fork_support, nullptr},
      {"ibv_dontfork_range", fork_support, nullptr},
      {"ibv_dofork_range", fork_support, nullptr},
      {"ibv_copy_ah_attr_from_kern", kern_copies, nullptr},
      {"ibv_copy_qp_attr_from_kern", kern_copies, nullptr},
      {"ibv_copy_path_rec_from_kern", kern_copies, nullptr},
      {"ibv_copy_path_rec_to_kern", kern_copies, nullptr},
      {"ibv_resolve_eth_l2_from_gid", resolve_l2, nullptr},
      {"ibv_import_device", import, nullptr},
      {"ibv_import_pd", import, nullptr},
      {"ibv_import_mr", import, nullptr},
      {"ibv_unimport_pd", import, nullptr},
      {"ibv_unimport_mr", import, nullptr},
      {"ibv_import_dm", import_dm, nullptr},
      {"ibv_unimport_dm", import_dm, nullptr},
      {"ibv_query_ece", ece_and_order, nullptr},
      {"ibv_set_ece", ece_and_order, nullptr},
      {"ibv_query_qp_data_in_order", ece_and_order, nullptr},
      {"ibv_register_driver", nullptr,
       "only a hidden compat version (IBVERBS_1.1) that warns an old-style provider away; no "
       "program can link against it"},
  };
}

}  // namespace sweep
