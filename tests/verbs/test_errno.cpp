// SPDX-License-Identifier: BSD-2-Clause
// The errnos of the verbs edge, one test each, and that a refused call changed nothing.
#include <cerrno>
#include <cstring>
#include <future>

#include "verbs_fixture.h"

namespace vt {
namespace {

class Errno : public VerbsTest {
 protected:
  void SetUpObjects() override {
    cq = make_cq();
    ASSERT_NE(cq, nullptr);
  }

  ibv_qp* try_create(ibv_qp_cap cap, ibv_qp_type type = IBV_QPT_RC) {
    errno = 0;
    ibv_qp* qp = create_qp_of(pd, type, cq, cq,
                              {cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge,
                               cap.max_inline_data});
    if (qp) qps.push_back(qp);
    return qp;
  }

  // After a refused post: bring the pair to RTS, post one signaled marker write and check that the
  // marker is the only completion ever (the device completes in order, so a WR of the refused post
  // that had reached the ring would complete before it).
  void expect_only_marker(ibv_qp* qp, ibv_cq* scq, const Buf& dst, size_t marker_off) {
    Buf src = make_buf(64, kAllAccess, 0x5a);
    ibv_sge sg = src.sge(0, 8);
    ibv_send_wr m = rdma_wr(777, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr() + marker_off, dst.rkey());
    ASSERT_EQ(post_one(qp, &m), 0);
    auto wcs = poll_n(scq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].wr_id, 777u) << "a WR of the refused post completed";
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_TRUE(drain(scq).empty());
  }

  ibv_cq* cq = nullptr;
};

ibv_qp_cap caps(uint32_t swr, uint32_t rwr, uint32_t ssge, uint32_t rsge, uint32_t inl) {
  return {swr, rwr, ssge, rsge, inl};
}

TEST_F(Errno, CreateQpTooManySendSge) {
  EXPECT_EQ(try_create(caps(16, 16, 17, 1, 0)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(try_create(caps(16, 16, 16, 1, 0)), nullptr) << "the limit itself is allowed";
}

TEST_F(Errno, CreateQpInlineTooLarge) {
  EXPECT_EQ(try_create(caps(16, 16, 1, 1, 513)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_NE(try_create(caps(16, 16, 1, 1, 512)), nullptr) << "the limit itself is allowed";
}

TEST_F(Errno, CreateQpTooManySendWr) {
  EXPECT_EQ(try_create(caps(8193, 16, 1, 1, 0)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Errno, CreateQpUnsupportedType) {
  EXPECT_EQ(try_create(caps(16, 16, 1, 1, 0), IBV_QPT_RAW_PACKET), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Errno, ModifyResetToInitWithoutPort) {
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a = init_attr(kAllAccess, 0);  // no port
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
  EXPECT_EQ(to_init(qp, kAllAccess), 0) << "the complete transition still works";
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
}

TEST_F(Errno, ModifyResetToRtr) {
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(to_rtr(qp, lid, qp->qp_num, 0, 1), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
}

TEST_F(Errno, ModifyInitToRtrWithSqPsn) {
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(to_init(qp, kAllAccess), 0);
  ibv_qp_attr a = rtr_attr(lid, qp->qp_num, 0, 1);
  a.sq_psn = 5;
  int base = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(ibv_modify_qp(qp, &a, base | IBV_QP_SQ_PSN), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_INIT);
  EXPECT_EQ(ibv_modify_qp(qp, &a, base), 0) << "without the extra attribute it is accepted";
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTR);
}

TEST_F(Errno, ModifyBadPortNum) {
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr a = init_attr(kAllAccess, 2);  // emu0 has one port
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  EXPECT_EQ(ibv_modify_qp(qp, &a, mask), EINVAL);
  a.port_num = 0;
  EXPECT_EQ(ibv_modify_qp(qp, &a, mask), EINVAL);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RESET);
}

// ibv_post_send before RTS: refused with bad_wr == wr, and nothing of it ever runs.
TEST_F(Errno, PostSendBeforeRts) {
  ibv_cq* cqb = make_cq();
  ibv_qp* a = make_qp(cq, cq);
  ibv_qp* b = make_qp(cqb, cqb);
  ASSERT_TRUE(a && b && cqb);
  Buf src = make_buf(4096, kAllAccess, 0xab);
  Buf dst = make_buf(4096, kAllAccess, 0x00);
  ibv_sge sg[3] = {src.sge(0, 64), src.sge(64, 64), src.sge(128, 64)};
  ibv_send_wr w[3];
  for (int i = 0; i < 3; ++i)
    w[i] = rdma_wr(10 + i, IBV_WR_RDMA_WRITE, &sg[i], 1, dst.addr() + 64 * i, dst.rkey());
  w[0].next = &w[1];  // a chain: the whole of it is refused at its head

  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &w[0], &bad), EINVAL) << "in RESET";
  EXPECT_EQ(bad, &w[0]);
  ASSERT_EQ(to_init(a, kAllAccess), 0);
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &w[1], &bad), EINVAL) << "in INIT";
  EXPECT_EQ(bad, &w[1]);
  ASSERT_EQ(to_rtr(a, lid, b->qp_num, 0x200, 1), 0);
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &w[2], &bad), EINVAL) << "in RTR";
  EXPECT_EQ(bad, &w[2]);

  ASSERT_EQ(to_rts(a, 0x100, 14, 7, 7), 0);
  ASSERT_EQ(connect_qp(b, lid, a->qp_num, 0x200, 0x100), 0);
  expect_only_marker(a, cq, dst, 1024);
  for (int i = 0; i < 192; ++i) ASSERT_EQ(dst.p[i], 0) << "byte " << i << " was written";
}

TEST_F(Errno, PostRecvInReset) {
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  Buf b = make_buf(64);
  ibv_sge sg = b.sge(0, 64);
  EXPECT_EQ(post_recv(qp, 1, &sg, 1), EINVAL);
  // Nothing was queued: in INIT the queue takes exactly max_recv_wr receives.
  ASSERT_EQ(to_init(qp, kAllAccess), 0);
  ibv_qp_attr qa;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(qp, &qa, IBV_QP_CAP, &ia), 0);
  for (uint32_t i = 0; i < qa.cap.max_recv_wr; ++i)
    ASSERT_EQ(post_recv(qp, 100 + i, &sg, 1), 0) << i;
  EXPECT_EQ(post_recv(qp, 999, &sg, 1), ENOMEM);
}

