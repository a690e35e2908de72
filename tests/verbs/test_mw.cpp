// SPDX-License-Identifier: BSD-2-Clause
// Memory windows: type 1 bound with ibv_bind_mw, type 2 with IBV_WR_BIND_MW; remote access through
// a window sees only its range and rights; LOCAL_INV and SEND_WITH_INV free a type 2 window; a bad
// bind completes with MW_BIND_ERR.
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr int kBindable = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;

class MemoryWindow : public VerbsTest {
 protected:
  static ibv_wc one(ibv_cq* cq) {
    auto wc = poll_n(cq, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? ibv_wc{} : wc[0];
  }
  // A fresh pair's a RDMA WRITEs 8 bytes of 0x77 to raddr/rkey (b is the responder).
  ibv_wc_status write_through(const Pair& p, uint64_t raddr, uint32_t rkey) {
    Buf src = make_buf(8, kAllAccess, 0x77);
    ibv_sge s = src.sge(0, 8);
    ibv_send_wr w = rdma_wr(9, IBV_WR_RDMA_WRITE, &s, 1, raddr, rkey);
    EXPECT_EQ(post_one(p.a, &w), 0);
    return one(p.cqa).status;
  }
  // Binds a type 2 window through p.b to [t + off, + len) with remote write.
  uint32_t bind2(const Pair& p, ibv_mw* mw, const Buf& t, uint64_t off, uint64_t len) {
    ibv_send_wr w{};
    w.wr_id = 5;
    w.opcode = IBV_WR_BIND_MW;
    w.send_flags = IBV_SEND_SIGNALED;
    w.bind_mw.mw = mw;
    w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    w.bind_mw.bind_info = {t.mr, t.addr() + off, len, IBV_ACCESS_REMOTE_WRITE};
    EXPECT_EQ(post_one(p.b, &w), 0);
    ibv_wc wc = one(p.cqb);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    return w.bind_mw.rkey;
  }
};

TEST_F(MemoryWindow, Type1SeesOnlyItsRangeAndAZeroLengthBindClosesIt) {
  Buf t = make_buf(64, kBindable);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr) << errno;
  Pair p = make_pair();
  uint32_t before = mw->rkey;
  ibv_mw_bind b{};
  b.wr_id = 3;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = {t.mr, t.addr() + 16, 32, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(p.b, mw, &b), 0);
  ibv_wc wc = one(p.cqb);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_NE(mw->rkey, before);
  EXPECT_EQ(write_through(p, t.addr() + 40, mw->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(t.p[40], 0x77);
  EXPECT_EQ(write_through(make_pair(), t.addr() + 44, mw->rkey), IBV_WC_REM_ACCESS_ERR);  // past
  EXPECT_EQ(write_through(make_pair(), t.addr() + 16, before), IBV_WC_REM_ACCESS_ERR);    // old key
  Pair q = make_pair();
  b.bind_info = {t.mr, t.addr(), 0, 0};
  ASSERT_EQ(ibv_bind_mw(q.b, mw, &b), 0);
  EXPECT_EQ(one(q.cqb).status, IBV_WC_SUCCESS);
  EXPECT_EQ(write_through(q, t.addr() + 16, mw->rkey), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MemoryWindow, Type2IsFreedByLocalInvalidate) {
  Buf t = make_buf(64, kBindable);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr) << errno;
  Pair p = make_pair();
  uint32_t key = bind2(p, mw, t, 0, 64);
  EXPECT_EQ(write_through(p, t.addr(), key), IBV_WC_SUCCESS);
  // Through another QP than the one that bound it: refused (the window is the QP's).
  EXPECT_EQ(write_through(make_pair(), t.addr(), key), IBV_WC_REM_ACCESS_ERR);
  ibv_send_wr inv{};
  inv.wr_id = 6;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = key;
  ASSERT_EQ(post_one(p.b, &inv), 0);
  ibv_wc wc = one(p.cqb);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(write_through(p, t.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MemoryWindow, SendWithInvalidateFreesTheRespondersWindow) {
  Buf t = make_buf(64, kBindable);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  Pair p = make_pair();
  uint32_t key = bind2(p, mw, t, 0, 64);
  Buf rbuf = make_buf(16);
  ibv_sge rs = rbuf.sge(0, 16);
  ASSERT_EQ(post_recv(p.b, 1, &rs, 1), 0);
  Buf sbuf = make_buf(16, kAllAccess, 1);
  ibv_sge ss = sbuf.sge(0, 16);
  ibv_send_wr w = send_wr(2, IBV_WR_SEND_WITH_INV, &ss, 1);
  w.invalidate_rkey = key;
  ASSERT_EQ(post_one(p.a, &w), 0);
  EXPECT_EQ(one(p.cqa).status, IBV_WC_SUCCESS);
  ibv_wc rc = one(p.cqb);
  EXPECT_EQ(rc.status, IBV_WC_SUCCESS);
  EXPECT_TRUE(rc.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(rc.invalidated_rkey, key);
  EXPECT_EQ(write_through(p, t.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

TEST_F(MemoryWindow, TheDeviceOffersType1And2B) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);  // QP-associated type 2
}

TEST_F(MemoryWindow, BadInputIsRefused) {
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  Buf plain = make_buf(64);  // no MW_BIND right
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  Pair p = make_pair();
  ibv_mw_bind b{};
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = {plain.mr, plain.addr(), 64, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(p.b, mw, &b), 0);
  EXPECT_EQ(one(p.cqb).status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
}

}  // namespace
}  // namespace vt
