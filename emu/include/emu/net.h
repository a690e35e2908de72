// SPDX-License-Identifier: BSD-2-Clause
// The Ethernet, IP and UDP numbers the device reads and writes: in the raw QPs' steering
// (emu/raw), the wire's RoCE v2 frames (emu/wire) and the IPv4 header ahead of a RoCE v2 UD
// receive (emu/device). IEEE 802 EtherTypes, IANA protocol numbers, IBTA Annex A17's UDP port.
#pragma once
#include <cstddef>
#include <cstdint>

namespace emu::net {

constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint16_t kEtherTypeVlan = 0x8100;
constexpr uint8_t kIpProtoTcp = 6;
constexpr uint8_t kIpProtoUdp = 17;
constexpr uint16_t kRoceV2UdpPort = 4791;
constexpr size_t kIpv4HeaderBytes = 20;  // without options (what the device writes)
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;

// The Internet checksum's parts (RFC 1071): 16-bit big-endian words added into `sum` (an odd
// last byte as the high byte of a word), and the sum folded to 16 bits and complemented.
inline uint32_t ones_sum(uint32_t sum, const uint8_t* p, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n & 1) sum += static_cast<uint32_t>(p[n - 1] << 8);
  return sum;
}
inline uint16_t ones_fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// The IPv4 header checksum (RFC 791), its own field read as zero (the caller zeroes it first).
inline uint16_t ipv4_checksum(const uint8_t* header) {
  return ones_fold(ones_sum(0, header, kIpv4HeaderBytes));
}

}  // namespace emu::net
