// SPDX-License-Identifier: BSD-2-Clause
// IP addressing of emu ports for the RDMA CM: which port owns an address, and what the kernel's
// address and route resolution would report for it (GIDs, path record, address vector, the QP
// attributes of INIT_QP_ATTR).
//  - A RoCE port owns the addresses of its interface: the IP-based GIDs of its GID table.
//  - An InfiniBand port owns IPoIB-style addresses: EMU_CM_IB_ADDRS, by default 127.0.D.P for
//    port P of device emuD (so emu0 port 1 answers to 127.0.0.1 and rping works out of the box).
#pragma once
#include <rdma/ib_user_verbs.h>
#include <sys/socket.h>

#include <cstdint>

#include "state.h"

namespace emu::prov::cm {

bool is_any_addr(const sockaddr_storage& a);
bool is_multicast(const sockaddr_storage& a);
uint16_t addr_port(const sockaddr_storage& a);  // host order
void set_addr_port(sockaddr_storage& a, uint16_t port);
bool same_ip(const sockaddr_storage& a, const sockaddr_storage& b);

// The port that owns IP address `a` (RoCE ports first, then IB ports' IPoIB addresses).
PortRef port_of_addr(const sockaddr_storage& a);

// This side's endpoint on `p` for local address `a`: GUIDs, LID, the GID standing for `a`.
Endpoint endpoint_of(const PortRef& p, const sockaddr_storage& a);
uint64_t node_guid_be(const PortRef& p);
bool is_roce(const PortRef& p);

// QUERY_ROUTE's answer for an id.
void fill_route(const Ctx& c, rdma_ucm_query_route_resp& r);
// The address vector that reaches `remote` from the local endpoint (kernel layout).
void fill_ah(const Ctx& c, const Endpoint& remote, ib_uverbs_ah_attr& ah);
// INIT_QP_ATTR: what librdmacm passes to ibv_modify_qp for `qp_state`. Returns an errno or 0.
int fill_qp_attr(const Ctx& c, uint32_t qp_state, ib_uverbs_qp_attr& qa);
// A multicast address's group: MGID and MLID as the kernel derives them for the port's link.
void mcast_group(const Ctx& c, const sockaddr_storage& a, uint8_t mgid[16], uint16_t* mlid);

}  // namespace emu::prov::cm
