// SPDX-License-Identifier: BSD-2-Clause
#include "addr.h"

#include <arpa/inet.h>
#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "verbs/provider.h"

namespace emu::prov::cm {
namespace {

const PortState& port_state_of(const PortRef& p) {
  return segment()->hdr()->devices[p.dev].ports[p.port - 1];
}

// The IPv4 address of `a` (host order), or false for another family.
bool ipv4_of(const sockaddr_storage& a, uint32_t* out) {
  if (a.ss_family == AF_INET) {
    *out = ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr);
    return true;
  }
  if (a.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      uint32_t v;
      std::memcpy(&v, a6.s6_addr + 12, 4);
      *out = ntohl(v);
      return true;
    }
  }
  return false;
}

// `a` as a 16-byte IPv6 (IPv4-mapped for IPv4), as RoCE GIDs carry it.
void addr_as_gid(const sockaddr_storage& a, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  uint32_t v4;
  if (ipv4_of(a, &v4)) {
    gid[10] = gid[11] = 0xff;
    uint32_t be = htonl(v4);
    std::memcpy(gid + 12, &be, 4);
  } else if (a.ss_family == AF_INET6) {
    std::memcpy(gid, reinterpret_cast<const sockaddr_in6&>(a).sin6_addr.s6_addr, 16);
  }
}

// EMU_CM_IB_ADDRS: "emuD:P=IPv4,..." (an IB port's IPoIB-style address); a port not listed
// answers to 127.0.D.P.
bool ib_port_has_addr(uint32_t dev, uint32_t port, uint32_t v4) {
  const char* env = std::getenv("EMU_CM_IB_ADDRS");
  if (env && *env) {
    std::string list(env), want = "emu" + std::to_string(dev) + ":" + std::to_string(port) + "=";
    for (size_t at = 0; at <= list.size();) {
      size_t end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      std::string item = list.substr(at, end - at);
      if (item.compare(0, want.size(), want) == 0) {
        in_addr ia{};
        return inet_pton(AF_INET, item.c_str() + want.size(), &ia) == 1 && ntohl(ia.s_addr) == v4;
      }
      at = end + 1;
    }
  }
  return v4 == (0x7f000000u | (dev << 8) | port);
}

// The GID table index of `gid` on a RoCE port, preferring RoCE v2 (what rxe's CM picks for IP).
int roce_gid_index(const PortState& ps, const uint8_t gid[16]) {
  int found = -1;
  for (int i = 0; i < ps.gid_count; ++i) {
    if (std::memcmp(ps.gid[i], gid, 16) != 0) continue;
    if (ps.gid_type[i] == kGidTypeRoceV2) return i;
    if (found < 0) found = i;
  }
  return found;
}

}  // namespace

bool is_any_addr(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr == htonl(INADDR_ANY);
  if (a.ss_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
  return true;
}

bool is_multicast(const sockaddr_storage& a) {
  uint8_t gid[16];
  addr_as_gid(a, gid);
  uint32_t v4;
  return ipv4_of(a, &v4) ? (v4 >> 28) == 0xe : gid[0] == 0xff;
}

uint16_t addr_port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

void set_addr_port(sockaddr_storage& a, uint16_t port) {
  if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(a).sin_port = htons(port);
  if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(port);
}

bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b) {
  uint8_t ga[16], gb[16];
  addr_as_gid(a, ga);
  addr_as_gid(b, gb);
  return std::memcmp(ga, gb, 16) == 0;
}

PortRef port_of_addr(const sockaddr_storage& a) {
  PortRef r;
  if (is_any_addr(a)) return r;
  const Header* h = segment()->hdr();
  uint8_t gid[16];
  addr_as_gid(a, gid);
  uint32_t v4 = 0;
  bool is_v4 = ipv4_of(a, &v4);
  for (uint32_t d = 0; d < h->num_devices; ++d) {
    for (uint32_t p = 1; p <= h->devices[d].num_ports; ++p) {
      const PortState& ps = h->devices[d].ports[p - 1];
      bool owns = ps.link_layer == kLinkLayerEthernet ? roce_gid_index(ps, gid) >= 0
                                                      : is_v4 && ib_port_has_addr(d, p, v4);
      if (owns) return PortRef{true, d, static_cast<uint8_t>(p)};
    }
  }
  return r;
}

