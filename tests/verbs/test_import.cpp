// SPDX-License-Identifier: BSD-2-Clause
// Context import (verbs_provider/verbs/import.cpp): a context imported from a duplicate of an emu
// context's command fd finds that context's PD, MR and device-memory block by handle, and RDMA
// between a QP of the imported context and one of the original lands in the shared MR (as
// pyverbs' test_imported_rc_ex_rdma_write does). Unimport frees the handle, never the object.
#include <unistd.h>

#include <cstring>

#include "verbs_fixture.h"

namespace vt {
namespace {

class Import : public VerbsTest {
 protected:
  ibv_context* import_ctx() {
    int fd = dup(ctx->cmd_fd);
    EXPECT_GE(fd, 0);
    ibv_context* c = ibv_import_device(fd);
    EXPECT_NE(c, nullptr) << errno;
    if (!c) close(fd);
    return c;
  }
};

TEST_F(Import, HandlesNameTheOriginalObjects) {
  Buf b = make_buf(256, kAllAccess, 0x11);
  ibv_context* c = import_ctx();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->device, ctx->device);
  EXPECT_NE(c->cmd_fd, ctx->cmd_fd);
  ibv_pd* ipd = ibv_import_pd(c, pd->handle);
  ASSERT_NE(ipd, nullptr) << errno;
  EXPECT_EQ(ipd->context, c);
  EXPECT_EQ(ipd->handle, pd->handle);
  ibv_mr* imr = ibv_import_mr(ipd, b.mr->handle);
  ASSERT_NE(imr, nullptr) << errno;
  EXPECT_EQ(imr->lkey, b.mr->lkey);
  EXPECT_EQ(imr->rkey, b.mr->rkey);
  EXPECT_EQ(imr->length, b.mr->length);
  EXPECT_EQ(imr->pd, ipd);
  // Handles that name nothing (or another context's objects) are not found.
  errno = 0;
  EXPECT_EQ(ibv_import_pd(c, pd->handle + 1), nullptr);
  EXPECT_EQ(errno, ENOENT);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(ipd, b.mr->handle + 1), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ibv_context* other = open_emu0();
  ASSERT_NE(other, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(other, pd->handle), nullptr);  // not imported from ctx
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ibv_close_device(other), 0);
  ibv_unimport_mr(imr);
  ibv_unimport_pd(ipd);
  EXPECT_EQ(ibv_close_device(c), 0);
  // The originals are untouched: the fixture deregisters and deallocates them.
  EXPECT_EQ(ibv_rereg_mr(b.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, kAllAccess), 0);
}

TEST_F(Import, RdmaWriteIntoAnImportedMr) {
  Buf target = make_buf(64, kAllAccess, 0);
  Buf src = make_buf(64, kAllAccess, 0x5c);
  ibv_context* c = import_ctx();
  ASSERT_NE(c, nullptr);
  ibv_pd* ipd = ibv_import_pd(c, pd->handle);
  ASSERT_NE(ipd, nullptr);
  ibv_mr* imr = ibv_import_mr(ipd, target.mr->handle);
  ASSERT_NE(imr, nullptr);
  // The responder lives on the imported context, with the imported PD.
  ibv_cq* icq = ibv_create_cq(c, 16, nullptr, nullptr, 0);
  ASSERT_NE(icq, nullptr);
  ibv_qp* resp = create_rc_qp(ipd, icq, icq);
  ASSERT_NE(resp, nullptr) << errno;
  ibv_cq* cq = make_cq();
  ibv_qp* req = make_qp(cq, cq);
  ASSERT_EQ(connect_qp(req, lid, resp->qp_num, 1, 2), 0);
  ASSERT_EQ(connect_qp(resp, lid, req->qp_num, 2, 1), 0);
  ibv_sge s = src.sge(0, 64);
  ibv_send_wr w =
      rdma_wr(7, IBV_WR_RDMA_WRITE, &s, 1, reinterpret_cast<uintptr_t>(target.p), imr->rkey);
  ASSERT_EQ(post_one(req, &w), 0);
  ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, 7));
  EXPECT_EQ(std::memcmp(target.p, src.p, 64), 0);
  EXPECT_EQ(ibv_destroy_qp(resp), 0);
  EXPECT_EQ(ibv_destroy_cq(icq), 0);
  ibv_unimport_mr(imr);
  ibv_unimport_pd(ipd);
  EXPECT_EQ(ibv_close_device(c), 0);
}

TEST_F(Import, DeviceMemoryIsSharedByHandle) {
  ibv_alloc_dm_attr a = {256, 0, 0};
  ibv_dm* dm = ibv_alloc_dm(ctx, &a);
  ASSERT_NE(dm, nullptr);
  ibv_context* c = import_ctx();
  ASSERT_NE(c, nullptr);
  ibv_dm* idm = ibv_import_dm(c, dm->handle);
  ASSERT_NE(idm, nullptr) << errno;
  uint8_t in[64], out[64] = {};
  std::memset(in, 0xab, sizeof in);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 0, in, sizeof in), 0);
  EXPECT_EQ(ibv_memcpy_from_dm(out, idm, 0, sizeof out), 0);
  EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
  EXPECT_EQ(ibv_memcpy_from_dm(out, idm, 256, 4), EINVAL);  // the block's bounds hold
  errno = 0;
  EXPECT_EQ(ibv_import_dm(c, dm->handle + 1000), nullptr);
  EXPECT_EQ(errno, ENOENT);
  ibv_unimport_dm(idm);
  EXPECT_EQ(ibv_close_device(c), 0);
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 0, sizeof out), 0);  // still the allocator's
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// A command fd that is not an emu context's open here (another process's, passed over a socket,
// or closed since) cannot be imported: EOPNOTSUPP, as without import support.
TEST_F(Import, AClosedContextsFdIsNotImportable) {
  ibv_context* other = open_emu0();
  ASSERT_NE(other, nullptr);
  int fd = dup(other->cmd_fd);
  ASSERT_EQ(ibv_close_device(other), 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(fd), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  close(fd);
}

}  // namespace
}  // namespace vt
