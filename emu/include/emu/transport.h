// SPDX-License-Identifier: BSD-2-Clause
// What each transport may post: the WQE opcodes a QP type carries. The one table behind the
// driver's post check (EINVAL, as mlx5 refuses them), its ibv_qp_ex ops selection (EOPNOTSUPP) and
// the device's check of every WQE it fetches (a local QP operation error).
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/wqe.h"

namespace emu {

constexpr uint32_t opcode_bit(uint8_t opcode) { return opcode < 32 ? 1u << opcode : 0; }

constexpr uint32_t kSendOps = opcode_bit(kOpNop) | opcode_bit(kOpSend) | opcode_bit(kOpSendImm);
constexpr uint32_t kWriteOps = opcode_bit(kOpRdmaWrite) | opcode_bit(kOpRdmaWriteImm);
constexpr uint32_t kReadAtomicOps = opcode_bit(kOpRdmaRead) | opcode_bit(kOpAtomicCs) |
                                    opcode_bit(kOpAtomicFa) | opcode_bit(kOpAtomicWrite);
// Memory windows: bind and local invalidate on connected QPs, SEND with invalidate where a
// responder holds windows (RC, XRC).
constexpr uint32_t kMwOps = opcode_bit(kOpBindMw) | opcode_bit(kOpLocalInv);

// UD: only SENDs (a datagram has no remote address). UC: no READs or atomics (nothing answers).
// Raw packet: plain SENDs. XRC INI: everything RC carries (the request names an XRC SRQ, whose PD
// guards RDMA and atomics). An XRC TGT QP and a DCT have no send queue.
constexpr uint32_t transport_ops(uint8_t qp_type) {
  switch (qp_type) {
    case kQptRc:
    case kQptXrcSend:
      return kSendOps | kWriteOps | kReadAtomicOps | kMwOps | opcode_bit(kOpSendInval);
    case kQptDci:  // reliable, to a DCT named per WQE; no memory windows of its own
      return kSendOps | kWriteOps | kReadAtomicOps;
    case kQptUc:
      return kSendOps | kWriteOps | kMwOps;
    case kQptUd:
      return kSendOps;
    case kQptRaw:  // one whole Ethernet frame per SEND
      return opcode_bit(kOpNop) | opcode_bit(kOpSend);
    default:
      return 0;
  }
}

inline bool transport_carries(uint8_t qp_type, uint8_t opcode) {
  return (transport_ops(qp_type) & opcode_bit(opcode)) != 0;
}

}  // namespace emu
