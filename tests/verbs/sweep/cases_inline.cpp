// SPDX-License-Identifier: BSD-2-Clause
// Sweep cases for the verbs_context operations an application reaches through inline functions of
// verbs.h (no exported symbol to enumerate, so this list is typed): each works on emu0 or fails
// with the errno the inline wrapper or the man page gives (EOPNOTSUPP for what emu0 does not do).
#include <fcntl.h>

#include "sweep_case.h"
#include "verbs_fixture.h"

namespace sweep {
namespace {

constexpr uint32_t kRssLogTableMaxPlusOne = 7;  // emu0's tables hold at most 64 WQs

void query_device_ex(Env& env) {
  ibv_device_attr_ex a = {};
  EXPECT_EQ(ibv_query_device_ex(env.ctx, nullptr, &a), 0);
  EXPECT_EQ(a.orig_attr.vendor_id, 0xffffffu);
  ibv_query_device_ex_input in = {};
  in.comp_mask = 1u << 31;  // no input comp_mask bit is defined
  EXPECT_EQ(ibv_query_device_ex(env.ctx, &in, &a), EINVAL);
  ibv_values_ex v = {};
  v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  int r = ibv_query_rt_values_ex(env.ctx, &v);
  EXPECT_TRUE(r == 0 || r == EOPNOTSUPP) << r;
}

void cq_ex(Env& env) {
  ibv_cq_init_attr_ex ca = {};
  ca.cqe = 8;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ca.comp_mask = 1u << 30;  // unknown
  SWEEP_EXPECT_NULL(ibv_create_cq_ex(env.ctx, &ca), EINVAL);
  ca.comp_mask = 0;
  ca.wc_flags |= 1ull << 40;  // an unknown completion field
  SWEEP_EXPECT_NULL(ibv_create_cq_ex(env.ctx, &ca), EOPNOTSUPP);
  ca.wc_flags &= ~(1ull << 40);
  ibv_cq_ex* cq = ibv_create_cq_ex(env.ctx, &ca);
  ASSERT_NE(cq, nullptr) << errno;
  ibv_poll_cq_attr pa = {};
  EXPECT_EQ(ibv_start_poll(cq, &pa), ENOENT);  // empty: no end_poll is due
  ibv_cq* plain = ibv_cq_ex_to_cq(cq);
  // One RDMA WRITE into its own page from a QP completing into the extended CQ, read back through
  // the ibv_start_poll / ibv_wc_read_* / ibv_end_poll walk.
  ibv_qp_init_attr qa = {};
  qa.send_cq = qa.recv_cq = plain;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_qp* a = ibv_create_qp(env.pd, &qa);
  ibv_qp* b = make_qp(env);
  ASSERT_TRUE(a && b) << errno;
  ASSERT_EQ(connect_to(env, a, b->qp_num, IBV_QPS_RTS), 0);
  ASSERT_EQ(connect_to(env, b, a->qp_num, IBV_QPS_RTS), 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(env.page), 8, env.mr->lkey};
  ibv_send_wr w = vt::rdma_wr(77, IBV_WR_RDMA_WRITE, &sge, 1,
                              reinterpret_cast<uintptr_t>(env.page) + 64, env.mr->rkey);
  ASSERT_EQ(vt::post_one(a, &w), 0);
  int r = ENOENT;
  for (int tries = 0; r == ENOENT && tries < 1000000; ++tries) r = ibv_start_poll(cq, &pa);
  ASSERT_EQ(r, 0);
  EXPECT_EQ(cq->wr_id, 77u);
  EXPECT_EQ(cq->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cq), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(ibv_wc_read_qp_num(cq), a->qp_num);
  EXPECT_EQ(ibv_next_poll(cq), ENOENT);
  ibv_end_poll(cq);
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(plain, 1, &wc), 0);
  ibv_modify_cq_attr m = {};
  m.attr_mask = IBV_CQ_ATTR_MODERATE;
  m.moderate = {1, 1};
  r = ibv_modify_cq(plain, &m);
  EXPECT_TRUE(r == 0 || r == EOPNOTSUPP) << r;
  m.attr_mask = 1u << 20;  // unknown
  r = ibv_modify_cq(plain, &m);
  EXPECT_TRUE(r == EINVAL || r == EOPNOTSUPP) << r;
  EXPECT_EQ(ibv_destroy_cq(plain), 0);
}

void qp_ex(Env& env) {
  ibv_qp_init_attr_ex ia = {};
  ia.qp_type = IBV_QPT_RC;
  ia.send_cq = ia.recv_cq = env.cq;
  ia.cap = {4, 4, 1, 1, 0};
  ia.pd = env.pd;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
  ibv_qp* q = ibv_create_qp_ex(env.ctx, &ia);
  ASSERT_NE(q, nullptr) << errno;
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(q);
  ASSERT_NE(qx, nullptr);
  ibv_wr_start(qx);
  qx->wr_id = 1;
  ibv_wr_rdma_write(qx, env.mr->rkey, reinterpret_cast<uintptr_t>(env.page));
  ibv_wr_set_sge(qx, env.mr->lkey, reinterpret_cast<uintptr_t>(env.page), 8);
  ibv_wr_abort(qx);  // nothing reaches the device
  ibv_wr_start(qx);
  ibv_wr_send(qx);
  ibv_wr_set_sge(qx, env.mr->lkey, reinterpret_cast<uintptr_t>(env.page), 8);
  EXPECT_EQ(ibv_wr_complete(qx), EINVAL);  // a QP in RESET takes no WR (ibv_post_send(3))
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(env.cq, 1, &wc), 0);
  EXPECT_EQ(ibv_destroy_qp(q), 0);
  ia.comp_mask |= 1u << 30;  // unknown: not offered
  SWEEP_EXPECT_NULL(ibv_create_qp_ex(env.ctx, &ia), EOPNOTSUPP);
  ia.comp_mask &= ~(1u << 30);
  ia.send_ops_flags |= 1ull << 40;  // an unknown send op
  SWEEP_EXPECT_NULL(ibv_create_qp_ex(env.ctx, &ia), EOPNOTSUPP);
}

