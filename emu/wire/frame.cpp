// SPDX-License-Identifier: BSD-2-Clause
// Frames of the capture: RoCE v2 and InfiniBand packets with their ICRC (IBTA 7.8.1 and Annex
// A17: the CRC covers every field that does not change on the way, the changing ones taken as
// all ones; RoCE v2 stands eight bytes of ones for the LRH it does not have).
#include "wire/frame.h"

#include <cstring>

#include "emu/net.h"
#include "wire/packet.h"

namespace emu::wire {
namespace {

struct Crc32Table {
  uint32_t t[256];
  constexpr Crc32Table() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
  }
};
constexpr Crc32Table kCrc32;

// The VCRC: CRC-16 with the polynomial x^16 + x^12 + x^3 + x + 1 (0x100b, reflected 0xd008).
uint16_t crc16_vcrc(const uint8_t* p, size_t n) {
  uint16_t c = 0xffff;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? static_cast<uint16_t>(0xd008 ^ (c >> 1)) : c >> 1;
  }
  return static_cast<uint16_t>(~c);
}

struct Out {
  uint8_t* p;
  size_t n = 0;
  void u8(uint8_t v) { p[n++] = v; }
  void u16(uint16_t v) { u8(static_cast<uint8_t>(v >> 8)), u8(static_cast<uint8_t>(v)); }
  void u24(uint32_t v) { u8(static_cast<uint8_t>(v >> 16)), u16(static_cast<uint16_t>(v)); }
  void u32(uint32_t v) { u16(static_cast<uint16_t>(v >> 16)), u16(static_cast<uint16_t>(v)); }
  void u64(uint64_t v) { u32(static_cast<uint32_t>(v >> 32)), u32(static_cast<uint32_t>(v)); }
  void raw(const void* s, size_t len) {
    if (len) std::memcpy(p + n, s, len);
    n += len;
  }
};

bool has_reth(uint8_t op) {
  return op == kWriteFirst || op == kWriteOnly || op == kWriteOnlyImm || op == kReadRequest;
}
bool has_aeth(uint8_t op) {
  return op == kReadRespFirst || op == kReadRespLast || op == kReadRespOnly || op == kAck ||
         op == kAtomicAck;
}
bool has_imm(uint8_t op) {
  return op == kSendLastImm || op == kSendOnlyImm || op == kWriteLastImm || op == kWriteOnlyImm;
}
bool is_response(uint8_t op) { return op >= kReadRespFirst && op <= kAtomicAck; }

bool v4_mapped(const uint8_t* gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid, prefix, 12) == 0;
}

// A locally administered MAC made from a GID's last four bytes.
void mac_of(Out& o, const uint8_t* gid) {
  o.u8(0x02), o.u8(0x00);
  o.raw(gid + 12, 4);
}

// addrs: source and destination addresses (32 bytes); udp: the datagram (its checksum field 0).
uint16_t udp6_checksum(const uint8_t* addrs, const uint8_t* udp, size_t len) {
  uint32_t sum = net::ones_sum(0, addrs, 32) + static_cast<uint32_t>(len) + net::kIpProtoUdp;
  uint16_t c = net::ones_fold(net::ones_sum(sum, udp, len));
  return c ? c : 0xffff;
}

// BTH through the payload and its pad.
void transport(const Frame& f, Out& o) {
  uint8_t op = f.opcode & 0x1f;
  uint8_t tr = f.opcode & 0xe0;
  uint8_t pad = static_cast<uint8_t>((4 - (f.payload_len & 3)) & 3);
  o.u8(f.opcode);
  o.u8(static_cast<uint8_t>((f.solicited ? 0x80 : 0) | pad << 4));
  o.u16(0xffff);
  o.u8(0);
  o.u24(f.dest_qpn);
  o.u8(f.ack_req ? 0x80 : 0);
  o.u24(f.psn & 0xffffff);
  if (tr == kTrUd) {
    o.u32(f.deth_qkey);
    o.u32(f.deth_src_qpn & 0xffffff);
  }
  if (tr == kTrXrc && !is_response(op)) o.u32(f.xrc_srqn & 0xffffff);
  if (has_reth(op)) {
    o.u64(f.reth_va);
    o.u32(f.reth_rkey);
    o.u32(f.reth_len);
  }
  if (op == kCmpSwap || op == kFetchAdd) {
    o.u64(f.reth_va);
    o.u32(f.reth_rkey);
    o.u64(f.atomic_swap);
    o.u64(f.atomic_cmp);
  }
  if (has_aeth(op)) {
    o.u8(f.aeth_syndrome);
    o.u24(f.aeth_msn);
  }
  if (op == kAtomicAck) o.u64(f.atomic_orig);
  if (has_imm(op) || op == kSendLastInv || op == kSendOnlyInv) o.raw(&f.imm_be, 4);
  o.raw(f.payload, f.payload_len);
  for (int i = 0; i < pad; ++i) o.u8(0);
}

