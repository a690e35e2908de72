// SPDX-License-Identifier: BSD-2-Clause
// Error injection at the engine (docs/design/reliability.md, "Error injection"): a send WR a wc
// rule names completes with the rule's status instead of executing, as if the NIC had found that
// error there, and the send queue stops as after any error completion.
#include "device/engine.h"
#include "emu/inject.h"

namespace emu {

bool Engine::inject_head(QpSlot& qp, const uint8_t* buf, uint32_t bbs) {
  // A head WQE being retried (an RNR or ACK-timeout stall) was judged on its first execution.
  if (qp.stall.load(std::memory_order_relaxed) != kStallNone) return false;
  uint8_t opcode = ctrl_opcode(*reinterpret_cast<const CtrlSeg*>(buf));
  uint8_t syndrome = 0;
  if (!inject_wc_decide(seg_, qp.qpn, opcode, &syndrome)) return false;
  log("QP 0x%x: injected %s at WQE %u", qp.qpn, inject_syndrome_name(syndrome), qp.sq_ci & 0xffff);
  CqeInfo info = error_cqe(kCqeReqErr, syndrome, qp, qp.sq_ci, opcode);
  info.vendor_err = kVendorErrInjected;
  write_cqe(cq_slot(h_, qp.send_cq), info);  // an error completion is written signaled or not
  qp.sq_ci += bbs;
  send_queue_error(qp);  // also for an injected WR_FLUSH_ERR, which a real flush would follow
  return true;
}

}  // namespace emu
