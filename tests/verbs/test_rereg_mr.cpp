// SPDX-License-Identifier: BSD-2-Clause
// ibv_rereg_mr: an MR takes new rights, a new PD or new pages under the same keys, and RDMA sees
// exactly the new registration.
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class ReregMr : public VerbsTest {
 protected:
  // A fresh connected pair RDMA WRITEs 32 bytes of 0x4d to raddr/rkey; returns the status.
  ibv_wc_status write_to(uint64_t raddr, uint32_t rkey) {
    Pair p = make_pair();
    Buf src = make_buf(32, kAllAccess, 0x4d);
    ibv_sge s = src.sge(0, 32);
    ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, raddr, rkey);
    EXPECT_EQ(post_one(p.a, &w), 0);
    auto wc = poll_n(p.cqa, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? IBV_WC_GENERAL_ERR : wc[0].status;
  }
};

TEST_F(ReregMr, AccessChangesUnderTheSameKey) {
  Buf t = make_buf(64);
  uint32_t key = t.rkey();
  ASSERT_EQ(
      ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE),
      0);
  EXPECT_EQ(t.mr->rkey, key);
  EXPECT_EQ(write_to(t.addr(), key), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(t.p[0], 0);
  ASSERT_EQ(ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kAllAccess), 0);
  EXPECT_EQ(write_to(t.addr(), key), IBV_WC_SUCCESS);
  EXPECT_EQ(t.p[31], 0x4d);
}

TEST_F(ReregMr, TranslationMovesTheKeyToOtherPages) {
  Buf t = make_buf(64);
  std::vector<uint8_t> other(64);
  ASSERT_EQ(
      ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other.data(), other.size(), 0),
      0);
  EXPECT_EQ(t.mr->addr, other.data());
  EXPECT_EQ(write_to(t.addr(), t.rkey()), IBV_WC_REM_ACCESS_ERR);  // the old pages: not any more
  EXPECT_EQ(write_to(reinterpret_cast<uint64_t>(other.data()), t.rkey()), IBV_WC_SUCCESS);
  EXPECT_EQ(other[0], 0x4d);
  EXPECT_EQ(t.p[0], 0);
}

TEST_F(ReregMr, AnotherPdIsNotTheQpsAndBadInputChangesNothing) {
  Buf t = make_buf(64);
  ibv_pd* other = ibv_alloc_pd(ctx);
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(t.mr->pd, other);
  EXPECT_EQ(write_to(t.addr(), t.rkey()), IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_PD, pd, nullptr, 0, 0), 0);
  EXPECT_EQ(write_to(t.addr(), t.rkey()), IBV_WC_SUCCESS);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(t.mr, 0, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(t.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_REMOTE_WRITE),  // remote write without local write
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(write_to(t.addr(), t.rkey()), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

}  // namespace
}  // namespace vt