bool is_roce(const PortRef& p) { return port_state_of(p).link_layer == kLinkLayerEthernet; }

uint64_t node_guid_be(const PortRef& p) {
  return p.valid ? htobe64(segment()->hdr()->devices[p.dev].node_guid) : 0;
}

Endpoint endpoint_of(const PortRef& p, const sockaddr_storage& a) {
  Endpoint e{};
  const PortState& ps = port_state_of(p);
  e.node_guid = segment()->hdr()->devices[p.dev].node_guid;
  e.dev = p.dev;
  e.port = p.port;
  e.link_layer = ps.link_layer;
  e.lid = ps.lid;
  e.mtu = ps.active_mtu;
  if (ps.link_layer == kLinkLayerEthernet) {
    addr_as_gid(a, e.gid);
  } else {  // an IB port's GID 0: subnet prefix + port GUID
    uint64_t pre = htobe64(ps.gid_prefix), guid = htobe64(ps.port_guid);
    std::memcpy(e.gid, &pre, 8);
    std::memcpy(e.gid + 8, &guid, 8);
  }
  e.addr = a;
  return e;
}

void fill_route(const Ctx& c, rdma_ucm_query_route_resp& r) {
  std::memset(&r, 0, sizeof r);
  r.ibdev_index = UINT32_MAX;  // librdmacm then matches the device by GUID alone
  std::memcpy(&r.src_addr, &c.src, sizeof r.src_addr);
  std::memcpy(&r.dst_addr, &c.dst, sizeof r.dst_addr);
  if (!c.port.valid) return;
  r.node_guid = node_guid_be(c.port);
  r.port_num = c.port.port;
  Endpoint me = endpoint_of(c.port, c.src);
  ib_user_path_rec& path = r.ib_route[0];
  std::memcpy(path.sgid, me.gid, 16);
  path.pkey = htobe16(0xffff);
  if (c.dst.ss_family == 0) return;
  PortRef peer = port_of_addr(c.dst);
  Endpoint them = peer.valid ? endpoint_of(peer, c.dst) : c.remote;
  std::memcpy(path.dgid, them.gid, 16);
  if (!c.route_resolved) return;
  r.num_paths = 1;
  path.slid = htobe16(me.lid);
  path.dlid = htobe16(them.lid);
  path.mtu = me.mtu;
  path.hop_limit = is_roce(c.port) ? 64 : 0;
  path.traffic_class = c.tos;
  path.numb_path = 1;
  path.mtu_selector = path.rate_selector = path.packet_life_time_selector = 2;
  path.rate = 7;  // 40 Gb/s: a number, the emulated link has no rate
  path.packet_life_time = 14;
  path.reversible = 1;
}

void fill_ah(const Ctx& c, const Endpoint& remote, ib_uverbs_ah_attr& ah) {
  std::memset(&ah, 0, sizeof ah);
  ah.port_num = c.port.port;
  ah.dlid = remote.lid;
  if (!is_roce(c.port)) return;
  const PortState& ps = port_state_of(c.port);
  Endpoint me = endpoint_of(c.port, c.src);
  int idx = roce_gid_index(ps, me.gid);
  ah.is_global = 1;
  std::memcpy(ah.grh.dgid, remote.gid, 16);
  ah.grh.sgid_index = static_cast<uint8_t>(idx < 0 ? 0 : idx);
  ah.grh.hop_limit = 64;
  ah.grh.traffic_class = c.tos;
}

