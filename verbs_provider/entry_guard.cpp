// Entry points of libibverbs that reach the provider through libibverbs' private ops table (or the
// kernel) and that emu objects cannot take there: an emu context has no private part, so these are
// answered here for emu objects, as a provider without the feature answers, and go to libibverbs
// for everything else.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "forward.h"
#include "provider.h"

using namespace emu::prov;

namespace {

// Whether fd is an emu context's command fd (a memfd named kEmuCmdFdName; the link of a memfd
// reads "/memfd:NAME (deleted)").
bool is_emu_cmd_fd(int fd) {
  char link[64], target[128];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = 0;
  char want[64];
  std::snprintf(want, sizeof want, "/memfd:%s ", kEmuCmdFdName);
  return std::strncmp(target, want, std::strlen(want)) == 0;
}

}  // namespace

extern "C" {

// Whether the device places a message's data in order. The engine copies a payload with memcpy or
// process_vm_writev, whose store order is unspecified: "not in order" (0), the answer that never
// misleads a poller of the last byte; the CQE still follows all of the data.
int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  if (!is_emu(qp->context)) {
    auto fn = REAL(ibv_query_qp_data_in_order, "IBVERBS_1.14");
    return fn ? fn(qp, op, flags) : 0;
  }
  return 0;
}

// Enhanced connection establishment: emu devices have no ECE options to offer, as providers
// without the op answer.
int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!is_emu(qp->context)) {
    auto fn = REAL(ibv_query_ece, "IBVERBS_1.10");
    return fn ? fn(qp, ece) : EOPNOTSUPP;
  }
  return EOPNOTSUPP;
}

int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!is_emu(qp->context)) {
    auto fn = REAL(ibv_set_ece, "IBVERBS_1.10");
    return fn ? fn(qp, ece) : EOPNOTSUPP;
  }
  return EOPNOTSUPP;
}

// Sharing a context's objects through its command fd (a dup of cmd_fd in another context or
// process) needs the kernel's object handles; emu contexts do not export them (yet): EOPNOTSUPP,
// as libibverbs answers for a provider without import.
ibv_context* ibv_import_device(int cmd_fd) {
  if (is_emu_cmd_fd(cmd_fd)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto fn = REAL(ibv_import_device, "IBVERBS_1.10");
  if (!fn) errno = EOPNOTSUPP;
  return fn ? fn(cmd_fd) : nullptr;
}

ibv_pd* ibv_import_pd(ibv_context* ctx, uint32_t handle) {
  if (!is_emu(ctx)) {
    auto fn = REAL(ibv_import_pd, "IBVERBS_1.10");
    if (fn) return fn(ctx, handle);
  }
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t handle) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_import_mr, "IBVERBS_1.10");
    if (fn) return fn(pd, handle);
  }
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_dm* ibv_import_dm(ibv_context* ctx, uint32_t handle) {
  if (!is_emu(ctx)) {
    auto fn = REAL(ibv_import_dm, "IBVERBS_1.13");
    if (fn) return fn(ctx, handle);
  }
  errno = EOPNOTSUPP;
  return nullptr;
}

// Nothing of an emu context was imported, so there is nothing to unimport.
void ibv_unimport_pd(ibv_pd* pd) {
  if (is_emu(pd->context)) return;
  if (auto fn = REAL(ibv_unimport_pd, "IBVERBS_1.10")) fn(pd);
}

void ibv_unimport_mr(ibv_mr* mr) {
  if (is_emu(mr->context)) return;
  if (auto fn = REAL(ibv_unimport_mr, "IBVERBS_1.10")) fn(mr);
}

void ibv_unimport_dm(ibv_dm* dm) {
  if (is_emu(dm->context)) return;
  if (auto fn = REAL(ibv_unimport_dm, "IBVERBS_1.13")) fn(dm);
}

}  // extern "C"
