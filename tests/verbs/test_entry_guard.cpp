// Entry points that libibverbs routes through its private ops or the kernel (verbs_provider/
// entry_guard.cpp): on emu objects they answer as a provider without the feature does, and never
// crash (pyverbs' test_query_data_in_order and test_shared_pd crashed the process before).
#include <unistd.h>

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

TEST_F(EntryGuard, ImportingAnEmuContextIsNotSupported) {
  int fd = dup(ctx->cmd_fd);
  ASSERT_GE(fd, 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(fd), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  close(fd);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(ctx, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(pd, 1), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_unimport_pd(pd);  // nothing was imported: a no-op, and the PD stays usable
  Buf b = make_buf(64);
  EXPECT_NE(b.mr, nullptr);
}

}  // namespace
}  // namespace vt
