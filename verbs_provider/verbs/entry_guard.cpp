// SPDX-License-Identifier: BSD-2-Clause
// Entry points of libibverbs that reach the provider through libibverbs' private ops table (or the
// kernel) and that emu objects cannot take there: an emu context has no private part, so these are
// answered here for emu objects, as a provider without the feature answers, and go to libibverbs
// for everything else. (Context import, which also goes through private ops: import.cpp.)
#include <cerrno>

#include "forward.h"
#include "provider.h"

using namespace emu::prov;

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

}  // extern "C"
