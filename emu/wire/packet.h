// SPDX-License-Identifier: BSD-2-Clause
// The packet view of a message, as the IBTA has it: a message of len bytes is npk packets of the
// path MTU, each with a PSN (the first the requester's sq_psn) and a BTH opcode (FIRST, MIDDLE,
// LAST or ONLY of its operation); responders answer with ACKs, NAKs, READ responses and atomic
// acknowledgements. Internal to emu/.
#pragma once
#include <cstdint>

namespace emu::wire {

// BTH opcode = transport (high 3 bits) | operation (low 5 bits), IBTA 9.2.
constexpr uint8_t kTrRc = 0x00;
constexpr uint8_t kTrUc = 0x20;
constexpr uint8_t kTrUd = 0x60;
constexpr uint8_t kTrXrc = 0xa0;
enum BthOp : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0a,
  kWriteOnlyImm = 0x0b,
  kReadRequest = 0x0c,
  kReadRespFirst = 0x0d,
  kReadRespMiddle = 0x0e,
  kReadRespLast = 0x0f,
  kReadRespOnly = 0x10,
  kAck = 0x11,
  kAtomicAck = 0x12,
  kCmpSwap = 0x13,
  kFetchAdd = 0x14,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
};

// AETH syndromes (IBTA 9.3.5): an ACK (credits field "invalid": no end-to-end credits), a PSN
// sequence error NAK, an RNR NAK (| the timer code).
constexpr uint8_t kAethAck = 0x1f;
constexpr uint8_t kAethNakSeq = 0x60;
constexpr uint8_t kAethRnr = 0x20;

// The kind of a message, for its packets' opcodes.
enum class MsgKind : uint8_t {
  send,
  send_imm,
  send_inv,
  write,
  write_imm,
  read,
  cmp_swap,
  fetch_add
};

inline uint32_t mtu_bytes(uint8_t mtu_code) { return 128u << (mtu_code ? mtu_code : 1); }

// Opcode (operation bits) of packet i of n of a request message.
inline uint8_t request_op(MsgKind k, uint32_t i, uint32_t n) {
  bool first = i == 0, last = i + 1 == n;
  switch (k) {
    case MsgKind::read:
      return kReadRequest;
    case MsgKind::cmp_swap:
      return kCmpSwap;
    case MsgKind::fetch_add:
      return kFetchAdd;
    case MsgKind::write:
    case MsgKind::write_imm: {
      bool imm = k == MsgKind::write_imm;
      if (first && last) return imm ? kWriteOnlyImm : kWriteOnly;
      if (first) return kWriteFirst;
      if (last) return imm ? kWriteLastImm : kWriteLast;
      return kWriteMiddle;
    }
    default: {
      uint8_t only = k == MsgKind::send_imm   ? kSendOnlyImm
                     : k == MsgKind::send_inv ? kSendOnlyInv
                                              : kSendOnly;
      uint8_t lastop = k == MsgKind::send_imm   ? kSendLastImm
                       : k == MsgKind::send_inv ? kSendLastInv
                                                : kSendLast;
      if (first && last) return only;
      if (first) return kSendFirst;
      if (last) return lastop;
      return kSendMiddle;
    }
  }
}

inline uint8_t read_response_op(uint32_t i, uint32_t n) {
  if (n == 1) return kReadRespOnly;
  if (i == 0) return kReadRespFirst;
  return i + 1 == n ? kReadRespLast : kReadRespMiddle;
}

}  // namespace emu::wire
