// SPDX-License-Identifier: BSD-2-Clause
#include "ports/link_layer.h"

#include <endian.h>

#include <cstdio>
#include <cstring>

namespace emu {
namespace {

constexpr uint8_t kPortActive = 4;  // ibv_port_state
constexpr uint8_t kPortDown = 1;
constexpr uint8_t kMtu256 = 1;  // ibv_mtu
constexpr uint8_t kMtu4096 = 5;

// Bytes a RoCE v2 packet carries around its payload at most: IPv6/GRH (40), UDP (8), BTH (12),
// XRC extension (4), AtomicETH (28) and the ICRC (4). The payload MTU must leave room for them.
constexpr uint32_t kRoceHeaderBytes = 40 + 8 + 12 + 4 + 28 + 4;

void add_gid_pair(PortState* ps, const uint8_t* gid) {
  for (uint8_t type : {kGidTypeRoceV1, kGidTypeRoceV2}) {
    if (ps->gid_count >= kGidTableLen) return;
    std::memcpy(ps->gid[ps->gid_count], gid, 16);
    ps->gid_type[ps->gid_count] = type;
    ++ps->gid_count;
  }
}

void clear_port(PortState* ps, uint64_t node_guid, uint32_t port) {
  std::memset(ps, 0, sizeof *ps);
  ps->gid_prefix = 0xfe80000000000000ull;
  ps->port_guid = node_guid | port;
}

}  // namespace

void init_ib_port(PortState* ps, uint64_t node_guid, uint32_t port, uint16_t lid) {
  clear_port(ps, node_guid, port);
  ps->lid = lid;
  ps->state = kPortActive;
  ps->link_layer = kLinkLayerIb;
  ps->active_mtu = kMtu4096;
  ps->gid_tbl_len = kIbGidTableLen;
  uint64_t prefix = htobe64(ps->gid_prefix), guid = htobe64(ps->port_guid);
  std::memcpy(ps->gid[0], &prefix, 8);
  std::memcpy(ps->gid[0] + 8, &guid, 8);
  ps->gid_type[0] = kGidTypeIb;
  ps->gid_count = 1;
}

void init_roce_port_down(PortState* ps, uint64_t node_guid, uint32_t port) {
  clear_port(ps, node_guid, port);
  ps->state = kPortDown;
  ps->link_layer = kLinkLayerEthernet;
  ps->active_mtu = kMtu4096;
  ps->gid_tbl_len = kGidTableLen;
}

void init_roce_port(PortState* ps, uint64_t node_guid, uint32_t port, const Netdev& nd) {
  init_roce_port_down(ps, node_guid, port);
  ps->state = nd.up ? kPortActive : kPortDown;
  ps->active_mtu = roce_active_mtu(nd.mtu);
  ps->ndev_ifindex = nd.ifindex;
  std::snprintf(ps->ndev_name, sizeof ps->ndev_name, "%s", nd.name.c_str());

  // The default GID: fe80::/64 and the MAC as a modified EUI-64 (ff:fe in the middle, the
  // universal/local bit inverted), which is also the interface's own IPv6 link-local address.
  uint8_t gid[16] = {0xfe, 0x80};
  gid[8] = nd.mac[0] ^ 0x02;
  gid[9] = nd.mac[1];
  gid[10] = nd.mac[2];
  gid[11] = 0xff;
  gid[12] = 0xfe;
  gid[13] = nd.mac[3];
  gid[14] = nd.mac[4];
  gid[15] = nd.mac[5];
  add_gid_pair(ps, gid);
  for (const auto& v4 : nd.ipv4) {
    uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(mapped + 12, v4.data(), 4);
    add_gid_pair(ps, mapped);
  }
  for (const auto& v6 : nd.ipv6)
    if (port_gid_index(*ps, v6.data(), kGidTypeRoceV1) < 0) add_gid_pair(ps, v6.data());
}

uint8_t roce_active_mtu(uint32_t netdev_mtu) {
  uint32_t room = netdev_mtu > kRoceHeaderBytes ? netdev_mtu - kRoceHeaderBytes : 0;
  for (uint8_t code = kMtu4096; code > kMtu256; --code)
    if (room >= (128u << code)) return code;
  return kMtu256;
}

}  // namespace emu