class ErrnoConnected : public Errno {
 protected:
  void SetUpObjects() override {
    Errno::SetUpObjects();
    if (HasFatalFailure()) return;
    QpCaps c;
    c.max_send_wr = 16;
    c.max_recv_wr = 16;
    c.max_send_sge = 2;
    c.max_recv_sge = 2;
    c.max_inline_data = 64;
    cqb = make_cq();
    a = make_qp(cq, cq, c, &cap);
    b = make_qp(cqb, cqb, c);
    ASSERT_TRUE(a && b && cqb);
    ASSERT_EQ(connect_qp(a, lid, b->qp_num, 1, 2), 0);
    ASSERT_EQ(connect_qp(b, lid, a->qp_num, 2, 1), 0);
    src = make_buf(8192, kAllAccess, 0xcd);
    dst = make_buf(8192, kAllAccess, 0x00);
  }
  ibv_cq* cqb = nullptr;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_qp_cap cap{};
  Buf src, dst;
};

TEST_F(ErrnoConnected, PostSendTooManySge) {
  std::vector<ibv_sge> sg;
  for (uint32_t i = 0; i <= cap.max_send_sge; ++i) sg.push_back(src.sge(16 * i, 16));
  ibv_send_wr w =
      rdma_wr(1, IBV_WR_RDMA_WRITE, sg.data(), static_cast<int>(sg.size()), dst.addr(), dst.rkey());
  EXPECT_EQ(post_one(a, &w), EINVAL);
  expect_only_marker(a, cq, dst, 4096);
  for (size_t i = 0; i < 16 * sg.size(); ++i) ASSERT_EQ(dst.p[i], 0) << "byte " << i;
}

TEST_F(ErrnoConnected, InlineLongerThanMax) {
  ASSERT_GE(cap.max_inline_data, 64u);
  ASSERT_LT(cap.max_inline_data, 8192u);
  ibv_sge sg = src.sge(0, cap.max_inline_data + 1);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr(), dst.rkey(),
                          IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  EXPECT_EQ(post_one(a, &w), EINVAL);
  expect_only_marker(a, cq, dst, 4096);
  for (size_t i = 0; i <= cap.max_inline_data; ++i) ASSERT_EQ(dst.p[i], 0) << "byte " << i;
  // Exactly max_inline_data is accepted.
  sg.length = cap.max_inline_data;
  EXPECT_EQ(post_one(a, &w), 0);
  EXPECT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 1));
  EXPECT_EQ(dst.p[cap.max_inline_data - 1], 0xcd);
  EXPECT_EQ(dst.p[cap.max_inline_data], 0);
}

