// SPDX-License-Identifier: BSD-2-Clause
// Device memory: blocks up to max_dm_size, host copies in 4-byte units, zero-based MRs on a block
// that RDMA reaches, and a block kept while an MR is on it.
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class DeviceMemory : public VerbsTest {
 protected:
  ibv_dm* alloc(size_t len) {
    ibv_alloc_dm_attr a{len, 0, 0};
    return ibv_alloc_dm(ctx, &a);
  }
};

TEST_F(DeviceMemory, BlocksAndHostCopiesFollowTheRules) {
  ibv_device_attr_ex attr = {};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &attr), 0);
  ASSERT_GT(attr.max_dm_size, 0u);
  errno = 0;
  EXPECT_EQ(alloc(attr.max_dm_size + 1), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_alloc_dm_attr bad{64, 0, 1};
  EXPECT_EQ(ibv_alloc_dm(ctx, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_dm* dm = alloc(256);
  ASSERT_NE(dm, nullptr);
  char in[64], out[64] = {};
  std::memset(in, 'a', sizeof in);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 8, in, sizeof in), 0);
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 8, sizeof out), 0);
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 9, in, 8), EINVAL);    // offset not in 4-byte units
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 8, in, 6), EINVAL);    // nor the length
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 252, in, 8), EINVAL);  // past the block
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

TEST_F(DeviceMemory, RdmaReachesABlockThroughAZeroBasedMr) {
  ibv_dm* dm = alloc(128);
  ASSERT_NE(dm, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd, dm, 0, 64, kAllAccess), nullptr);  // not zero based
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* mr = ibv_reg_dm_mr(pd, dm, 32, 64, kAllAccess | IBV_ACCESS_ZERO_BASED);
  ASSERT_NE(mr, nullptr) << errno;
  Pair p = make_pair();
  Buf src = make_buf(16, kAllAccess, 0x2e);
  ibv_sge s = src.sge(0, 16);
  ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, /*raddr=*/4, mr->rkey);
  ASSERT_EQ(post_one(p.a, &w), 0);
  auto wc = poll_n(p.cqa, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  uint8_t out[24] = {};
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 32, sizeof out), 0);
  EXPECT_EQ(out[3], 0);  // zero based: address 4 of the MR is byte 36 of the block
  EXPECT_EQ(out[4], 0x2e);
  EXPECT_EQ(out[19], 0x2e);
  EXPECT_EQ(out[20], 0);
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

}  // namespace
}  // namespace vt
