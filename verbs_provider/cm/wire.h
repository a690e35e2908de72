// SPDX-License-Identifier: BSD-2-Clause
// The CM messages two emulated processes exchange over their rendezvous socket (rendezvous.h),
// named after the IB CM MADs they stand for. One message is one SOCK_SEQPACKET record: the
// socket keeps the boundaries, and its closing stands for the peer's ids being destroyed (a DREQ
// when connected, a REJ while the connection is being set up), as the kernel sends when a process
// dies.
#pragma once
#include <sys/socket.h>

#include <cstdint>

namespace emu::prov::cm {

enum class MsgType : uint32_t {
  kReq = 1,  // active → passive: connect (RC) or SIDR request (UD)
  kMra,      // passive → active: the request reached a listener (stops the REQ timeout)
  kRep,      // passive → active: accepted (RC) or SIDR reply (UD)
  kRej,      // either way: rejected (reason + private data)
  kRtu,      // active → passive: ready to use
  kDreq,     // disconnect request
  kDrep,     // disconnect reply
};

// One side of a connection: where it is and what it offers.
struct Endpoint {
  uint64_t node_guid;  // host order
  uint32_t dev;
  uint8_t port;
  uint8_t link_layer;  // emu LinkLayer
  uint16_t lid;
  uint8_t gid[16];  // the GID of the address the side uses
  uint8_t mtu;      // ibv_mtu
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t flow_control;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint8_t rsvd;
  uint32_t qpn;
  uint32_t qkey;
  uint32_t psn;
  sockaddr_storage addr;  // its IP address and port
};

struct Msg {
  MsgType type;
  uint8_t reason;  // kRej: the IB CM reject reason
  uint8_t private_data_len;
  uint16_t ps;          // kReq: the port space
  Endpoint from;        // kReq, kRep: the sender
  sockaddr_storage to;  // kReq: the address the requester asked for
  uint8_t private_data[256];
};

// IB CM reject reasons the emulation produces (IBTA CM REJ).
constexpr uint8_t kRejTimeout = 4;           // the active side's id went away mid-setup
constexpr uint8_t kRejInvalidServiceId = 8;  // nobody listens on that address and port
constexpr uint8_t kRejConsumerDefined = 28;  // rdma_reject, or the passive side's id went away

// The QKey of RDMA_PS_UDP ids (librdmacm's RDMA_UDP_QKEY).
constexpr uint32_t kUdpQkey = 0x01234567;

}  // namespace emu::prov::cm