int fill_qp_attr(const Ctx& c, uint32_t qp_state, ib_uverbs_qp_attr& qa) {
  std::memset(&qa, 0, sizeof qa);
  if (!c.port.valid) return EINVAL;
  qa.qp_state = qp_state;
  bool ud = c.qp_type == IBV_QPT_UD;
  switch (qp_state) {
    case IBV_QPS_INIT:
      qa.qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      qa.port_num = c.port.port;
      if (ud) {
        qa.qp_attr_mask |= IBV_QP_QKEY;
        qa.qkey = c.local.qkey ? c.local.qkey : kUdpQkey;
      } else {
        qa.qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
        qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (c.local.responder_resources)
          qa.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      }
      return 0;
    case IBV_QPS_RTR:
      qa.qp_attr_mask = IBV_QP_STATE;
      if (ud) return 0;
      if (c.state != ConnState::kReqRcvd && c.state != ConnState::kRepRcvd &&
          c.state != ConnState::kRepSent && c.state != ConnState::kEstablished)
        return EINVAL;  // no peer yet: the kernel's CM has no attributes either
      qa.qp_attr_mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      fill_ah(c, c.remote, qa.ah_attr);
      qa.path_mtu = c.remote.mtu && c.remote.mtu < c.local.mtu ? c.remote.mtu : c.local.mtu;
      qa.dest_qp_num = c.remote.qpn;
      qa.rq_psn = c.remote.psn;
      qa.max_dest_rd_atomic = c.local.responder_resources;
      // 0 (655 ms between RNR retries), as the kernel's CM gives. A requester stalled on an
      // empty receive queue retries as soon as a receive is posted there (the poster kicks it),
      // so the long timer costs nothing when receives come; programs that re-post late (pyverbs'
      // rdmacm players) get the kernel's budget, 655 ms per retry, not 10 µs.
      qa.min_rnr_timer = 0;
      return 0;
    case IBV_QPS_RTS:
      qa.qp_attr_mask = IBV_QP_STATE;
      if (ud) {
        qa.qp_attr_mask |= IBV_QP_SQ_PSN;
        return 0;
      }
      if (c.state == ConnState::kIdle || c.state == ConnState::kListening ||
          c.state == ConnState::kReqSent)
        return EINVAL;
      qa.qp_attr_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                         IBV_QP_MAX_QP_RD_ATOMIC;
      qa.timeout = c.ack_timeout >= 0 ? static_cast<uint8_t>(c.ack_timeout) : 14;
      qa.retry_cnt = c.local.retry_count;
      qa.rnr_retry = c.remote.rnr_retry_count;  // each side retries as long as its peer asked
      qa.sq_psn = c.local.psn;
      qa.max_rd_atomic = c.local.initiator_depth;
      return 0;
    default:
      return EINVAL;
  }
}

void mcast_group(const Ctx& c, const sockaddr_storage& a, uint8_t mgid[16], uint16_t* mlid) {
  uint8_t ip[16];
  addr_as_gid(a, ip);
  std::memset(mgid, 0, 16);
  if (is_roce(c.port)) {
    // RoCE: ff0e::ffff:<IPv4>, or the IPv6 group itself.
    if (ip[10] == 0xff && ip[11] == 0xff && !ip[0]) {
      mgid[0] = 0xff;
      mgid[1] = 0x0e;
      mgid[10] = mgid[11] = 0xff;
      std::memcpy(mgid + 12, ip + 12, 4);
    } else {
      std::memcpy(mgid, ip, 16);
    }
    *mlid = 0;
    return;
  }
  // IB: the IPoIB mapping of an IP group (ff12:401b:ffff::<IPv4>), and a LID from its bits.
  mgid[0] = 0xff;
  mgid[1] = 0x12;
  mgid[2] = 0x40;
  mgid[3] = 0x1b;
  mgid[4] = mgid[5] = 0xff;
  std::memcpy(mgid + 12, ip + 12, 4);
  uint32_t h = 0;
  for (int i = 0; i < 16; ++i) h = h * 31 + ip[i];
  *mlid = static_cast<uint16_t>(kMcastLidBase + h % 0x3fff);
}

}  // namespace emu::prov::cm
