// SPDX-License-Identifier: BSD-2-Clause
// Raw packet steering (emu/raw.h): frame parsing, rule matching, the RSS hash, and the rules' and
// tables' slots.
#include <cstring>

#include "emu/net.h"
#include "emu/raw.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

uint16_t be16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// The L4 ports, if the frame holds them past offset `l4`.
uint8_t parse_l4(const uint8_t* f, uint32_t len, uint32_t l4, uint8_t proto, FrameKey* key) {
  if (proto != net::kIpProtoTcp && proto != net::kIpProtoUdp) return 0;
  if (l4 + 4 > len) return 0;
  std::memcpy(key->src_port, f + l4, 2);
  std::memcpy(key->dst_port, f + l4 + 2, 2);
  return proto == net::kIpProtoTcp ? kLayerTcp : kLayerUdp;
}

}  // namespace

uint8_t parse_frame(const uint8_t* f, uint32_t len, FrameKey* key) {
  std::memset(key, 0, sizeof *key);
  if (len < 14) return 0;
  std::memcpy(key->dmac, f, 6);
  std::memcpy(key->smac, f + 6, 6);
  uint32_t off = 12;
  if (be16_at(f + off) == net::kEtherTypeVlan && len >= 18) {
    std::memcpy(key->vlan, f + off + 2, 2);
    off += 4;
  }
  std::memcpy(key->ether_type, f + off, 2);
  uint16_t type = be16_at(f + off);
  off += 2;
  uint8_t layers = kLayerEth;
  if (type == net::kEtherTypeIpv4 && off + 20 <= len && (f[off] >> 4) == 4) {
    const uint8_t* ip = f + off;
    key->tos = ip[1];
    key->ip_flags = ip[6] >> 5;
    key->ttl = ip[8];
    key->proto = ip[9];
    std::memcpy(key->src_ip, ip + 12, 4);
    std::memcpy(key->dst_ip, ip + 16, 4);
    uint32_t ihl = (ip[0] & 0xf) * 4u;
    return layers | kLayerIpv4 | parse_l4(f, len, off + ihl, key->proto, key);
  }
  if (type == net::kEtherTypeIpv6 && off + 40 <= len && (f[off] >> 4) == 6) {
    const uint8_t* ip = f + off;
    key->tos = static_cast<uint8_t>((ip[0] & 0xf) << 4 | ip[1] >> 4);
    key->flow_label[1] = ip[1] & 0xf;
    key->flow_label[2] = ip[2];
    key->flow_label[3] = ip[3];
    key->proto = ip[6];
    key->ttl = ip[7];
    std::memcpy(key->src_ip, ip + 8, 16);
    std::memcpy(key->dst_ip, ip + 24, 16);
    return layers | kLayerIpv6 | parse_l4(f, len, off + 40, key->proto, key);
  }
  return layers;
}

bool flow_matches(const FlowRule& rule, const FrameKey& key, uint8_t layers) {
  if ((layers & rule.needs) != rule.needs) return false;
  const auto* k = reinterpret_cast<const uint8_t*>(&key);
  const auto* m = reinterpret_cast<const uint8_t*>(&rule.mask);
  const auto* v = reinterpret_cast<const uint8_t*>(&rule.value);
  for (uint32_t i = 0; i < sizeof(FrameKey); i += 8) {
    uint64_t kw, mw, vw;
    std::memcpy(&kw, k + i, 8);
    std::memcpy(&mw, m + i, 8);
    std::memcpy(&vw, v + i, 8);
    if ((kw & mw) != vw) return false;
  }
  return true;
}

uint32_t toeplitz(const uint8_t* key, uint32_t key_len, const uint8_t* in, uint32_t n) {
  // The 32-bit window of the key that starts at the current input bit, shifted along bit by bit.
  uint32_t hash = 0;
  uint32_t window = 0;
  for (uint32_t i = 0; i < 4; ++i) window = window << 8 | (i < key_len ? key[i] : 0);
  for (uint32_t byte = 0; byte < n; ++byte) {
    uint8_t next = byte + 4 < key_len ? key[byte + 4] : 0;
    for (int bit = 7; bit >= 0; --bit) {
      if (in[byte] >> bit & 1) hash ^= window;
      window = window << 1 | (next >> bit & 1);
    }
  }
  return hash;
}

