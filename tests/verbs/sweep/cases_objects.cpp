// SPDX-License-Identifier: BSD-2-Clause
// Sweep cases of the object families: PD, MR, CQ and completion channel, QP, SRQ, AH, multicast,
// async events. Bad arguments: out-of-range attributes, unknown flags, objects of another context,
// objects still in use.
#include <fcntl.h>
#include <sys/mman.h>

#include <cstring>

#include "grh_connect.h"
#include "sweep_case.h"
#include "verbs_fixture.h"

namespace sweep {
namespace {

using RegMrFn = ibv_mr*(ibv_pd*, void*, size_t, int);
using RegMrIovaFn = ibv_mr*(ibv_pd*, void*, size_t, uint64_t, int);
using RegMrIova2Fn = ibv_mr*(ibv_pd*, void*, size_t, uint64_t, unsigned);

void pd(Env& env) {
  ibv_pd* p = ibv_alloc_pd(env.ctx);
  ASSERT_NE(p, nullptr);
  ibv_mr* m = ibv_reg_mr(p, env.page, 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(p), EBUSY);  // an MR is on it
  EXPECT_EQ(ibv_dereg_mr(m), 0);
  EXPECT_EQ(ibv_dealloc_pd(p), 0);
}

void reg_mr(Env& env) {
  auto* plain = exported<RegMrFn>("ibv_reg_mr", "IBVERBS_1.1");
  auto* iova = exported<RegMrIovaFn>("ibv_reg_mr_iova", "IBVERBS_1.7");
  auto* iova2 = exported<RegMrIova2Fn>("ibv_reg_mr_iova2", "IBVERBS_1.8");
  ASSERT_TRUE(plain && iova && iova2);
  ibv_mr* a = plain(env.pd, env.page, 128, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* b = iova(env.pd, env.page, 128, 0x10000, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* c = iova2(env.pd, env.page, 128, 0x20000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(a && b && c);
  EXPECT_NE(a->lkey, b->lkey);
  // Remote write without local write is refused (ibv_reg_mr(3)), as is an unknown access bit.
  SWEEP_EXPECT_NULL(plain(env.pd, env.page, 128, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  SWEEP_EXPECT_NULL(iova2(env.pd, env.page, 128, 0, 1u << 30), EINVAL);
  EXPECT_EQ(ibv_dereg_mr(a), 0);
  EXPECT_EQ(ibv_dereg_mr(b), 0);
  EXPECT_EQ(ibv_dereg_mr(c), 0);
}

void rereg_mr(Env& env) {
  ibv_mr* m = ibv_reg_mr(env.pd, env.page, 256, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ),
            0);
  EXPECT_EQ(ibv_rereg_mr(m, IBV_REREG_MR_FLAGS_SUPPORTED << 1, nullptr, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(m, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);  // no change
  EXPECT_EQ(ibv_dereg_mr(m), 0);
}

void dmabuf_mr(Env& env) {
  // No DRM render node: emu0 registers no dma-buf.
  SWEEP_EXPECT_NULL(ibv_reg_dmabuf_mr(env.pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
}

void cq(Env& env) {
  ibv_device_attr a = {};
  ASSERT_EQ(ibv_query_device(env.ctx, &a), 0);
  SWEEP_EXPECT_NULL(ibv_create_cq(env.ctx, 0, nullptr, nullptr, 0), EINVAL);
  SWEEP_EXPECT_NULL(ibv_create_cq(env.ctx, a.max_cqe + 1, nullptr, nullptr, 0), EINVAL);
  SWEEP_EXPECT_NULL(ibv_create_cq(env.ctx, 4, nullptr, nullptr, env.ctx->num_comp_vectors), EINVAL);
  ibv_cq* c = ibv_create_cq(env.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(c, nullptr);
  EXPECT_GE(c->cqe, 4);
  ibv_qp* qp = make_qp(env);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(env.cq), EBUSY);  // a QP completes into it
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(c), 0);
}

void resize_cq(Env& env) {
  ibv_cq* c = ibv_create_cq(env.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(c, nullptr);
  int r = ibv_resize_cq(c, 64);
  if (r == 0) {
    EXPECT_GE(c->cqe, 64);
    EXPECT_EQ(ibv_resize_cq(c, 0), EINVAL);
  } else {
    EXPECT_EQ(r, EOPNOTSUPP);
    EXPECT_EQ(c->cqe >= 4, true);
  }
  EXPECT_EQ(ibv_destroy_cq(c), 0);
}

void comp_channel(Env& env) {
  ibv_comp_channel* ch = ibv_create_comp_channel(env.ctx);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c = ibv_create_cq(env.ctx, 4, nullptr, ch, 0);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // a CQ reports to it
  EXPECT_EQ(ibv_req_notify_cq(c, 0), 0);
  ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_cq* got = nullptr;
  void* cq_ctx = nullptr;
  SWEEP_EXPECT_ERRNO(ibv_get_cq_event(ch, &got, &cq_ctx), EAGAIN);  // nothing completed
  ibv_ack_cq_events(c, 0);
  EXPECT_EQ(ibv_destroy_cq(c), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

void qp(Env& env) {
  ibv_qp_init_attr ia = {};
  ia.send_cq = ia.recv_cq = env.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {1u << 30, 1, 1, 1, 0};
  SWEEP_EXPECT_NULL(ibv_create_qp(env.pd, &ia), EINVAL);  // past max_qp_wr
  ia.cap = {4, 4, 1, 1, 0};
  ia.qp_type = static_cast<ibv_qp_type>(77);
  SWEEP_EXPECT_NULL(ibv_create_qp(env.pd, &ia), EOPNOTSUPP);
  ibv_context* other = ibv_open_device(env.dev);
  ASSERT_NE(other, nullptr);
  ibv_cq* foreign = ibv_create_cq(other, 4, nullptr, nullptr, 0);
  ASSERT_NE(foreign, nullptr);
  ia.qp_type = IBV_QPT_RC;
  ia.send_cq = foreign;  // a CQ of another context
  SWEEP_EXPECT_NULL(ibv_create_qp(env.pd, &ia), EINVAL);
  ibv_qp* q = make_qp(env);
  ASSERT_NE(q, nullptr);
  ibv_qp_attr attr = {};
  ibv_qp_init_attr got = {};
  EXPECT_EQ(ibv_query_qp(q, &attr, IBV_QP_STATE | IBV_QP_CAP, &got), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RESET);
  attr.qp_state = IBV_QPS_RTS;  // RESET -> RTS skips two states
  EXPECT_EQ(ibv_modify_qp(q, &attr, IBV_QP_STATE), EINVAL);
  attr.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(ibv_modify_qp(q, &attr, IBV_QP_STATE), EINVAL);  // INIT needs port, pkey, access
  EXPECT_EQ(ibv_qp_to_qp_ex(q), nullptr);  // not made by ibv_create_qp_ex with send ops
  EXPECT_EQ(ibv_destroy_qp(q), 0);
  EXPECT_EQ(ibv_destroy_cq(foreign), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

void srq(Env& env) {
  ibv_srq_init_attr ia = {};
  ia.attr = {1u << 30, 1, 0};
  SWEEP_EXPECT_NULL(ibv_create_srq(env.pd, &ia), EINVAL);
  ia.attr = {16, 1, 0};
  ibv_srq* s = ibv_create_srq(env.pd, &ia);
  ASSERT_NE(s, nullptr);
  ibv_srq_attr a = {};
  EXPECT_EQ(ibv_query_srq(s, &a), 0);
  EXPECT_GE(a.max_wr, 16u);
  a.srq_limit = a.max_wr + 1;  // a limit above the queue
  EXPECT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), EINVAL);
  a.srq_limit = 2;
  EXPECT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), 0);
  EXPECT_EQ(ibv_destroy_srq(s), 0);
}

void ah(Env& env) {
  ibv_port_attr pa = {};
  ASSERT_EQ(ibv_query_port(env.ctx, 1, &pa), 0);
  ibv_ah_attr aa = {};
  aa.dlid = pa.lid;
  aa.port_num = 0;
  SWEEP_EXPECT_NULL(ibv_create_ah(env.pd, &aa), EINVAL);
  aa.port_num = 1;
  if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
    aa.is_global = 1;
    ASSERT_EQ(ibv_query_gid(env.ctx, 1, 0, &aa.grh.dgid), 0);
  }
  ibv_ah* a = ibv_create_ah(env.pd, &aa);
  ASSERT_NE(a, nullptr) << errno;
  EXPECT_EQ(ibv_destroy_ah(a), 0);
}

void ah_from_wc(Env& env) {
  ibv_port_attr pa = {};
  ASSERT_EQ(ibv_query_port(env.ctx, 1, &pa), 0);
  bool roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  ibv_wc wc = {};
  wc.status = IBV_WC_SUCCESS;
  wc.slid = pa.lid;
  wc.src_qp = 5;
  // The GRH is the receive buffer's first 40 bytes, always there for UD (libibverbs reads it
  // even without IBV_WC_GRH, so NULL is not allowed).
  ibv_grh grh = {};
  ibv_ah_attr aa = {};
  if (!roce) {
    EXPECT_EQ(ibv_init_ah_from_wc(env.ctx, 1, &wc, &grh, &aa), 0);
    EXPECT_EQ(aa.dlid, pa.lid);
    EXPECT_EQ(aa.is_global, 0);
  }
  wc.wc_flags = IBV_WC_GRH;  // a GRH naming a GID the port does not have
  std::memset(grh.sgid.raw, 0xee, 16);
  std::memset(grh.dgid.raw, 0xdd, 16);
  EXPECT_NE(ibv_init_ah_from_wc(env.ctx, 1, &wc, &grh, &aa), 0);
  // A GRH between this port's own GID and itself: a global AV back to the sender.
  grh.sgid = grh.dgid = vt::gid_of(env.ctx, 1, 0);
  grh.version_tclass_flow = htobe32(6u << 28);  // an IPv6-format GRH
  grh.hop_limit = 1;
  int type = 0;
  ASSERT_EQ(ibv_query_gid_type(env.ctx, 1, 0, &type), 0);
  grh.next_hdr = type == 1 ? 17 : 0x1b;  // UDP for RoCE v2, the IB next header otherwise
  EXPECT_EQ(ibv_init_ah_from_wc(env.ctx, 1, &wc, &grh, &aa), 0);
  EXPECT_EQ(aa.is_global, 1);
  EXPECT_EQ(std::memcmp(aa.grh.dgid.raw, grh.sgid.raw, 16), 0);
  ibv_ah* a = ibv_create_ah_from_wc(env.pd, &wc, &grh, 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(ibv_destroy_ah(a), 0);
}

void mcast(Env& env) {
  ibv_qp* ud = make_qp(env, IBV_QPT_UD);
  ibv_qp* rc = make_qp(env, IBV_QPT_RC);
  ASSERT_TRUE(ud && rc);
  ibv_gid g = {};
  g.raw[0] = 0xff;
  g.raw[15] = 1;
  EXPECT_EQ(ibv_attach_mcast(ud, &g, 0xc001), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &g, 0xc001), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &g, 0xc001), EINVAL);  // not attached
  EXPECT_EQ(ibv_attach_mcast(rc, &g, 0xc001), EINVAL);  // only UD QPs join groups
  EXPECT_EQ(ibv_destroy_qp(ud), 0);
  EXPECT_EQ(ibv_destroy_qp(rc), 0);
}

// A SEND into a responder in RTR raises COMM_EST: read it from the async fd and ack it.
void async_events(Env& env) {
  ASSERT_EQ(fcntl(env.ctx->async_fd, F_SETFL, fcntl(env.ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
  ibv_async_event ev = {};
  SWEEP_EXPECT_ERRNO(ibv_get_async_event(env.ctx, &ev), EAGAIN);
  ibv_qp* a = make_qp(env);
  ibv_qp* b = make_qp(env);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(connect_to(env, a, b->qp_num, IBV_QPS_RTS), 0);
  ASSERT_EQ(connect_to(env, b, a->qp_num, IBV_QPS_RTR), 0);
  ibv_sge sge = {reinterpret_cast<uintptr_t>(env.page), 8, env.mr->lkey};
  ibv_recv_wr rw = {};
  rw.sg_list = &sge;
  rw.num_sge = 1;
  ibv_recv_wr* bad_rw = nullptr;
  ASSERT_EQ(ibv_post_recv(b, &rw, &bad_rw), 0);
  ibv_send_wr sw = vt::send_wr(1, IBV_WR_SEND, &sge, 1);
  ASSERT_EQ(vt::post_one(a, &sw), 0);
  EXPECT_EQ(vt::poll_n(env.cq, 2).size(), 2u);
  ASSERT_TRUE(vt::get_async_event(env.ctx, &ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_COMM_EST);
  EXPECT_EQ(ev.element.qp, b);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);  // returns: its one event was acked
}

}  // namespace

int connect_to(Env& env, ibv_qp* qp, uint32_t dest_qpn, ibv_qp_state state) {
  // A GRH path to this port's first GID: what RoCE needs and InfiniBand takes.
  vt::GrhPath path;
  path.dlid = vt::port_lid(env.ctx);
  path.dgid = vt::gid_of(env.ctx, 1, 0);
  if (state == IBV_QPS_RTS) return vt::connect_grh(qp, path, dest_qpn);
  if (int rc = vt::to_init_on(qp, 1)) return rc;
  return vt::to_rtr_grh(qp, path, dest_qpn, 1);
}

ibv_qp* make_qp(Env& env, ibv_qp_type type) {
  ibv_qp_init_attr ia = {};
  ia.send_cq = ia.recv_cq = env.cq;
  ia.qp_type = type;
  ia.cap = {4, 4, 1, 1, 0};
  ibv_qp* q = ibv_create_qp(env.pd, &ia);
  EXPECT_NE(q, nullptr) << "ibv_create_qp, errno " << errno;
  return q;
}

std::vector<Case> object_cases() {
  return {
      {"ibv_alloc_pd", pd, nullptr},
      {"ibv_dealloc_pd", pd, nullptr},
      {"ibv_reg_mr", reg_mr, nullptr},
      {"ibv_reg_mr_iova", reg_mr, nullptr},
      {"ibv_reg_mr_iova2", reg_mr, nullptr},
      {"ibv_dereg_mr", reg_mr, nullptr},
      {"ibv_rereg_mr", rereg_mr, nullptr},
      {"ibv_reg_dmabuf_mr", dmabuf_mr, nullptr},
      {"ibv_create_cq", cq, nullptr},
      {"ibv_destroy_cq", cq, nullptr},
      {"ibv_resize_cq", resize_cq, nullptr},
      {"ibv_create_comp_channel", comp_channel, nullptr},
      {"ibv_destroy_comp_channel", comp_channel, nullptr},
      {"ibv_get_cq_event", comp_channel, nullptr},
      {"ibv_ack_cq_events", comp_channel, nullptr},
      {"ibv_create_qp", qp, nullptr},
      {"ibv_query_qp", qp, nullptr},
      {"ibv_modify_qp", qp, nullptr},
      {"ibv_destroy_qp", qp, nullptr},
      {"ibv_qp_to_qp_ex", qp, nullptr},
      {"ibv_create_srq", srq, nullptr},
      {"ibv_query_srq", srq, nullptr},
      {"ibv_modify_srq", srq, nullptr},
      {"ibv_destroy_srq", srq, nullptr},
      {"ibv_create_ah", ah, nullptr},
      {"ibv_destroy_ah", ah, nullptr},
      {"ibv_init_ah_from_wc", ah_from_wc, nullptr},
      {"ibv_create_ah_from_wc", ah_from_wc, nullptr},
      {"ibv_attach_mcast", mcast, nullptr},
      {"ibv_detach_mcast", mcast, nullptr},
      {"ibv_get_async_event", async_events, nullptr},
      {"ibv_ack_async_event", async_events, nullptr},
  };
}

}  // namespace sweep
