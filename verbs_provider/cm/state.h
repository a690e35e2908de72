// SPDX-License-Identifier: BSD-2-Clause
// The RDMA CM emulation's process-local state: event channels (what /dev/infiniband/rdma_cm opens
// to) and the CM ids made on them, as the kernel's ucma keeps its ucma_file and ucma_context.
// Everything here is guarded by one mutex (cm_mutex()): CM traffic is connection setup, not the
// data path, so one lock keeps the state easy to reason about.
#pragma once
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "wire.h"

namespace emu::prov::cm {

// The numbers of the events reported (the kernel's enum rdma_cm_event_type, which librdmacm's
// rdma_cma.h repeats; that header cannot be included beside rdma_user_cm.h).
constexpr uint32_t kEvAddrResolved = 0, kEvAddrError = 1, kEvRouteResolved = 2,
                   kEvConnectRequest = 4, kEvConnectResponse = 5, kEvUnreachable = 7,
                   kEvRejected = 8, kEvEstablished = 9, kEvDisconnected = 10, kEvMulticastJoin = 12,
                   kEvTimewaitExit = 15;

// Where an id's address lives on the emulated fabric: a port of an emu device.
struct PortRef {
  bool valid = false;
  uint32_t dev = 0;
  uint8_t port = 0;  // 1-based
};

// The connection state of an id, named after the IB CM states that decide which events follow.
enum class ConnState {
  kIdle,         // created, bound or resolved; no connection attempt
  kListening,    // LISTEN done
  kReqSent,      // CONNECT sent a REQ (or SIDR REQ); waiting for REP/REJ
  kReqRcvd,      // passive side, CONNECT_REQUEST reported; waiting for ACCEPT/REJECT
  kRepSent,      // passive side accepted; waiting for RTU
  kRepRcvd,      // active side got the REP (CONNECT_RESPONSE); waiting for its ACCEPT (sends RTU)
  kEstablished,  // connected
  kDreqSent,     // DISCONNECT sent; waiting for DREP
  kTimewait,     // disconnected; TIMEWAIT_EXIT is due
  kDone,         // nothing more will happen (rejected, unreachable, timewait over, SIDR done)
};

// One event waiting for GET_EVENT, already in the kernel's response layout.
struct Event {
  uint32_t ctx_id;  // the id it is counted on (events_reported)
  uint32_t mc_id;   // the multicast join it is counted on, or 0
  rdma_ucm_event_resp resp;
};

struct Channel;

struct McJoin {
  uint32_t id;
  uint64_t uid;
  sockaddr_storage addr;
  uint32_t events_reported = 0;
};

struct Ctx {
  uint32_t id;
  uint64_t uid;
  Channel* channel;
  uint16_t ps;
  uint8_t qp_type;
  ConnState state = ConnState::kIdle;
  PortRef port;
  sockaddr_storage src{};  // bound / local address (family 0: none)
  sockaddr_storage dst{};  // the peer's address (family 0: none)
  bool bound = false;      // src names a reserved port (bind_fd holds it)
  bool route_resolved = false;
  bool ever_connected = false;  // CONNECT or a CONNECT_REQUEST: DISCONNECT is allowed
  uint8_t tos = 0;
  int ack_timeout = -1;  // RDMA_OPTION_ID_ACK_TIMEOUT (-1: the CM's default for RTS)
  bool reuseaddr = false;
  int bind_fd = -1;  // the rendezvous socket naming src:port (listens after LISTEN)
  int conn_fd = -1;  // the connection to the peer's process
  int timer_fd = -1;
  uint32_t events_reported = 0;
  // The connection's parameters once known.
  Endpoint local{};          // what this side sent (qpn, psn, conn params)
  Endpoint remote{};         // what the peer sent
  uint64_t listen_uid = 0;   // passive side: the listener's uid (CONNECT_REQUEST names it)
  uint32_t listener_id = 0;  // passive side: the listener it arrived on
  bool reported = false;     // passive side: its CONNECT_REQUEST was handed out
  std::vector<McJoin> joins;
};

struct Channel {
  int epfd;         // the fd the program holds: an epoll set, so poll/epoll/O_NONBLOCK are native
  int eventfd;      // in epfd, readable while `queue` is not empty
  uint64_t serial;  // tells this channel from a later one that reuses the fd number
  std::deque<Event> queue;
};

// Tags of the epoll entries (data.u64 = kind << 32 | ctx id).
enum class Source : uint32_t { kQueue = 0, kBind = 1, kConn = 2, kTimer = 3 };

std::mutex& cm_mutex();
std::map<uint32_t, Ctx>& ctxs();     // by id (ids are process-wide, as the kernel's idr)
std::map<int, Channel>& channels();  // by epfd
Ctx* find_ctx(uint32_t id);
uint32_t next_id();

// Event queue and epoll membership (events.cpp). Caller holds cm_mutex().
void push_event(Ctx& c, uint32_t event, int32_t status);
Event& push_event_ref(Ctx& c, uint32_t event, int32_t status);
void watch(Ctx& c, int fd, Source s);
void unwatch(Ctx& c, int fd);
void arm_timer(Ctx& c, uint32_t ms);
void disarm_timer(Ctx& c);
// Drops an id: its queued events, sockets and timer; the peer sees the socket close.
uint32_t destroy_ctx(uint32_t id);

}  // namespace emu::prov::cm
