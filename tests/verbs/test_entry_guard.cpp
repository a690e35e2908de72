// SPDX-License-Identifier: BSD-2-Clause
// Entry points that libibverbs routes through its private ops or the kernel (verbs_provider/verbs/
// entry_guard.cpp): on emu objects they answer as a provider without the feature does, and never
// crash (pyverbs' test_query_data_in_order and test_shared_pd crashed the process before).
#include <cerrno>

#include "verbs_fixture.h"

namespace vt {
namespace {

class EntryGuard : public VerbsTest {};

TEST_F(EntryGuard, DataInOrderIsNotPromised) {
  ibv_cq* cq = make_cq();
  ibv_qp* qp = make_qp_of(IBV_QPT_UD, cq, cq);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_query_qp_data_in_order(qp, IBV_WR_SEND, 0), 0);
  EXPECT_EQ(ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0), 0);
}

TEST_F(EntryGuard, EceIsNotSupported) {
  ibv_cq* cq = make_cq();
  ibv_qp* qp = make_qp(cq, cq);
  ASSERT_NE(qp, nullptr);
  ibv_ece ece = {};
  EXPECT_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
  EXPECT_EQ(ibv_set_ece(qp, &ece), EOPNOTSUPP);
}

}  // namespace
}  // namespace vt
