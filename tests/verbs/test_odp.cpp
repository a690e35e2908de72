// SPDX-License-Identifier: BSD-2-Clause
// On-demand paging: the device reads and writes a process's memory through its page tables, so an
// ODP MR over pages never touched, and the implicit MR over the whole address space, take RDMA
// like any MR; ibv_advise_mr checks its ranges as the kernel does.
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr int kOdpAccess = kAllAccess | IBV_ACCESS_ON_DEMAND;

class Odp : public VerbsTest {
 protected:
  // RDMA WRITEs `len` bytes of 0x6c from a's buffer to raddr/rkey and waits for its completion.
  ibv_wc write_to(uint64_t raddr, uint32_t rkey, uint32_t len) {
    Pair p = make_pair({}, {kOdpAccess}, {kOdpAccess});
    Buf src = make_buf(len, kAllAccess, 0x6c);
    ibv_sge s = src.sge(0, len);
    ibv_send_wr w = rdma_wr(1, IBV_WR_RDMA_WRITE, &s, 1, raddr, rkey);
    EXPECT_EQ(post_one(p.a, &w), 0);
    auto wc = poll_n(p.cqa, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? ibv_wc{} : wc[0];
  }
};

TEST_F(Odp, CapsOfferEveryTransportAndImplicitMrs) {
  ibv_device_attr_ex a = {};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &a), 0);
  EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT);
  EXPECT_TRUE(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  uint32_t rc = a.odp_caps.per_transport_caps.rc_odp_caps;
  for (uint32_t cap : {IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_WRITE,
                       IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_SRQ_RECV})
    EXPECT_TRUE(rc & cap) << cap;
  EXPECT_TRUE(a.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND);
  EXPECT_EQ(a.xrc_odp_caps, rc);
}

TEST_F(Odp, AnMrOverUntouchedPagesTakesAWrite) {
  size_t len = 1 << 20;
  void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ibv_mr* mr = ibv_reg_mr(pd, mem, len, kOdpAccess);
  ASSERT_NE(mr, nullptr) << errno;
  uint64_t far = reinterpret_cast<uint64_t>(mem) + len - 4096;
  EXPECT_EQ(write_to(far, mr->rkey, 64).status, IBV_WC_SUCCESS);
  EXPECT_EQ(static_cast<uint8_t*>(mem)[len - 4096 + 63], 0x6c);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(mem, len);
}

TEST_F(Odp, TheImplicitMrCoversMemoryNeverRegistered) {
  ibv_mr* mr = ibv_reg_mr(pd, nullptr, SIZE_MAX, kOdpAccess);
  ASSERT_NE(mr, nullptr) << errno;
  std::vector<uint8_t> plain(256);
  EXPECT_EQ(write_to(reinterpret_cast<uint64_t>(plain.data()) + 8, mr->rkey, 100).status,
            IBV_WC_SUCCESS);
  EXPECT_EQ(plain[8], 0x6c);
  EXPECT_EQ(plain[107], 0x6c);
  EXPECT_EQ(plain[108], 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, nullptr, SIZE_MAX, kAllAccess), nullptr);  // implicit needs ON_DEMAND
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Odp, AdviseMrChecksItsRanges) {
  Buf odp = make_buf(4096, kOdpAccess);
  Buf pinned = make_buf(4096);
  ibv_sge in = odp.sge(0, 4096);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &in, 1), 0);
  EXPECT_EQ(
      ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &in, 1), 0);
  ibv_sge past = odp.sge(1, 4096);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &past, 1), EINVAL);
  ibv_sge not_odp = pinned.sge(0, 64);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &not_odp, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(pd, static_cast<ibv_advise_mr_advice>(7), 0, &in, 1), EOPNOTSUPP);
  EXPECT_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &in, 1), EOPNOTSUPP);
}

}  // namespace
}  // namespace vt
