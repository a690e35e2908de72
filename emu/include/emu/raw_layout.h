// SPDX-License-Identifier: BSD-2-Clause
// Raw packet steering's shared state: the flow rules of every raw packet QP on the fabric and the
// receive-side scaling (RSS) of the QPs made with a hash over an indirection table. Plain data in
// the segment (layout.h embeds it in the Header) so that whichever process's engine sends a frame
// steers it to the QPs of every process; the matching is emu/raw.h, the engine's part
// emu/device/engine_raw.cpp.
#pragma once
#include <atomic>
#include <cstdint>

namespace emu {

constexpr uint32_t kMaxFlows = 256;
constexpr uint32_t kMaxRssQps = 64;
constexpr uint32_t kRssLogTableMax = 6;  // an indirection table has at most 64 entries
constexpr uint32_t kRssKeyMax = 40;      // the Toeplitz key (mlx5's length)
// The largest frame a raw packet QP sends: a jumbo frame with a VLAN tag.
constexpr uint32_t kMaxRawFrame = 9216 + 18;

// The header fields a flow can match, each in the byte order of the wire, at fixed places so a
// match is a masked compare of the whole key. Addresses: IPv4 in the first four bytes.
struct FrameKey {
  uint8_t dmac[6];
  uint8_t smac[6];
  uint8_t ether_type[2];
  uint8_t vlan[2];
  uint8_t src_ip[16];
  uint8_t dst_ip[16];
  uint8_t flow_label[4];  // IPv6 (20 bits)
  uint8_t proto;          // IPv4 protocol / IPv6 next header
  uint8_t tos;            // IPv4 TOS / IPv6 traffic class
  uint8_t ttl;            // IPv4 TTL / IPv6 hop limit
  uint8_t ip_flags;       // IPv4 flags (3 bits)
  uint8_t src_port[2];
  uint8_t dst_port[2];
  uint8_t rsvd[4];  // the key is compared 8 bytes at a time
};
static_assert(sizeof(FrameKey) == 64);

// Which headers a frame carries (a flow names the ones its specs need).
enum FrameLayer : uint8_t {
  kLayerEth = 1,
  kLayerIpv4 = 2,
  kLayerIpv6 = 4,
  kLayerTcp = 8,
  kLayerUdp = 16,
};

// ibv_flow_attr_type's numbering.
enum FlowKind : uint8_t {
  kFlowNormal = 0,
  kFlowAllDefault = 1,
  kFlowMcDefault = 2,
  kFlowSniffer = 3,
};

// What a rule takes and where it steers it.
struct FlowRule {
  uint32_t qp;   // the QpSlot index of the raw packet QP it steers to
  uint32_t qpn;  // that QP's number (0: not yet a rule; a stale one finds no QP)
  uint32_t dev;
  uint8_t port;
  uint8_t kind;   // FlowKind
  uint8_t needs;  // FrameLayer bits the frame must carry
  uint8_t rsvd;
  uint16_t priority;  // lower wins among NORMAL rules of a port
  uint16_t rsvd2;
  FrameKey value;  // already masked
  FrameKey mask;
};

struct FlowSlot {
  std::atomic<uint32_t> state;  // SlotState
  uint32_t owner;               // the process that made it
  uint64_t uid;
  FlowRule rule;
};

// The hash of an RSS QP and the receive WQs (their QpSlot indices) its table names.
struct RssSlot {
  std::atomic<uint32_t> state;  // SlotState
  uint32_t owner;
  uint64_t fields;  // ibv_rx_hash_fields bits
  uint32_t log_size;
  uint32_t key_len;
  uint8_t key[kRssKeyMax];
  uint32_t wq[1u << kRssLogTableMax];
  uint32_t wq_qpn[1u << kRssLogTableMax];
};

struct RawSteering {
  std::atomic<uint32_t> live_flows;  // 0: a send scans nothing
  uint32_t rsvd;
  FlowSlot flows[kMaxFlows];
  RssSlot rss[kMaxRssQps];
};

}  // namespace emu
