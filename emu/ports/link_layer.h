// SPDX-License-Identifier: BSD-2-Clause
// What a port is on each link layer: an InfiniBand port (LID, GID 0 = subnet prefix + port GUID)
// or a RoCE port bound to a network interface (no LID, GIDs from the interface's addresses), and
// the GID lookup that routing by GID needs.
#pragma once
#include <cstdint>
#include <cstring>

#include "emu/layout.h"
#include "ports/netdev.h"

namespace emu {

// An InfiniBand port: LID `lid`, one GID (fe80::/64 + the port GUID), ACTIVE, MTU 4096.
void init_ib_port(PortState* ps, uint64_t node_guid, uint32_t port, uint16_t lid);

// A RoCE port bound to `nd`, with the GID table soft-RoCE builds for it: 0 and 1 the link-local
// fe80::/64 address made from the MAC (modified EUI-64) as RoCE v1 and v2, then each IPv4 address
// as ::ffff:a.b.c.d (v1, v2), then each IPv6 address not already there (v1, v2), as long as the
// table has room. ACTIVE when the interface is up with carrier.
void init_roce_port(PortState* ps, uint64_t node_guid, uint32_t port, const Netdev& nd);

// A RoCE port whose interface could not be read: DOWN, no GIDs.
void init_roce_port_down(PortState* ps, uint64_t node_guid, uint32_t port);

// The largest IB MTU whose packets, with the RoCE v2 headers around them, fit in an interface
// MTU of `netdev_mtu` bytes (ibv_mtu numbering; at least IBV_MTU_256).
uint8_t roce_active_mtu(uint32_t netdev_mtu);

// Index of `gid` (16 bytes, network order) with type `type` in the port's table, or -1.
inline int port_gid_index(const PortState& ps, const uint8_t* gid, uint8_t type) {
  for (uint32_t i = 0; i < ps.gid_count && i < kGidTableLen; ++i)
    if (ps.gid_type[i] == type && std::memcmp(ps.gid[i], gid, 16) == 0) return static_cast<int>(i);
  return -1;
}

}  // namespace emu