void rate_limit(Env& env) {
  ibv_qp* q = make_qp(env, IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  ibv_qp_rate_limit_attr a = {};
  a.rate_limit = 1000;
  EXPECT_EQ(ibv_modify_qp_rate_limit(q, &a), EOPNOTSUPP);
  EXPECT_EQ(ibv_destroy_qp(q), 0);
}

void xrc(Env& env) {
  ibv_xrcd_init_attr xa = {};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = -1;
  xa.oflags = O_CREAT;
  ibv_xrcd* x = ibv_open_xrcd(env.ctx, &xa);
  ASSERT_NE(x, nullptr) << errno;
  ibv_srq_init_attr_ex sa = {};
  sa.attr = {16, 1, 0};
  sa.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  sa.srq_type = IBV_SRQT_XRC;
  sa.pd = env.pd;
  sa.xrcd = x;
  sa.cq = env.cq;
  ibv_srq* s = ibv_create_srq_ex(env.ctx, &sa);
  ASSERT_NE(s, nullptr) << errno;
  uint32_t num = 0;
  EXPECT_EQ(ibv_get_srq_num(s, &num), 0);
  EXPECT_NE(num, 0u);
  EXPECT_EQ(ibv_close_xrcd(x), EBUSY);  // its SRQ is still there
  ibv_qp_open_attr oa = {};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = 0xabcde;
  oa.xrcd = x;
  oa.qp_type = IBV_QPT_XRC_RECV;
  SWEEP_EXPECT_NULL(ibv_open_qp(env.ctx, &oa), EINVAL);  // no such TGT QP
  ibv_ops_wr op = {};
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(s, &op, &bad), EINVAL);  // not a tag matching SRQ (as mlx5)
  EXPECT_EQ(ibv_destroy_srq(s), 0);
  EXPECT_EQ(ibv_close_xrcd(x), 0);
}