uint32_t rss_hash(const RssSlot& rss, const FrameKey& key, uint8_t layers) {
  uint8_t in[36];
  uint32_t n = 0;
  auto add = [&](bool want, const uint8_t* p, uint32_t len) {
    if (!want) return;
    std::memcpy(in + n, p, len);
    n += len;
  };
  uint64_t f = rss.fields;
  bool v4 = layers & kLayerIpv4, v6 = layers & kLayerIpv6;
  add(v4 && (f & kRssSrcIpv4), key.src_ip, 4);
  add(v4 && (f & kRssDstIpv4), key.dst_ip, 4);
  add(v6 && (f & kRssSrcIpv6), key.src_ip, 16);
  add(v6 && (f & kRssDstIpv6), key.dst_ip, 16);
  bool tcp = layers & kLayerTcp, udp = layers & kLayerUdp;
  add((tcp && (f & kRssSrcPortTcp)) || (udp && (f & kRssSrcPortUdp)), key.src_port, 2);
  add((tcp && (f & kRssDstPortTcp)) || (udp && (f & kRssDstPortUdp)), key.dst_port, 2);
  return toeplitz(rss.key, rss.key_len, in, n);
}

bool port_mac(const PortState& port, uint8_t mac[6]) {
  for (uint32_t i = 0; i < port.gid_count; ++i) {
    const uint8_t* g = port.gid[i];
    if (g[0] != 0xfe || (g[1] & 0xc0) != 0x80 || g[11] != 0xff || g[12] != 0xfe) continue;
    mac[0] = g[8] ^ 0x02;
    mac[1] = g[9];
    mac[2] = g[10];
    mac[3] = g[13];
    mac[4] = g[14];
    mac[5] = g[15];
    return true;
  }
  return false;
}

Status create_flow(Segment* seg, uint32_t* idx) { return seg->alloc_flow(idx); }

void publish_flow(Segment* seg, FlowSlot& flow) {
  flow.uid = seg->new_uid();
  // The engine reads the rule's fields after it sees the count its store made (acquire).
  seg->hdr()->raw.live_flows.fetch_add(1, std::memory_order_release);
}

void free_flow(Segment* seg, FlowSlot& flow) {
  // An engine may be matching the rule now: it is unfindable first, its slot free only once no
  // engine can be inside.
  flow.state.store(kSlotDying, std::memory_order_release);
  if (flow.rule.qpn) seg->hdr()->raw.live_flows.fetch_sub(1, std::memory_order_relaxed);
  wait_for_engines(seg);
  flow.rule.qpn = 0;
  flow.state.store(kSlotFree, std::memory_order_release);
}

Status create_rss(Segment* seg, uint32_t* idx) { return seg->alloc_rss(idx); }

void free_rss(Segment* seg, RssSlot& rss) {
  rss.state.store(kSlotDying, std::memory_order_release);
  wait_for_engines(seg);
  rss.state.store(kSlotFree, std::memory_order_release);
}

void raw_release_proc(Segment* seg, uint32_t proc) {
  RawSteering& raw = seg->hdr()->raw;
  bool any = false;
  for (FlowSlot& f : raw.flows)
    if (f.state.load() == kSlotLive && f.owner == proc) {
      f.state.store(kSlotDying, std::memory_order_release);
      if (f.rule.qpn) raw.live_flows.fetch_sub(1, std::memory_order_relaxed);
      any = true;
    }
  for (RssSlot& r : raw.rss)
    if (r.state.load() == kSlotLive && r.owner == proc) {
      r.state.store(kSlotDying, std::memory_order_release);
      any = true;
    }
  if (!any) return;
  wait_for_engines(seg);
  for (FlowSlot& f : raw.flows)
    if (f.state.load() == kSlotDying && f.owner == proc) {
      f.rule.qpn = 0;
      f.state.store(kSlotFree, std::memory_order_release);
    }
  for (RssSlot& r : raw.rss)
    if (r.state.load() == kSlotDying && r.owner == proc) r.state.store(kSlotFree);
}

}  // namespace emu
