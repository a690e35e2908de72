// SPDX-License-Identifier: BSD-2-Clause
// RDMA and atomics over XRC (one process): the request names an XRC SRQ, whose PD guards the
// responder's memory (a TGT QP has no PD); a key of another PD is a remote access error.
#include <fcntl.h>

#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class XrcRdma : public VerbsTest {
 protected:
  void SetUpObjects() override {
    cq = make_cq();
    ibv_xrcd_init_attr xa{};
    xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    xa.fd = -1;
    xa.oflags = O_CREAT;
    xrcd = ibv_open_xrcd(ctx, &xa);
    ASSERT_NE(xrcd, nullptr);
    ibv_srq_init_attr_ex sa{};
    sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                   IBV_SRQ_INIT_ATTR_PD;
    sa.srq_type = IBV_SRQT_XRC;
    sa.xrcd = xrcd;
    sa.cq = cq;
    sa.pd = pd;
    sa.attr.max_wr = 16;
    sa.attr.max_sge = 1;
    srq = ibv_create_srq_ex(ctx, &sa);
    ASSERT_NE(srq, nullptr);
    ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
    ibv_qp_init_attr_ex ta{};
    ta.qp_type = IBV_QPT_XRC_RECV;
    ta.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    ta.xrcd = xrcd;
    tgt = ibv_create_qp_ex(ctx, &ta);
    ASSERT_NE(tgt, nullptr);
    ibv_qp_init_attr_ex ia{};
    ia.qp_type = IBV_QPT_XRC_SEND;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD;
    ia.pd = pd;
    ia.send_cq = cq;
    ia.cap.max_send_wr = 16;
    ia.cap.max_send_sge = 1;
    ini = ibv_create_qp_ex(ctx, &ia);
    ASSERT_NE(ini, nullptr);
    uint16_t port1 = port_lid(ctx);
    ASSERT_EQ(to_init(tgt, kAllAccess), 0);
    ASSERT_EQ(to_rtr(tgt, port1, ini->qp_num, 0, 1), 0);
    ASSERT_EQ(to_init(ini, kAllAccess), 0);
    ASSERT_EQ(to_rtr(ini, port1, tgt->qp_num, 0, 1), 0);
    ASSERT_EQ(to_rts(ini, 0, 14, 7, 7), 0);
  }
  void TearDown() override {
    if (ini) ibv_destroy_qp(ini);
    if (tgt) ibv_destroy_qp(tgt);
    if (srq) ibv_destroy_srq(srq);
    if (xrcd) ibv_close_xrcd(xrcd);
    VerbsTest::TearDown();
  }
  // Posts one signaled WR through the INI QP towards the SRQ and returns its completion.
  ibv_wc post_one(ibv_send_wr wr) {
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(ini, &wr, &bad), 0);
    auto wcs = poll_n(cq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }

  ibv_cq* cq = nullptr;
  ibv_xrcd* xrcd = nullptr;
  ibv_srq* srq = nullptr;
  uint32_t srqn = 0;
  ibv_qp* tgt = nullptr;
  ibv_qp* ini = nullptr;
};

TEST_F(XrcRdma, WriteReadAndAtomicsReachTheSrqsMemory) {
  Buf target = make_buf(64);
  Buf local = make_buf(64, kAllAccess, 0x5a);
  ibv_sge s = local.sge(0, 16);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma = {target.addr(), target.rkey()};
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  EXPECT_EQ(target.p[0], 0x5a);
  EXPECT_EQ(target.p[15], 0x5a);

  uint64_t seven = 7;
  std::memcpy(target.p + 32, &seven, 8);
  ibv_sge r8 = local.sge(48, 8);
  wr = {};
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.sg_list = &r8;
  wr.num_sge = 1;
  wr.wr.atomic = {target.addr() + 32, 5, 0, target.rkey()};
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  uint64_t got, now;
  std::memcpy(&got, local.p + 48, 8);
  std::memcpy(&now, target.p + 32, 8);
  EXPECT_EQ(got, 7u);
  EXPECT_EQ(now, 12u);

  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic = {target.addr() + 32, 12, 100, target.rkey()};
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  std::memcpy(&now, target.p + 32, 8);
  EXPECT_EQ(now, 100u);

  std::memset(target.p, 0x33, 8);
  ibv_sge rd = local.sge(16, 8);
  wr = {};
  wr.opcode = IBV_WR_RDMA_READ;
  wr.sg_list = &rd;
  wr.num_sge = 1;
  wr.wr.rdma = {target.addr(), target.rkey()};
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  EXPECT_EQ(local.p[16], 0x33);
  EXPECT_EQ(local.p[23], 0x33);
}

TEST_F(XrcRdma, AKeyOfAnotherPdIsARemoteAccessError) {
  ibv_pd* other = ibv_alloc_pd(ctx);
  ASSERT_NE(other, nullptr);
  std::vector<uint8_t> mem(64);
  ibv_mr* mr = ibv_reg_mr(other, mem.data(), mem.size(), kAllAccess);
  ASSERT_NE(mr, nullptr);
  Buf local = make_buf(64);
  ibv_sge s = local.sge(0, 8);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &s;
  wr.num_sge = 1;
  wr.wr.rdma = {reinterpret_cast<uint64_t>(mem.data()), mr->rkey};
  EXPECT_EQ(post_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  // XRC is a reliable transport: an error completion takes the INI QP to ERR, as RC's does (not
  // to SQE, which only the unreliable ones have).
  EXPECT_EQ(qp_state(ini), IBV_QPS_ERR);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(other);
}

}  // namespace
}  // namespace vt