// A tag matching SRQ and its list operations (their traffic: tests/verbs/test_tag_matching.cpp).
void tag_matching(Env& env) {
  ibv_device_attr_ex da = {};
  ASSERT_EQ(ibv_query_device_ex(env.ctx, nullptr, &da), 0);
  EXPECT_TRUE(da.tm_caps.flags & IBV_TM_CAP_RC);
  ibv_srq_init_attr_ex sa = {};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  sa.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  sa.srq_type = IBV_SRQT_TM;
  sa.pd = env.pd;
  sa.cq = env.cq;
  sa.tm_cap = {1, 4};
  sa.comp_mask &= ~IBV_SRQ_INIT_ATTR_CQ;
  SWEEP_EXPECT_NULL(ibv_create_srq_ex(env.ctx, &sa), EINVAL);  // its list completes into a CQ
  sa.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
  ibv_srq* s = ibv_create_srq_ex(env.ctx, &sa);
  ASSERT_NE(s, nullptr) << errno;
  ibv_sge sge = {reinterpret_cast<uintptr_t>(env.page), 64, env.mr->lkey};
  ibv_ops_wr op = {};
  op.opcode = IBV_WR_TAG_ADD;
  op.tm.add.sg_list = &sge;
  op.tm.add.num_sge = 1;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(s, &op, &bad), 0);       // unsignaled: no completion
  EXPECT_EQ(ibv_post_srq_ops(s, &op, &bad), ENOMEM);  // one tag only
  EXPECT_EQ(bad, &op);
  op.opcode = IBV_WR_TAG_DEL;
  op.tm.handle = 7;
  EXPECT_EQ(ibv_post_srq_ops(s, &op, &bad), EINVAL);  // no such tag
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(env.cq, 1, &wc), 0);
  EXPECT_EQ(ibv_destroy_srq(s), 0);
}

void td_parent(Env& env) {
  ibv_td_init_attr ta = {};
  ibv_td* td = ibv_alloc_td(env.ctx, &ta);
  ASSERT_NE(td, nullptr) << errno;
  ta.comp_mask = 1;  // no comp_mask bit is defined
  SWEEP_EXPECT_NULL(ibv_alloc_td(env.ctx, &ta), EINVAL);
  ibv_parent_domain_init_attr pa = {};
  pa.pd = env.pd;
  pa.td = td;
  ibv_pd* par = ibv_alloc_parent_domain(env.ctx, &pa);
  ASSERT_NE(par, nullptr) << errno;
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);  // the parent domain holds it
  EXPECT_EQ(ibv_dealloc_pd(par), 0);
  ibv_context* other = ibv_open_device(env.dev);
  ASSERT_NE(other, nullptr);
  SWEEP_EXPECT_NULL(ibv_alloc_parent_domain(other, &pa), EINVAL);  // PD and TD of another context
  EXPECT_EQ(ibv_close_device(other), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
}

void not_offered(Env& env) {
  ibv_flow_action_esp_attr ea = {};
  SWEEP_EXPECT_NULL(ibv_create_flow_action_esp(env.ctx, &ea), EOPNOTSUPP);
  ibv_counters_init_attr ca = {};
  SWEEP_EXPECT_NULL(ibv_create_counters(env.ctx, &ca), EOPNOTSUPP);
}

// Raw packet QPs, flow rules, WQs, indirection tables and RSS QPs: on an Ethernet port the whole
// chain with its busy and twice-destroyed errors; on InfiniBand none of it (EOPNOTSUPP).
void raw_rss(Env& env, ibv_wq_init_attr& wa) {
  ibv_wq* wq = ibv_create_wq(env.ctx, &wa);
  ASSERT_NE(wq, nullptr) << errno;
  ibv_wq_attr m = {};
  m.attr_mask = IBV_WQ_ATTR_STATE;
  m.wq_state = IBV_WQS_RDY;
  EXPECT_EQ(ibv_modify_wq(wq, &m), 0);
  ibv_recv_wr rw = {};
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_wq_recv(wq, &rw, &bad), 0);
  ibv_wq* tbl[1] = {wq};
  ibv_rwq_ind_table_init_attr ra = {0, tbl, 0};
  ibv_rwq_ind_table* t = ibv_create_rwq_ind_table(env.ctx, &ra);
  ASSERT_NE(t, nullptr) << errno;
  EXPECT_EQ(ibv_destroy_wq(wq), EBUSY);  // its table names it
  uint8_t key[40] = {1};
  ibv_qp_init_attr_ex xa = {};
  xa.qp_type = IBV_QPT_RAW_PACKET;
  xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  xa.pd = env.pd;
  xa.rwq_ind_tbl = t;
  xa.rx_hash_conf = {IBV_RX_HASH_FUNC_TOEPLITZ, 40, key, IBV_RX_HASH_SRC_IPV4};
  xa.rx_hash_conf.rx_hash_fields_mask |= IBV_RX_HASH_INNER;  // not hashed here
  SWEEP_EXPECT_NULL(ibv_create_qp_ex(env.ctx, &xa), EOPNOTSUPP);
  xa.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4;
  ibv_qp* rss = ibv_create_qp_ex(env.ctx, &xa);
  ASSERT_NE(rss, nullptr) << errno;
  EXPECT_EQ(ibv_destroy_rwq_ind_table(t), EBUSY);  // an RSS QP receives through it
  EXPECT_EQ(ibv_destroy_qp(rss), 0);
  EXPECT_EQ(ibv_destroy_rwq_ind_table(t), 0);
  EXPECT_EQ(ibv_destroy_wq(wq), 0);
}

