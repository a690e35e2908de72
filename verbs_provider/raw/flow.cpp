// SPDX-License-Identifier: BSD-2-Clause
// Flow steering (ibv_create_flow(3)) on raw packet QPs: each rule's specs become one masked key
// (emu/raw.h) in the segment, so the engine of whichever process sends a frame steers it here.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "emu/raw.h"
#include "verbs/provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// The ibv_flow handles this process holds, by rule slot. Kept in place after a destroy (not
// freed): a second ibv_destroy_flow of the same handle finds it dead and gets EINVAL instead of
// touching freed memory.
struct EmuFlow {
  ibv_flow flow;
  EmuQp* qp;
  bool live;
};
EmuFlow g_flows[kMaxFlows];
std::mutex g_flows_mu;

// value & mask into the rule's key, field by field: a field named by two specs must agree.
void put(uint8_t* value, uint8_t* mask, const void* v, const void* m, size_t n) {
  const auto* vb = static_cast<const uint8_t*>(v);
  const auto* mb = static_cast<const uint8_t*>(m);
  for (size_t i = 0; i < n; ++i) {
    value[i] |= vb[i] & mb[i];
    mask[i] |= mb[i];
  }
}

// The addresses an IPv4 spec (plain or extended) names.
template <class Spec>
void put_ipv4(const Spec& s, FlowRule* flow) {
  put(flow->value.src_ip, flow->mask.src_ip, &s.val.src_ip, &s.mask.src_ip, 4);
  put(flow->value.dst_ip, flow->mask.dst_ip, &s.val.dst_ip, &s.mask.dst_ip, 4);
  flow->needs |= kLayerIpv4;
}

// One spec into the rule; 0, EINVAL (a size that is not the spec's), EOPNOTSUPP (a spec emu
// does not steer by: tunnels, inner headers, MPLS, ESP, tags, actions).
int add_spec(const ibv_flow_spec* spec, FlowRule* flow) {
  FrameKey& v = flow->value;
  FrameKey& m = flow->mask;
  switch (spec->hdr.type) {
    case IBV_FLOW_SPEC_ETH: {
      const ibv_flow_spec_eth& s = spec->eth;
      if (s.size != sizeof s) return EINVAL;
      put(v.dmac, m.dmac, s.val.dst_mac, s.mask.dst_mac, 6);
      put(v.smac, m.smac, s.val.src_mac, s.mask.src_mac, 6);
      put(v.ether_type, m.ether_type, &s.val.ether_type, &s.mask.ether_type, 2);
      put(v.vlan, m.vlan, &s.val.vlan_tag, &s.mask.vlan_tag, 2);
      flow->needs |= kLayerEth;
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4: {
      const ibv_flow_spec_ipv4& s = spec->ipv4;
      if (s.size != sizeof s) return EINVAL;
      put_ipv4(s, flow);
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4_EXT: {
      const ibv_flow_spec_ipv4_ext& s = spec->ipv4_ext;
      if (s.size != sizeof s) return EINVAL;
      put_ipv4(s, flow);
      put(&v.proto, &m.proto, &s.val.proto, &s.mask.proto, 1);
      put(&v.tos, &m.tos, &s.val.tos, &s.mask.tos, 1);
      put(&v.ttl, &m.ttl, &s.val.ttl, &s.mask.ttl, 1);
      put(&v.ip_flags, &m.ip_flags, &s.val.flags, &s.mask.flags, 1);
      return 0;
    }
    case IBV_FLOW_SPEC_IPV6: {
      const ibv_flow_spec_ipv6& s = spec->ipv6;
      if (s.size != sizeof s) return EINVAL;
      put(v.src_ip, m.src_ip, s.val.src_ip, s.mask.src_ip, 16);
      put(v.dst_ip, m.dst_ip, s.val.dst_ip, s.mask.dst_ip, 16);
      put(v.flow_label, m.flow_label, &s.val.flow_label, &s.mask.flow_label, 4);
      put(&v.proto, &m.proto, &s.val.next_hdr, &s.mask.next_hdr, 1);
      put(&v.tos, &m.tos, &s.val.traffic_class, &s.mask.traffic_class, 1);
      put(&v.ttl, &m.ttl, &s.val.hop_limit, &s.mask.hop_limit, 1);
      flow->needs |= kLayerIpv6;
      return 0;
    }
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
      const ibv_flow_spec_tcp_udp& s = spec->tcp_udp;
      if (s.size != sizeof s) return EINVAL;
      put(v.src_port, m.src_port, &s.val.src_port, &s.mask.src_port, 2);
      put(v.dst_port, m.dst_port, &s.val.dst_port, &s.mask.dst_port, 2);
      flow->needs |= spec->hdr.type == IBV_FLOW_SPEC_TCP ? kLayerTcp : kLayerUdp;
      return 0;
    }
    default:
      return EOPNOTSUPP;
  }
}

// The rule for attr, or an errno: what ibv_create_flow(3) and the kernel refuse.
int compile_flow(const EmuQp* qp, const ibv_flow_attr* attr, FlowRule* flow) {
  if (attr->comp_mask) return EINVAL;
  if (attr->flags) return EOPNOTSUPP;  // DONT_TRAP, EGRESS: not done
  if (attr->type > IBV_FLOW_ATTR_SNIFFER) return EINVAL;
  if (!port_is_ethernet(qp->ctx->dev, attr->port)) return EINVAL;
  // Only NORMAL rules match on headers; the default rules and sniffers take what they take.
  if (attr->type != IBV_FLOW_ATTR_NORMAL && attr->num_of_specs) return EINVAL;
  const auto* p = reinterpret_cast<const uint8_t*>(attr + 1);
  for (uint32_t i = 0; i < attr->num_of_specs; ++i) {
    const auto* spec = reinterpret_cast<const ibv_flow_spec*>(p);
    if (int e = add_spec(spec, flow)) return e;
    p += spec->hdr.size;
  }
  flow->kind = static_cast<uint8_t>(attr->type);
  flow->priority = attr->priority;
  flow->port = attr->port;
  flow->dev = qp->ctx->dev;
  return 0;
}

}  // namespace

