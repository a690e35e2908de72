// SPDX-License-Identifier: BSD-2-Clause
// What arrives from other processes — a connection on a listener, CM messages, a peer's socket
// closing — and the timers, turned into the events the kernel's CM reports for them (cma.c's
// cma_ib_handler and cma_req_handler), and GET_EVENT, which hands the events out.
#include "peer.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "addr.h"
#include "emu/config.h"
#include "emu/device.h"
#include "emu/kill_point.h"
#include "knobs.h"
#include "rendezvous.h"
#include "verbs/provider.h"

namespace emu::prov::cm {
namespace {

// The private-data sizes the kernel reports (the IB CM MADs' fields, less the CMA header on a
// REQ), whatever the peer sent: programs see the same lengths as on hardware.
constexpr uint8_t kReqPrivate = 56, kRepPrivate = 196, kRejPrivate = 148, kSidrReqPrivate = 180,
                  kSidrRepPrivate = 136, kRtuPrivate = 224, kDreqPrivate = 220;

void copy_private(rdma_ucm_conn_param& p, const Msg& m, uint8_t len) {
  std::memcpy(p.private_data, m.private_data, m.private_data_len);
  p.private_data_len = len;
}

// A REQ or REP as the connection parameters of an event.
void copy_conn(rdma_ucm_conn_param& p, const Msg& m, uint8_t len) {
  p.qp_num = m.from.qpn;
  p.responder_resources = m.from.responder_resources;
  p.initiator_depth = m.from.initiator_depth;
  p.flow_control = m.from.flow_control;
  p.retry_count = m.from.retry_count;
  p.rnr_retry_count = m.from.rnr_retry_count;
  p.srq = m.from.srq;
  copy_private(p, m, len);
}

// A SIDR message as the UD parameters of an event: how to reach the sender's QP.
void copy_ud(const Ctx& c, const Msg& m, rdma_ucm_ud_param& ud, uint8_t len) {
  ud.qp_num = m.from.qpn;
  ud.qkey = m.from.qkey;
  fill_ah(c, m.from, ud.ah_attr);
  std::memcpy(ud.private_data, m.private_data, m.private_data_len);
  ud.private_data_len = len;
}

void enter_timewait(Ctx& c) {
  c.state = ConnState::kTimewait;
  arm_timer(c, knob_timewait_ms());
}

void close_conn(Ctx& c) {
  if (c.conn_fd < 0) return;
  unwatch(c, c.conn_fd);
  close(c.conn_fd);
  c.conn_fd = -1;
}

void send_simple(Ctx& c, MsgType t, uint8_t reason = 0) {
  Msg m{};
  m.type = t;
  m.reason = reason;
  if (c.conn_fd >= 0) rv_send(c.conn_fd, m);
}

// A REQ reached a connection accepted on a listener: report CONNECT_REQUEST, or refuse it.
void on_req(Ctx& c, const Msg& m) {
  Ctx* lis = find_ctx(c.listener_id);
  PortRef port = lis && lis->port.valid ? lis->port : port_of_addr(m.to);
  if (!lis || !port.valid || m.ps != lis->ps) {
    send_simple(c, MsgType::kRej, kRejInvalidServiceId);
    destroy_ctx(c.id);
    return;
  }
  c.ps = lis->ps;
  c.qp_type = lis->qp_type;
  c.port = port;
  c.src = m.to;
  c.dst = m.from.addr;
  c.remote = m.from;
  c.local = endpoint_of(port, c.src);
  c.local.psn = static_cast<uint32_t>(std::random_device{}()) & 0xffffff;
  c.local.responder_resources = m.from.initiator_depth;
  c.local.initiator_depth = m.from.responder_resources;
  c.local.retry_count = m.from.retry_count;
  c.route_resolved = true;
  c.ever_connected = true;
  c.state = ConnState::kReqRcvd;
  send_simple(c, MsgType::kMra);
  Event& e = push_event_ref(c, kEvConnectRequest, 0);
  e.ctx_id = lis->id;  // counted on the listener, as ucma does
  e.resp.uid = lis->uid;
  if (c.qp_type == IBV_QPT_UD) return copy_ud(c, m, e.resp.param.ud, kSidrReqPrivate);
  copy_conn(e.resp.param.conn, m, kReqPrivate);
  // The passive side reads the requester's offer from its own end, as cma_set_req_event_data.
  std::swap(e.resp.param.conn.responder_resources, e.resp.param.conn.initiator_depth);
}

void on_rep(Ctx& c, const Msg& m) {
  disarm_timer(c);
  c.remote = m.from;
  if (c.qp_type == IBV_QPT_UD) {  // SIDR REP: the peer's QP is known; nothing stays connected
    copy_ud(c, m, push_event_ref(c, kEvEstablished, 0).resp.param.ud, kSidrRepPrivate);
    c.state = ConnState::kDone;
    close_conn(c);
    return;
  }
  c.state = ConnState::kRepRcvd;
  // Each side's RDMA read depth is capped by what the other offers.
  if (m.from.responder_resources < c.local.initiator_depth)
    c.local.initiator_depth = m.from.responder_resources;
  copy_conn(push_event_ref(c, kEvConnectResponse, 0).resp.param.conn, m, kRepPrivate);
}

void on_rej(Ctx& c, const Msg& m) {
  disarm_timer(c);
  c.state = ConnState::kDone;
  Event& e = push_event_ref(c, kEvRejected, m.reason);
  copy_private(e.resp.param.conn, m, kRejPrivate);
  close_conn(c);
}

// A peer that died may have been inside the engine, delivering a message to this side's QP: its
// completion or event is finished first, so that what the dead delivered is signalled before its
// disconnect is reported, as on hardware, where the NIC placed it long before the DREQ came.
void finish_for_the_dead(const Ctx& c) {
  Segment* seg = segment();
  QpSlot* qp = c.local.qpn ? seg->find_qp(c.local.qpn) : nullptr;
  if (qp && qp->owner == seg->self()) device_finish_for_the_dead(*qp);
}

// The peer's socket closed: its process destroyed the id or died, and the kernel's CM would have
// sent what destroying an id sends in that state.
void on_gone(Ctx& c) {
  log("cm: id %u state %d peer gone", c.id, static_cast<int>(c.state));
  finish_for_the_dead(c);
  close_conn(c);
  switch (c.state) {
    case ConnState::kReqSent:
    case ConnState::kRepRcvd:
      disarm_timer(c);
      c.state = ConnState::kDone;
      push_event(c, kEvRejected, kRejConsumerDefined);
      break;
    case ConnState::kReqRcvd:
    case ConnState::kRepSent:
      c.state = ConnState::kDone;
      push_event(c, kEvRejected, kRejTimeout);
      break;
    case ConnState::kEstablished:
    case ConnState::kDreqSent:
      push_event(c, kEvDisconnected, 0);
      enter_timewait(c);
      break;
    default:
      break;
  }
}

void on_msg(Ctx& c, const Msg& m) {
  log("cm: id %u state %d message %u", c.id, static_cast<int>(c.state),
      static_cast<uint32_t>(m.type));
  switch (m.type) {
    case MsgType::kReq:
      if (c.state == ConnState::kIdle && !c.reported) on_req(c, m);
      break;
    case MsgType::kMra:
      if (c.state == ConnState::kReqSent) disarm_timer(c);
      break;
    case MsgType::kRep:
      if (c.state == ConnState::kReqSent) on_rep(c, m);
      break;
    case MsgType::kRej:
      on_rej(c, m);
      break;
    case MsgType::kRtu:
      if (c.state != ConnState::kRepSent) break;
      c.state = ConnState::kEstablished;
      EMU_KILL_POINT(emu::KillPoint::cm_established);
      push_event_ref(c, kEvEstablished, 0).resp.param.conn.private_data_len = kRtuPrivate;
      break;
    case MsgType::kDreq:
      if (c.state != ConnState::kEstablished && c.state != ConnState::kDreqSent &&
          c.state != ConnState::kRepSent)
        break;
      send_simple(c, MsgType::kDrep);
      push_event_ref(c, kEvDisconnected, 0).resp.param.conn.private_data_len = kDreqPrivate;
      enter_timewait(c);
      break;
    case MsgType::kDrep:
      if (c.state != ConnState::kDreqSent) break;
      push_event(c, kEvDisconnected, 0);
      enter_timewait(c);
      break;
  }
}

void on_timer(Ctx& c) {
  uint64_t v;
  if (::read(c.timer_fd, &v, sizeof v) != sizeof v) return;
  if (c.state == ConnState::kReqSent) {  // no listener ever answered: cma's REQ_ERROR
    c.state = ConnState::kDone;
    close_conn(c);
    push_event(c, kEvUnreachable, -ETIMEDOUT);
  } else if (c.state == ConnState::kTimewait) {
    c.state = ConnState::kDone;
    close_conn(c);
    push_event(c, kEvTimewaitExit, 0);
  }
}

// A connection arrived on a listener: an id for it, reported once its REQ is read.
void on_accept(Ctx& lis) {
  for (;;) {
    int fd = accept4(lis.bind_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    uint32_t id = next_id();
    Ctx& c = ctxs()[id];
    c.id = id;
    c.uid = 0;  // the program names it at ACCEPT
    c.channel = lis.channel;
    c.ps = lis.ps;
    c.qp_type = lis.qp_type;
    c.listener_id = lis.id;
    c.listen_uid = lis.uid;
    c.conn_fd = fd;
    watch(c, fd, Source::kConn);
  }
}

void service(uint64_t tag) {
  auto src = static_cast<Source>(tag >> 32);
  Ctx* c = find_ctx(static_cast<uint32_t>(tag));
  if (!c) return;
  if (src == Source::kBind) return on_accept(*c);
  if (src == Source::kTimer) return on_timer(*c);
  if (src != Source::kConn || c->conn_fd < 0) return;
  uint32_t id = c->id;
  for (int i = 0; i < 16; ++i) {  // a few messages per turn; the rest stay readable
    Msg m;
    RecvResult r = rv_recv(c->conn_fd, m);
    if (r == RecvResult::kAgain) return;
    if (r == RecvResult::kGone) return on_gone(*c);
    on_msg(*c, m);
    c = find_ctx(id);  // a refused REQ destroys its id
    if (!c || c->conn_fd < 0) return;
  }
}

// Turns whatever is ready in the channel's epoll set into queued events (no waiting).
void drain_sources(Channel& ch) {
  epoll_event evs[16];
  for (;;) {
    int n = epoll_wait(ch.epfd, evs, 16, 0);
    bool progressed = false;
    for (int i = 0; i < n; ++i) {
      if ((evs[i].data.u64 >> 32) == static_cast<uint32_t>(Source::kQueue)) continue;
      service(evs[i].data.u64);
      progressed = true;
    }
    if (n < 16 || !progressed) return;
  }
}

}  // namespace

int get_event(int fd, rdma_ucm_event_resp* out, bool nonblock) {
  std::unique_lock<std::mutex> lk(cm_mutex());
  uint64_t serial = 0;
  for (;;) {
    auto it = channels().find(fd);
    if (it == channels().end() || (serial && it->second.serial != serial)) {
      if (!serial) return EBADF;
      // Closed while this thread waited in it: the kernel's file lives on in the blocked
      // write(), which never returns, and the program is tearing down. Wait as it would.
      lk.unlock();
      for (;;) pause();
    }
    Channel& ch = it->second;
    serial = ch.serial;
    drain_sources(ch);
    if (!ch.queue.empty()) {
      Event e = ch.queue.front();
      ch.queue.pop_front();
      if (ch.queue.empty()) {
        uint64_t v;
        (void)!::read(ch.eventfd, &v, sizeof v);
      }
      if (Ctx* c = find_ctx(e.ctx_id)) ++c->events_reported;
      if (e.resp.event == kEvConnectRequest)
        if (Ctx* c = find_ctx(e.resp.id)) c->reported = true;  // the program owns it now
      if (e.mc_id)
        if (Ctx* c = find_ctx(e.ctx_id))
          for (McJoin& j : c->joins)
            if (j.id == e.mc_id) ++j.events_reported;
      std::memcpy(out, &e.resp, sizeof e.resp);
      return 0;
    }
    if (nonblock) return EAGAIN;
    // Wait without the lock: other threads may post commands meanwhile.
    int epfd = ch.epfd;
    lk.unlock();
    pollfd p{epfd, POLLIN, 0};
    int rc = poll(&p, 1, -1);
    lk.lock();
    if (rc < 0 && errno != EINTR) return errno;
  }
}

}  // namespace emu::prov::cm
