// SPDX-License-Identifier: BSD-2-Clause
// Raw packet QPs' steering, the device's side: what a frame carries (its headers as a FrameKey),
// whether a flow rule takes it, the Toeplitz hash of receive-side scaling, and the life of the
// rules and RSS tables in the segment (emu/raw_layout.h). No verbs types: the verbs edge
// (verbs_provider/raw/flow.cpp, wq.cpp) translates ibv_flow_spec_* and rx_hash_conf into these.
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

// ibv_rx_hash_fields' numbering (the ones emu hashes over).
enum RssField : uint64_t {
  kRssSrcIpv4 = 1u << 0,
  kRssDstIpv4 = 1u << 1,
  kRssSrcIpv6 = 1u << 2,
  kRssDstIpv6 = 1u << 3,
  kRssSrcPortTcp = 1u << 4,
  kRssDstPortTcp = 1u << 5,
  kRssSrcPortUdp = 1u << 6,
  kRssDstPortUdp = 1u << 7,
};
constexpr uint64_t kRssFieldsKnown = 0xff;

// The headers of the frame [f, f + len): FrameLayer bits, the fields in *key (the rest zero).
// Reads at most kFrameHeadBytes. A VLAN tag (0x8100) is skipped, its TCI kept.
constexpr uint32_t kFrameHeadBytes = 14 + 4 + 40 + 20;
uint8_t parse_frame(const uint8_t* f, uint32_t len, FrameKey* key);

// The rule's specs all match: the frame carries the layers they name and every masked field
// agrees.
bool flow_matches(const FlowRule& rule, const FrameKey& key, uint8_t layers);

// The Toeplitz hash of `in` under `key` (Microsoft's RSS hash, as mlx5 computes it).
uint32_t toeplitz(const uint8_t* key, uint32_t key_len, const uint8_t* in, uint32_t n);
// The hash of a frame's fields that the RSS QP names (addresses, then ports: source first).
uint32_t rss_hash(const RssSlot& rss, const FrameKey& key, uint8_t layers);

// A RoCE port's MAC, read back from its link-local GID (the interface's EUI-64). false: none.
bool port_mac(const PortState& port, uint8_t mac[6]);

// Rules and RSS tables: claimed live and owned by this process (a death from then on is the
// sweep's to clean up), filled by the caller, then published with publish_flow.
Status create_flow(Segment* seg, uint32_t* idx);
void publish_flow(Segment* seg, FlowSlot& flow);
void free_flow(Segment* seg, FlowSlot& flow);
Status create_rss(Segment* seg, uint32_t* idx);
void free_rss(Segment* seg, RssSlot& rss);
// A dead process's rules and tables (the sweep of the dead).
void raw_release_proc(Segment* seg, uint32_t proc);

}  // namespace emu
