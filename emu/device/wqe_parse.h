// SPDX-License-Identifier: BSD-2-Clause
// The device's one reading of a send WQE: control segment, then the segments its transport and
// opcode put there (XRC, address vector, remote address, atomic), then the local gather list
// translated through the MR table. Used by the one-at-a-time path and the write batch alike, so a
// WQE the batch takes is one the single path would have executed the same way. Internal to emu/.
#pragma once
#include <cstdint>
#include <cstring>

#include "device/engine_internal.h"
#include "emu/transport.h"
#include "emu/wqe.h"

namespace emu::engine_detail {

inline bool has_raddr(uint8_t opcode) {
  return opcode == kOpRdmaWrite || opcode == kOpRdmaWriteImm || opcode == kOpRdmaRead ||
         opcode == kOpAtomicCs || opcode == kOpAtomicFa || opcode == kOpAtomicWrite;
}
inline bool is_atomic(uint8_t opcode) {
  return opcode == kOpAtomicCs || opcode == kOpAtomicFa || opcode == kOpAtomicWrite;
}

// The address vector at *p, compact or extended (emu/wqe.h kAvExtended); *p then after it.
inline bool take_av(const uint8_t** p, const uint8_t* end, AvSeg* av) {
  if (*p + kAvCompactSize > end) return false;
  std::memcpy(av, *p, kAvCompactSize);
  auto* rest = reinterpret_cast<uint8_t*>(av) + kAvCompactSize;
  if (!(be32(av->dqp) & kAvExtended)) {  // compact: no GRH, the rest zero
    std::memset(rest, 0, sizeof(AvSeg) - kAvCompactSize);
    *p += kAvCompactSize;
    return true;
  }
  if (*p + sizeof(AvSeg) > end) return false;
  std::memcpy(rest, *p + kAvCompactSize, sizeof(AvSeg) - kAvCompactSize);
  *p += sizeof(AvSeg);
  return true;
}

struct ParsedWqe {
  const CtrlSeg* ctrl = nullptr;  // in the fetched copy (inline data points into it too)
  uint8_t opcode = 0;
  XrcSeg xrc{};
  AvSeg av{};
  RaddrSeg raddr{};
  AtomicSeg atom{};
  BindSeg bind{};
  Sges local;  // gathered from (sends, writes) or scattered into (READ, atomics)
  // The MR of each span of `local` (nullptr: inline data), for a copy that faulted and is tried
  // again through the MR's pages (Engine::copy_via_mr_pages).
  const MrSlot* local_mr[kMaxSpans];
  // Inline data and pointers to memory in one WQE (UCX's active messages: the header inline, the
  // payload by pointer), which mlx5 gathers in order. local.is_inline is then false; the engine
  // gathers the message into one buffer of its own before it executes it (Engine::gather_mixed).
  bool mixed = false;
};

// Reads the WQE at `wqe` (its control segment's size says how far) for a QP of qp's transport.
// Returns 0, or the syndrome of the requester's error CQE (a malformed WQE, an opcode the
// transport does not carry, a bad L_Key, too long a message).
[[gnu::always_inline]] inline uint8_t parse_wqe(Segment* seg, const QpSlot& qp, const uint8_t* wqe,
                                                ParsedWqe* w) {
  w->ctrl = reinterpret_cast<const CtrlSeg*>(wqe);
  w->opcode = ctrl_opcode(*w->ctrl);
  const uint8_t* p = wqe + sizeof(CtrlSeg);
  const uint8_t* end = wqe + ctrl_size(*w->ctrl);
  if (!transport_carries(qp.type, w->opcode)) return kSynLocalQpOp;
  auto take = [&](auto* seg_out) {
    if (p + sizeof *seg_out > end) return false;
    std::memcpy(seg_out, p, sizeof *seg_out);
    p += sizeof *seg_out;
    return true;
  };
  if (qp.type == kQptXrcSend && !take(&w->xrc)) return kSynLocalQpOp;
  // A datagram's address: UD's, and a DCI's (the DCT's number and access key in it); compact (16
  // bytes, no GRH) unless its dqp says extended.
  if ((qp.type == kQptUd || qp.type == kQptDci) && !take_av(&p, end, &w->av)) return kSynLocalQpOp;
  bool atomic = is_atomic(w->opcode);
  if (has_raddr(w->opcode) && !take(&w->raddr)) return kSynLocalQpOp;
  if (atomic && !take(&w->atom)) return kSynLocalQpOp;
  if (w->opcode == kOpBindMw && !take(&w->bind)) return kSynLocalQpOp;

  bool local_write = w->opcode == kOpRdmaRead || atomic;
  Sges& local = w->local;
  local.n = 0;  // w may be reused (the write batch)
  local.total = 0;
  local.is_inline = false;
  bool by_pointer = false;
  while (p + 4 <= end) {
    uint32_t bc;
    std::memcpy(&bc, p, 4);
    bc = be32(bc);
    if (bc & kInlineSegFlag) {
      uint32_t len = bc & ~kInlineSegFlag;
      if (local_write || p + 4 + len > end || local.n == kMaxSpans) return kSynLocalQpOp;
      w->local_mr[local.n] = nullptr;
      local.span[local.n++] = {reinterpret_cast<uint64_t>(p + 4), len};
      local.total += len;
      local.is_inline = true;
      p += (4 + len + 15) & ~15u;
      continue;
    }
    DataSeg d;
    if (!take(&d)) break;
    uint64_t len = be32(d.byte_count) ? be32(d.byte_count) : kMaxMsgSize;
    uint64_t va;
    if (local.n == kMaxSpans) return kSynLocalQpOp;
    by_pointer = true;
    if (!translate_local(seg, qp, be32(d.lkey), be64(d.addr), len, local_write, &va,
                         &w->local_mr[local.n]))
      return kSynLocalProt;
    local.span[local.n++] = {va, len};
    local.total += len;
  }
  w->mixed = local.is_inline && by_pointer;
  if (w->mixed) local.is_inline = false;
  if (local.total > kMaxMsgSize) return kSynLocalLength;
  if (atomic && w->opcode != kOpAtomicWrite && local.total != 8) return kSynLocalLength;
  return 0;
}

}  // namespace emu::engine_detail