namespace emu::prov {

ibv_flow* emu_create_flow(ibv_qp* ibqp, ibv_flow_attr* attr) {
  EmuQp* qp = to_qp(ibqp);
  if (inherited(qp)) return fail_null<ibv_flow>(EPERM);
  // The kernel steers to UD and raw packet QPs only (EINVAL for the rest); emu steers raw ones.
  if (ibqp->qp_type == IBV_QPT_UD) return fail_null<ibv_flow>(EOPNOTSUPP);
  if (ibqp->qp_type != IBV_QPT_RAW_PACKET || !attr) return fail_null<ibv_flow>(EINVAL);
  FlowRule rule{};
  if (int e = compile_flow(qp, attr, &rule)) return fail_null<ibv_flow>(e);
  Segment* seg = segment();
  uint32_t idx;
  if (create_flow(seg, &idx) != Status::ok) return fail_null<ibv_flow>(ENOMEM);
  FlowSlot& f = seg->hdr()->raw.flows[idx];
  rule.qp = qp->slot;
  f.rule = rule;
  // Last, after the rest (an engine that reads the number reads them after it): a rule with no
  // QP number is not yet one, and engines skip it.
  std::atomic_thread_fence(std::memory_order_release);
  f.rule.qpn = ibqp->qp_num;
  publish_flow(seg, f);
  qp->flows.fetch_add(1);
  std::lock_guard<std::mutex> g(g_flows_mu);
  EmuFlow& h = g_flows[idx];
  h.flow = ibv_flow{0, ibqp->context, idx};
  h.qp = qp;
  h.live = true;
  return &h.flow;
}

int emu_destroy_flow(ibv_flow* flow) {
  auto* h = reinterpret_cast<EmuFlow*>(flow);
  std::unique_lock<std::mutex> g(g_flows_mu);
  if (h < g_flows || h >= g_flows + kMaxFlows || !h->live) return EINVAL;
  h->live = false;
  EmuQp* qp = h->qp;
  g.unlock();
  Segment* seg = segment();
  free_flow(seg, seg->hdr()->raw.flows[h - g_flows]);
  qp->flows.fetch_sub(1);
  return 0;
}

bool port_is_ethernet(uint32_t dev, uint32_t port) {
  const DeviceState& d = segment()->hdr()->devices[dev];
  return port >= 1 && port <= d.num_ports && d.ports[port - 1].link_layer == kLinkLayerEthernet;
}

bool device_has_ethernet(uint32_t dev) {
  for (uint32_t p = 1; p <= kMaxPorts; ++p)
    if (port_is_ethernet(dev, p)) return true;
  return false;
}

}  // namespace emu::prov