void raw_packet(Env& env) {
  ibv_port_attr pa = {};
  ASSERT_EQ(ibv_query_port(env.ctx, 1, &pa), 0);
  ibv_flow_attr fa = {};
  fa.size = sizeof fa;
  fa.port = 1;
  ibv_qp* rc = make_qp(env, IBV_QPT_RC);
  ASSERT_NE(rc, nullptr);
  SWEEP_EXPECT_NULL(ibv_create_flow(rc, &fa), EINVAL);  // steering is for raw packet QPs
  EXPECT_EQ(ibv_destroy_qp(rc), 0);
  ibv_qp_init_attr qa = {};
  qa.send_cq = qa.recv_cq = env.cq;
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.cap = {4, 4, 1, 1, 0};
  ibv_wq_init_attr wa = {};
  wa.wq_type = IBV_WQT_RQ;
  wa.max_wr = 4;
  wa.max_sge = 1;
  wa.pd = env.pd;
  wa.cq = env.cq;
  ibv_wq* tbl[1] = {nullptr};
  ibv_rwq_ind_table_init_attr ra = {kRssLogTableMaxPlusOne, tbl, 0};
  SWEEP_EXPECT_NULL(ibv_create_rwq_ind_table(env.ctx, &ra), EINVAL);
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
    SWEEP_EXPECT_NULL(ibv_create_qp(env.pd, &qa), EOPNOTSUPP);
    SWEEP_EXPECT_NULL(ibv_create_wq(env.ctx, &wa), EOPNOTSUPP);
    return;
  }
  ibv_qp* raw = ibv_create_qp(env.pd, &qa);
  ASSERT_NE(raw, nullptr) << errno;
  ibv_flow* f = ibv_create_flow(raw, &fa);
  ASSERT_NE(f, nullptr) << errno;
  EXPECT_EQ(ibv_destroy_qp(raw), EBUSY);  // a rule steers to it
  EXPECT_EQ(ibv_destroy_flow(f), 0);
  EXPECT_EQ(ibv_destroy_flow(f), EINVAL);  // twice
  EXPECT_EQ(ibv_destroy_qp(raw), 0);
  raw_rss(env, wa);
}