// The ICRC over len bytes from start, whose first hdr bytes (the headers) come masked in
// `masked`: the fields that change on the way taken as ones. RoCE v2 starts from eight bytes of
// ones for the LRH it does not have.
uint32_t icrc(const uint8_t* masked, size_t hdr, const uint8_t* start, size_t len, bool roce) {
  static const uint8_t kOnes[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  uint32_t c = roce ? crc32(0, kOnes, 8) : 0;
  c = crc32(c, masked, hdr);
  return crc32(c, start + hdr, len - hdr);
}

void put_le32(Out& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o.u8(static_cast<uint8_t>(v >> (8 * i)));
}

size_t build_roce(const Frame& f, uint8_t* out) {
  Out o{out};
  bool v4 = v4_mapped(f.src.gid) && v4_mapped(f.dst.gid);
  mac_of(o, f.dst.gid);
  mac_of(o, f.src.gid);
  o.u16(v4 ? net::kEtherTypeIpv4 : net::kEtherTypeIpv6);
  size_t ip = o.n;
  size_t ip_len = v4 ? net::kIpv4HeaderBytes : net::kIpv6HeaderBytes;
  // Lengths are filled in once the transport part is written.
  o.n += ip_len + 8;
  size_t bth = o.n;
  transport(f, o);
  size_t ib_len = o.n - bth + 4;
  Out h{out + ip};
  if (v4) {
    h.u8(0x45), h.u8(0),
        h.u16(static_cast<uint16_t>(net::kIpv4HeaderBytes + net::kUdpHeaderBytes + ib_len)),
        h.u16(0), h.u16(0x4000);
    h.u8(64), h.u8(net::kIpProtoUdp), h.u16(0);
    h.raw(f.src.gid + 12, 4), h.raw(f.dst.gid + 12, 4);
    uint16_t sum = net::ipv4_checksum(out + ip);
    out[ip + 10] = static_cast<uint8_t>(sum >> 8), out[ip + 11] = static_cast<uint8_t>(sum);
  } else {
    h.u32(0x60000000), h.u16(static_cast<uint16_t>(8 + ib_len)), h.u8(net::kIpProtoUdp), h.u8(64);
    h.raw(f.src.gid, 16), h.raw(f.dst.gid, 16);
  }
  h.u16(static_cast<uint16_t>(0xc000 | (f.dest_qpn & 0x3fff)));  // source port: the flow
  h.u16(net::kRoceV2UdpPort);
  h.u16(static_cast<uint16_t>(8 + ib_len));
  h.u16(0);  // no UDP checksum (RoCE v2 allows it; the ICRC protects the packet)
  size_t udp = ip + ip_len;
  // Variant fields: IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label, hop limit;
  // the UDP checksum; BTH's reserved byte.
  uint8_t m[kMaxFrameHeaders];
  size_t hdr = bth + 12 - ip;
  std::memcpy(m, out + ip, hdr);
  if (v4) {
    m[1] = 0xff, m[8] = 0xff, m[10] = m[11] = 0xff;
  } else {
    m[0] |= 0x0f, m[1] = m[2] = m[3] = 0xff, m[7] = 0xff;
  }
  m[udp - ip + 6] = m[udp - ip + 7] = 0xff;
  m[bth - ip + 4] = 0xff;
  uint32_t crc = icrc(m, hdr, out + ip, o.n - ip, true);
  put_le32(o, crc);
  // IPv6 forbids a zero UDP checksum: the real one (over the pseudo-header and the datagram,
  // ICRC included; the ICRC took the field as ones, so it may change freely).
  if (!v4) {
    uint16_t sum = udp6_checksum(out + ip + 8, out + udp, o.n - udp);
    out[udp + 6] = static_cast<uint8_t>(sum >> 8), out[udp + 7] = static_cast<uint8_t>(sum);
  }
  return o.n;
}

size_t build_ib(const Frame& f, uint8_t* out) {
  Out o{out};
  o.n = 8 + (f.grh ? 40 : 0);
  size_t bth = o.n;
  transport(f, o);
  size_t words = (o.n + 4) / 4;  // LRH through ICRC
  Out h{out};
  h.u8(0x00);  // VL 0, LVer 0
  h.u8(static_cast<uint8_t>(f.sl << 4 | (f.grh ? 3 : 2)));
  h.u16(f.dst.lid);
  h.u16(static_cast<uint16_t>(words & 0x7ff));
  h.u16(f.src.lid);
  if (f.grh) {
    h.u32(0x60000000);
    h.u16(static_cast<uint16_t>(o.n - bth + 4));
    h.u8(0x1b);  // next header: IBA transport
    h.u8(64);
    h.raw(f.src.gid, 16);
    h.raw(f.dst.gid, 16);
  }
  // Variant: the VL; GRH traffic class, flow label and hop limit; BTH's reserved byte.
  uint8_t m[kMaxFrameHeaders];
  size_t hdr = bth + 12;
  std::memcpy(m, out, hdr);
  m[0] |= 0xf0;
  if (f.grh) m[8] |= 0x0f, m[9] = m[10] = m[11] = 0xff, m[15] = 0xff;
  m[bth + 4] = 0xff;
  uint32_t crc = icrc(m, hdr, out, o.n, false);
  put_le32(o, crc);
  uint16_t v = crc16_vcrc(out, o.n);
  o.u8(static_cast<uint8_t>(v)), o.u8(static_cast<uint8_t>(v >> 8));
  return o.n;
}

}  // namespace

uint32_t crc32(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kCrc32.t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

size_t build_frame(const Frame& f, uint8_t* out) {
  return f.ethernet ? build_roce(f, out) : build_ib(f, out);
}

}  // namespace emu::wire
