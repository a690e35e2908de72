// SPDX-License-Identifier: BSD-2-Clause
// RDMA ATOMIC WRITE through the ibv_wr_* API: 8 bytes placed at once with the remote-write right;
// a misaligned address is an invalid request, a key without remote write an access error.
#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class AtomicWrite : public VerbsTest {
 protected:
  // A connected RC pair whose a side posts through ibv_wr_*; returns a's send completion status.
  ibv_wc_status atomic_write(uint64_t raddr, uint32_t rkey, uint64_t value) {
    ibv_cq* ca = make_cq();
    ibv_cq* cb = make_cq();
    ibv_qp* qa = make_qp_ex(IBV_QPT_RC, ca, {16, 16, 1, 1, 0}, IBV_QP_EX_WITH_ATOMIC_WRITE);
    EXPECT_NE(qa, nullptr) << "errno " << errno;
    ibv_qp* qb = make_qp(cb, cb);
    if (!qa || !qb) return IBV_WC_GENERAL_ERR;
    EXPECT_EQ(connect_qp(qa, lid, qb->qp_num, 1, 2), 0);
    EXPECT_EQ(connect_qp(qb, lid, qa->qp_num, 2, 1), 0);
    ibv_qp_ex* x = ibv_qp_to_qp_ex(qa);
    ibv_wr_start(x);
    wr_next(x, 7);
    ibv_wr_atomic_write(x, rkey, raddr, &value);
    EXPECT_EQ(ibv_wr_complete(x), 0);
    auto wc = poll_n(ca, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.empty()) return IBV_WC_GENERAL_ERR;
    if (wc[0].status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc[0].opcode, IBV_WC_ATOMIC_WRITE);
    }
    return wc[0].status;
  }
};

TEST_F(AtomicWrite, PlacesEightBytesAsGiven) {
  Buf t = make_buf(64);
  uint64_t v = 0x0123456789abcdefull;
  EXPECT_EQ(atomic_write(t.addr() + 16, t.rkey(), v), IBV_WC_SUCCESS);
  uint64_t got;
  std::memcpy(&got, t.p + 16, 8);
  EXPECT_EQ(got, v);
  EXPECT_EQ(t.p[24], 0);
}

TEST_F(AtomicWrite, MisalignedOrWithoutRemoteWriteFails) {
  Buf t = make_buf(64);
  EXPECT_EQ(atomic_write(t.addr() + 4, t.rkey(), 1), IBV_WC_REM_INV_REQ_ERR);
  Buf ro = make_buf(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  EXPECT_EQ(atomic_write(ro.addr(), ro.rkey(), 1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ro.p[0], 0);
}

}  // namespace
}  // namespace vt