// ibv_post_send's opcodes come from a table (verbs_provider/verbs/post.cpp, wr_kind): what is not
// in it, or not carried by RC, is EINVAL, and nothing of the post runs.
TEST_F(ErrnoConnected, PostSendOpcodesNotCarriedAreEinval) {
  ibv_sge sg = src.sge(0, 8);
  for (int op : {int{IBV_WR_TSO}, int{IBV_WR_DRIVER1}, int{IBV_WR_ATOMIC_WRITE}, 12, 1000, -1}) {
    SCOPED_TRACE("opcode " + std::to_string(op));
    ibv_send_wr w = rdma_wr(1, static_cast<ibv_wr_opcode>(op), &sg, 1, dst.addr(), dst.rkey());
    EXPECT_EQ(post_one(a, &w), EINVAL);
  }
  expect_only_marker(a, cq, dst, 4096);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(dst.p[i], 0) << "byte " << i;
}

// IBV_SEND_INLINE means nothing to a READ or an atomic (the device writes into the buffer): they
// run as without it.
TEST_F(ErrnoConnected, InlineFlagOnAReadOrAtomicIsIgnored) {
  std::memset(src.p, 0, 64);
  ibv_sge sg = src.sge(0, 16);
  ibv_send_wr r = rdma_wr(1, IBV_WR_RDMA_READ, &sg, 1, dst.addr(), dst.rkey(),
                          IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  dst.p[0] = 0x77;
  ASSERT_EQ(post_one(a, &r), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 1));
  EXPECT_EQ(src.p[0], 0x77) << "read into the buffer";
  alignas(8) uint64_t old = 0;
  std::memcpy(dst.p + 64, &old, 8);
  ibv_sge asg = src.sge(32, 8);
  ibv_send_wr f = atomic_wr(2, IBV_WR_ATOMIC_FETCH_AND_ADD, &asg, dst.addr() + 64, dst.rkey(), 5, 0,
                            IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_one(a, &f), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 2));
  std::memcpy(&old, dst.p + 64, 8);
  EXPECT_EQ(old, 5u);
}

// Signaled writes that are never polled: the queue holds max_send_wr of them, the next is refused.
TEST_F(ErrnoConnected, SendQueueFull) {
  ibv_sge sg = src.sge(0, 8);
  std::vector<ibv_send_wr> w(cap.max_send_wr + 1);
  for (uint32_t i = 0; i <= cap.max_send_wr; ++i)
    w[i] = rdma_wr(i, IBV_WR_RDMA_WRITE, &sg, 1, dst.addr() + 8 * i, dst.rkey());
  for (uint32_t i = 0; i < cap.max_send_wr; ++i) ASSERT_EQ(post_one(a, &w[i]), 0) << "WR " << i;
  EXPECT_EQ(post_one(a, &w[cap.max_send_wr]), ENOMEM);
  // The refused WR never runs; polling frees the queue again.
  auto wcs = poll_n(cq, cap.max_send_wr);
  ASSERT_EQ(wcs.size(), cap.max_send_wr);
  for (uint32_t i = 0; i < cap.max_send_wr; ++i) EXPECT_EQ(wcs[i].wr_id, i);
  EXPECT_TRUE(drain(cq).empty());
  for (int k = 0; k < 8; ++k) EXPECT_EQ(dst.p[8 * cap.max_send_wr + k], 0);
  EXPECT_EQ(post_one(a, &w[cap.max_send_wr]), 0);
  EXPECT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, cap.max_send_wr));
}

TEST_F(ErrnoConnected, RecvQueueFull) {
  ibv_qp_attr qa;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(b, &qa, IBV_QP_CAP, &ia), 0);
  ibv_sge sg = dst.sge(0, 64);
  for (uint32_t i = 0; i < qa.cap.max_recv_wr; ++i) ASSERT_EQ(post_recv(b, i, &sg, 1), 0) << i;
  EXPECT_EQ(post_recv(b, 999, &sg, 1), ENOMEM);
  // The refused receive is not queued: the receives complete in order with their own wr_ids,
  // and once they are consumed the next send finds no receive (RNR, retried forever with
  // rnr_retry 7) until one is posted again.
  ibv_sge ss = src.sge(0, 16);
  for (uint32_t i = 0; i < qa.cap.max_recv_wr; ++i) {
    ibv_send_wr w = send_wr(i, IBV_WR_SEND, &ss, 1);
    ASSERT_EQ(post_one(a, &w), 0);
    ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, i));
    ASSERT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, i));
  }
  ibv_send_wr extra = send_wr(500, IBV_WR_SEND, &ss, 1);
  ASSERT_EQ(post_one(a, &extra), 0);
  EXPECT_TRUE(drain(cq).empty()) << "a send completed without a receive";
  EXPECT_TRUE(drain(cqb).empty()) << "a receive completed that was never queued";
  ASSERT_EQ(post_recv(b, 501, &sg, 1), 0);
  EXPECT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 500));
  EXPECT_TRUE(wait_wc(cqb, IBV_WC_SUCCESS, 501));
}