void dm(Env& env) {
  ibv_alloc_dm_attr a = {64, 0, 0};
  ibv_dm* d = ibv_alloc_dm(env.ctx, &a);
  ASSERT_NE(d, nullptr) << errno;
  uint32_t w = 7;
  EXPECT_EQ(ibv_memcpy_to_dm(d, 0, &w, 4), 0);
  EXPECT_EQ(ibv_memcpy_to_dm(d, 64, &w, 4), EINVAL);  // past the block
  ibv_mr* m = ibv_reg_dm_mr(env.pd, d, 0, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
  ASSERT_NE(m, nullptr) << errno;
  SWEEP_EXPECT_NULL(ibv_reg_dm_mr(env.pd, d, 32, 64, IBV_ACCESS_ZERO_BASED), EINVAL);
  ibv_context* other = ibv_open_device(env.dev);
  ASSERT_NE(other, nullptr);
  ibv_dm* foreign = ibv_alloc_dm(other, &a);
  ASSERT_NE(foreign, nullptr);
  SWEEP_EXPECT_NULL(ibv_reg_dm_mr(env.pd, foreign, 0, 64, IBV_ACCESS_ZERO_BASED), EINVAL);
  EXPECT_EQ(ibv_free_dm(foreign), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
  EXPECT_EQ(ibv_free_dm(d), EBUSY);  // an MR is on it
  EXPECT_EQ(ibv_dereg_mr(m), 0);
  EXPECT_EQ(ibv_free_dm(d), 0);
}

void null_mr(Env& env) {
  errno = 0;
  ibv_mr* m = ibv_alloc_null_mr(env.pd);
  if (m)
    EXPECT_EQ(ibv_dereg_mr(m), 0);
  else
    EXPECT_EQ(errno, EOPNOTSUPP);
}

void mw(Env& env) {
  ibv_mw* w = ibv_alloc_mw(env.pd, IBV_MW_TYPE_1);
  ASSERT_NE(w, nullptr) << errno;
  SWEEP_EXPECT_NULL(ibv_alloc_mw(env.pd, static_cast<ibv_mw_type>(9)), EINVAL);
  ibv_qp* q = make_qp(env);
  ASSERT_NE(q, nullptr);
  ibv_mw_bind b = {};
  b.bind_info.mr = env.mr;
  b.bind_info.addr = reinterpret_cast<uintptr_t>(env.page);
  b.bind_info.length = 64;
  b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  b.send_flags = IBV_SEND_SIGNALED;
  EXPECT_EQ(ibv_bind_mw(q, w, &b), EINVAL);  // the QP is in RESET
  EXPECT_EQ(ibv_destroy_qp(q), 0);
  EXPECT_EQ(ibv_dealloc_mw(w), 0);
}

void advise(Env& env) {
  ibv_mr* odp = ibv_reg_mr(env.pd, env.page, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp, nullptr) << errno;
  ibv_sge sge = {reinterpret_cast<uintptr_t>(env.page), 4096, odp->lkey};
  EXPECT_EQ(ibv_advise_mr(env.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(env.pd, static_cast<ibv_advise_mr_advice>(99), 0, &sge, 1), EOPNOTSUPP);
  EXPECT_EQ(ibv_advise_mr(env.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
}

}  // namespace

std::vector<Case> inline_cases() {
  return {
      {"ibv_query_device_ex", query_device_ex, nullptr},
      {"ibv_query_rt_values_ex", query_device_ex, nullptr},
      {"ibv_create_cq_ex", cq_ex, nullptr},
      {"ibv_start_poll/ibv_next_poll/ibv_end_poll/ibv_wc_read_*", cq_ex, nullptr},
      {"ibv_modify_cq", cq_ex, nullptr},
      {"ibv_create_qp_ex", qp_ex, nullptr},
      {"ibv_wr_start/ibv_wr_*/ibv_wr_complete/ibv_wr_abort", qp_ex, nullptr},
      {"ibv_modify_qp_rate_limit", rate_limit, nullptr},
      {"ibv_open_xrcd", xrc, nullptr},
      {"ibv_close_xrcd", xrc, nullptr},
      {"ibv_create_srq_ex", xrc, nullptr},
      {"ibv_get_srq_num", xrc, nullptr},
      {"ibv_open_qp", xrc, nullptr},
      {"ibv_post_srq_ops", tag_matching, nullptr},
      {"ibv_alloc_td", td_parent, nullptr},
      {"ibv_dealloc_td", td_parent, nullptr},
      {"ibv_alloc_parent_domain", td_parent, nullptr},
      {"ibv_create_flow", raw_packet, nullptr},
      {"ibv_destroy_flow", raw_packet, nullptr},
      {"ibv_create_wq", raw_packet, nullptr},
      {"ibv_modify_wq", raw_packet, nullptr},
      {"ibv_post_wq_recv", raw_packet, nullptr},
      {"ibv_destroy_wq", raw_packet, nullptr},
      {"ibv_create_rwq_ind_table", raw_packet, nullptr},
      {"ibv_destroy_rwq_ind_table", raw_packet, nullptr},
      {"ibv_create_flow_action_esp", not_offered, nullptr},
      {"ibv_create_counters", not_offered, nullptr},
      {"ibv_alloc_dm", dm, nullptr},
      {"ibv_memcpy_to_dm", dm, nullptr},
      {"ibv_reg_dm_mr", dm, nullptr},
      {"ibv_free_dm", dm, nullptr},
      {"ibv_alloc_null_mr", null_mr, nullptr},
      {"ibv_alloc_mw", mw, nullptr},
      {"ibv_bind_mw", mw, nullptr},
      {"ibv_dealloc_mw", mw, nullptr},
      {"ibv_advise_mr", advise, nullptr},
  };
}

}  // namespace sweep
