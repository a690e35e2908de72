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

// The IPv4 header checksum (RFC 791): the ones' complement of the ones' complement sum of the
// header's 16-bit words, its own field read as zero (the caller zeroes it first).
inline uint16_t ipv4_checksum(const uint8_t* header) {
  uint32_t sum = 0;
  for (size_t i = 0; i < kIpv4HeaderBytes; i += 2) sum += uint32_t(header[i]) << 8 | header[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace emu::net