TEST_F(Errno, RegMrRemoteWriteWithoutLocalWrite) {
  Buf b = make_buf(4096, IBV_ACCESS_LOCAL_WRITE);
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pd, b.p, 4096, IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (mr) ibv_dereg_mr(mr);
  errno = 0;
  mr = ibv_reg_mr(pd, b.p, 4096, IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(mr, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (mr) ibv_dereg_mr(mr);
}

TEST_F(Errno, DeallocPdWithMr) {
  ibv_pd* pd2 = ibv_alloc_pd(ctx);
  ASSERT_NE(pd2, nullptr);
  static uint8_t mem[4096];
  ibv_mr* mr = ibv_reg_mr(pd2, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd2), EBUSY);
  // The PD is still usable after the refusal.
  ibv_mr* mr2 = ibv_reg_mr(pd2, mem, sizeof mem, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(mr2, nullptr);
  if (mr2) {
    EXPECT_EQ(ibv_dereg_mr(mr2), 0);
  }
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
}

TEST_F(Errno, DestroyCqInUse) {
  ibv_cq* c2 = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ASSERT_NE(c2, nullptr);
  ibv_qp* qp = create_rc_qp(pd, c2, cq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_cq(c2), EBUSY);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(c2, 1, &wc), 0) << "the CQ still works";
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(c2), 0);
}

TEST_F(Errno, DestroyChannelInUse) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  ibv_cq* c2 = ibv_create_cq(ctx, 16, nullptr, ch, 0);
  ASSERT_NE(c2, nullptr);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ibv_req_notify_cq(c2, 0), 0) << "the CQ and its channel still work";
  EXPECT_EQ(ibv_destroy_cq(c2), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

// A wait on a channel another thread destroyed (rping's CQ thread after its main thread cleaned
// up a failed rdma_accept: the kill sweep's survivor crashed there) fails as the kernel's read of
// a closed fd does, instead of touching freed memory. A thread already waiting wakes with -1.
TEST_F(Errno, WaitOnADestroyedChannelFails) {
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ASSERT_NE(ch, nullptr);
  std::future<int> waiter = std::async(std::launch::async, [ch] {
    ibv_cq* event_cq;
    void* cq_ctx;
    return ibv_get_cq_event(ch, &event_cq, &cq_ctx);
  });
  ASSERT_EQ(ibv_destroy_comp_channel(ch), 0);
  EXPECT_EQ(waiter.get(), -1);
  ibv_cq* event_cq;
  void* cq_ctx;
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(ch, &event_cq, &cq_ctx), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST_F(Errno, CreateCqBadSize) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  ASSERT_GT(da.max_cqe, 0);
  errno = 0;
  ibv_cq* c = ibv_create_cq(ctx, 0, nullptr, nullptr, 0);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (c) ibv_destroy_cq(c);
  errno = 0;
  c = ibv_create_cq(ctx, da.max_cqe + 1, nullptr, nullptr, 0);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(errno, EINVAL);
  if (c) ibv_destroy_cq(c);
  c = ibv_create_cq(ctx, da.max_cqe, nullptr, nullptr, 0);
  EXPECT_NE(c, nullptr) << "max_cqe itself is allowed, errno " << errno;
  if (c) {
    EXPECT_GE(c->cqe, da.max_cqe);
    EXPECT_EQ(ibv_destroy_cq(c), 0);
  }
}

TEST_F(Errno, QueryPortTwo) {
  ibv_port_attr pa;
  EXPECT_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
  EXPECT_EQ(ibv_query_port(ctx, 0, &pa), EINVAL);
  EXPECT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.lid, lid);
}

TEST_F(Errno, QueryGidOutOfRange) {
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  ASSERT_GT(pa.gid_tbl_len, 0);
  ibv_gid gid;
  EXPECT_EQ(ibv_query_gid(ctx, 1, pa.gid_tbl_len, &gid), -1);
  EXPECT_EQ(ibv_query_gid(ctx, 1, -1, &gid), -1);
  EXPECT_EQ(ibv_query_gid(ctx, 2, 0, &gid), -1);
  EXPECT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
}

// max_ah address handles per context, then ENOMEM; destroying one makes room again.
TEST_F(Errno, CreateAhBeyondMaxAh) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  ASSERT_GT(da.max_ah, 0);
  ibv_ah_attr a = lid_ah_attr(lid);
  std::vector<ibv_ah*> made;
  for (int i = 0; i < da.max_ah; ++i) {
    ibv_ah* ah = ibv_create_ah(pd, &a);
    ASSERT_NE(ah, nullptr) << "AH " << i;
    made.push_back(ah);
  }
  ASSERT_NO_FATAL_FAILURE(expect_full_until_one_goes(
      made, [&] { return ibv_create_ah(pd, &a); }, ibv_destroy_ah));
  expect_destroyed(made, ibv_destroy_ah);
}

}  // namespace
}  // namespace vt
