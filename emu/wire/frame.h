// SPDX-License-Identifier: BSD-2-Clause
// One packet as bytes on a link: RoCE v2 (Ethernet / IPv4 or IPv6 / UDP 4791) on Ethernet ports,
// LRH [/ GRH] on InfiniBand ports, then BTH, the extended headers its opcode has, the payload with
// its pad, and the ICRC (and the VCRC on InfiniBand). Used by the capture (emu/wire/pcap.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace emu::wire {

struct FrameAddr {
  uint16_t lid;     // InfiniBand
  uint8_t gid[16];  // RoCE: an IPv4-mapped GID makes an IPv4 packet
};

struct Frame {
  bool ethernet;  // RoCE v2, else InfiniBand
  bool grh;       // InfiniBand: a GRH after the LRH
  uint8_t sl;
  FrameAddr src, dst;
  uint8_t opcode;  // full BTH opcode
  bool solicited;
  bool ack_req;
  uint32_t dest_qpn;
  uint32_t psn;
  // Extended headers, used as the opcode requires.
  uint64_t reth_va;
  uint32_t reth_rkey, reth_len;
  uint64_t atomic_swap, atomic_cmp;  // AtomicETH (VA and rkey from reth_*)
  uint8_t aeth_syndrome;
  uint32_t aeth_msn;
  uint64_t atomic_orig;              // AtomicAckETH
  uint32_t deth_qkey, deth_src_qpn;  // UD
  uint32_t imm_be;                   // ImmDt / IETH, as it travels
  uint32_t xrc_srqn;                 // XRCETH (XRC requests)
  const uint8_t* payload;
  uint32_t payload_len;
};

constexpr size_t kMaxFrameHeaders = 14 + 40 + 8 + 12 + 4 + 28 + 8 + 4 + 4;
// Builds the frame into out (kMaxFrameHeaders + payload_len + 3 + 6 bytes); returns its length.
size_t build_frame(const Frame& f, uint8_t* out);

// The standard CRC-32 (reflected 0x04c11db7) of a buffer, continued from crc (0 to start).
uint32_t crc32(uint32_t crc, const uint8_t* p, size_t n);

}  // namespace emu::wire
