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
    xrcd = open_xrcd(ctx, -1, O_CREAT);
    ASSERT_NE(xrcd, nullptr);
    srq = create_xrc_srq(ctx, pd, xrcd, cq, 16);
    ASSERT_NE(srq, nullptr);
    ASSERT_EQ(ibv_get_srq_num(srq, &srqn), 0);
    tgt = create_xrc_tgt(ctx, xrcd);
    ASSERT_NE(tgt, nullptr);
    ini = create_xrc_ini(ctx, pd, cq, 16);
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

// A TGT QP made with a PD in its attributes keeps it in ibv_qp::pd, as libibverbs records it for
// every QP type (the QP itself uses none): librdmacm's rdma_create_qp_ex takes the id's PD from
// there, and rdma_xserver's XRC SRQ, made next on that id, failed with EINVAL when it was null.
TEST_F(XrcRdma, ATgtQpKeepsThePdItWasGiven) {
  EXPECT_EQ(tgt->pd, nullptr);  // none given
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD;
  a.xrcd = xrcd;
  a.pd = pd;
  ibv_qp* with_pd = ibv_create_qp_ex(ctx, &a);
  ASSERT_NE(with_pd, nullptr);
  EXPECT_EQ(with_pd->pd, pd);
  EXPECT_EQ(ibv_destroy_qp(with_pd), 0);
}

TEST_F(XrcRdma, WriteReadAndAtomicsReachTheSrqsMemory) {
  Buf target = make_buf(64);
  Buf local = make_buf(64, kAllAccess, 0x5a);
  ibv_sge s = local.sge(0, 16);
  EXPECT_EQ(post_one(rdma_wr(0, IBV_WR_RDMA_WRITE, &s, 1, target.addr(), target.rkey())).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(target.p[0], 0x5a);
  EXPECT_EQ(target.p[15], 0x5a);

  uint64_t seven = 7;
  std::memcpy(target.p + 32, &seven, 8);
  ibv_sge r8 = local.sge(48, 8);
  ibv_send_wr wr =
      atomic_wr(0, IBV_WR_ATOMIC_FETCH_AND_ADD, &r8, target.addr() + 32, target.rkey(), 5, 0);
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  uint64_t got, now;
  std::memcpy(&got, local.p + 48, 8);
  std::memcpy(&now, target.p + 32, 8);
  EXPECT_EQ(got, 7u);
  EXPECT_EQ(now, 12u);

  wr = atomic_wr(0, IBV_WR_ATOMIC_CMP_AND_SWP, &r8, target.addr() + 32, target.rkey(), 12, 100);
  EXPECT_EQ(post_one(wr).status, IBV_WC_SUCCESS);
  std::memcpy(&now, target.p + 32, 8);
  EXPECT_EQ(now, 100u);

  std::memset(target.p, 0x33, 8);
  ibv_sge rd = local.sge(16, 8);
  EXPECT_EQ(post_one(rdma_wr(0, IBV_WR_RDMA_READ, &rd, 1, target.addr(), target.rkey())).status,
            IBV_WC_SUCCESS);
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
  ibv_send_wr wr =
      rdma_wr(0, IBV_WR_RDMA_WRITE, &s, 1, reinterpret_cast<uint64_t>(mem.data()), mr->rkey);
  EXPECT_EQ(post_one(wr).status, IBV_WC_REM_ACCESS_ERR);
  // XRC is a reliable transport: an error completion takes the INI QP to ERR, as RC's does (not
  // to SQE, which only the unreliable ones have).
  EXPECT_EQ(qp_state(ini), IBV_QPS_ERR);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(other);
}

}  // namespace
}  // namespace vt
