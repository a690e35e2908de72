// SPDX-License-Identifier: BSD-2-Clause
// The ucma commands librdmacm writes on a channel fd (rdma/rdma_user_cm.h), one handler each,
// with the kernel's errors (ucma.c, cma.c). Responses go through the user pointer in the command,
// as the kernel's copy_to_user does.
#include "commands.h"

#include <fcntl.h>
#include <sys/epoll.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "addr.h"
#include "emu/kill_point.h"
#include "knobs.h"
#include "rendezvous.h"

namespace emu::prov::cm {
namespace {

template <typename T>
void respond(uint64_t user_ptr, const T& resp, uint16_t out) {
  std::memcpy(reinterpret_cast<void*>(user_ptr), &resp, out < sizeof resp ? out : sizeof resp);
}

sockaddr_storage from_sockaddr(const void* p, size_t len) {
  sockaddr_storage a{};
  std::memcpy(&a, p, len < sizeof a ? len : sizeof a);
  return a;
}

bool ip_family(const sockaddr_storage& a) {
  return a.ss_family == AF_INET || a.ss_family == AF_INET6;
}

int do_bind(Ctx& c, sockaddr_storage a) {
  if (!ip_family(a)) return EAFNOSUPPORT;  // AF_IB: librdmacm then speaks the IP commands
  if (c.bound) return EINVAL;
  PortRef p;
  if (!is_any_addr(a)) {
    p = port_of_addr(a);
    if (!p.valid) return EADDRNOTAVAIL;
  }
  int fd = rv_bind(c.ps, a);
  if (fd < 0) return -fd;
  c.bind_fd = fd;
  c.bound = true;
  c.src = a;
  c.port = p;
  return 0;
}

// Address resolution: the destination must be an emu port's address; the source is the bound
// address or, as a route through the loopback would give, the destination's own port.
int do_resolve_addr(Ctx& c, const sockaddr_storage& src, const sockaddr_storage& dst) {
  if (!ip_family(dst)) return EAFNOSUPPORT;
  if (!c.bound && ip_family(src)) {
    if (int rc = do_bind(c, src)) return rc;
  }
  PortRef dport = port_of_addr(dst);
  // A multicast group is reached through the source's port (mckey, rdma_join_multicast):
  // the bound one, else the first port, as the default route's interface would be.
  if (is_multicast(dst)) dport = c.port.valid ? c.port : PortRef{true, 0, 1};
  c.dst = dst;
  if (!dport.valid || (c.port.valid && is_roce(c.port) != is_roce(dport))) {
    push_event(c, kEvAddrError, -EHOSTUNREACH);
    return 0;
  }
  if (!c.bound) {
    sockaddr_storage any{};
    any.ss_family = dst.ss_family;
    if (int rc = do_bind(c, any)) return rc;
  }
  if (!c.port.valid) {  // bound to the wildcard: the destination's port and address
    uint16_t port = addr_port(c.src);
    c.src = dst;
    set_addr_port(c.src, port);
    c.port = dport;
  }
  push_event(c, kEvAddrResolved, 0);
  return 0;
}

void fill_local(Ctx& c, const rdma_ucm_conn_param& p) {
  c.local = endpoint_of(c.port, c.src);
  c.local.qpn = p.qp_num & 0xffffff;
  c.local.qkey = c.qp_type == IBV_QPT_UD ? kUdpQkey : 0;
  c.local.psn = static_cast<uint32_t>(std::random_device{}()) & 0xffffff;
  c.local.responder_resources = p.responder_resources;
  c.local.initiator_depth = p.initiator_depth;
  c.local.flow_control = p.flow_control;
  c.local.retry_count = p.retry_count;
  c.local.rnr_retry_count = p.rnr_retry_count;
  c.local.srq = p.srq;
}

int do_connect(Ctx& c, const rdma_ucm_connect& cmd) {
  if (!c.route_resolved || c.state != ConnState::kIdle) return EINVAL;
  fill_local(c, cmd.conn_param);
  c.ever_connected = true;
  int fd = rv_connect(c.ps, c.dst, knob_connect_timeout_ms());
  if (fd == -ECONNREFUSED) {  // the peer's CM answers a REQ for an unknown service with a REJ
    c.state = ConnState::kDone;
    push_event_ref(c, kEvRejected, kRejInvalidServiceId).resp.param.conn.private_data_len = 148;
    return 0;
  }
  if (fd < 0) {
    c.state = ConnState::kDone;
    push_event(c, kEvUnreachable, -ETIMEDOUT);
    return 0;
  }
  Msg m{};
  m.type = MsgType::kReq;
  m.ps = c.ps;
  m.from = c.local;
  m.to = c.dst;
  m.private_data_len = cmd.conn_param.private_data_len;
  std::memcpy(m.private_data, cmd.conn_param.private_data, sizeof m.private_data);
  c.conn_fd = fd;
  watch(c, fd, Source::kConn);
  c.state = ConnState::kReqSent;
  arm_timer(c, knob_connect_timeout_ms());
  rv_send(fd, m);
  EMU_KILL_POINT(emu::KillPoint::cm_req_sent);
  return 0;
}

int do_accept(Ctx& c, const rdma_ucm_accept& cmd) {
  Msg m{};
  if (c.state == ConnState::kRepRcvd) {  // the active side's ACCEPT: send the RTU
    m.type = MsgType::kRtu;
    if (c.conn_fd >= 0) rv_send(c.conn_fd, m);
    c.state = ConnState::kEstablished;
    return 0;
  }
  if (c.state != ConnState::kReqRcvd) return EINVAL;
  if (cmd.uid) c.uid = cmd.uid;
  Endpoint keep = c.local;
  fill_local(c, cmd.conn_param);
  c.local.psn = keep.psn;
  if (!cmd.conn_param.valid) {
    c.local.responder_resources = keep.responder_resources;
    c.local.initiator_depth = keep.initiator_depth;
  }
  if (c.remote.responder_resources < c.local.initiator_depth)
    c.local.initiator_depth = c.remote.responder_resources;
  m.type = MsgType::kRep;
  m.from = c.local;
  m.private_data_len = cmd.conn_param.private_data_len;
  std::memcpy(m.private_data, cmd.conn_param.private_data, sizeof m.private_data);
  if (c.conn_fd >= 0) rv_send(c.conn_fd, m);  // a peer gone meanwhile: its close reports it
  c.state = c.qp_type == IBV_QPT_UD ? ConnState::kDone : ConnState::kRepSent;
  return 0;
}

int do_reject(Ctx& c, const rdma_ucm_reject& cmd) {
  if (c.state != ConnState::kReqRcvd && c.state != ConnState::kRepRcvd) return EINVAL;
  Msg m{};
  m.type = MsgType::kRej;
  m.reason = cmd.reason ? cmd.reason : kRejConsumerDefined;
  m.private_data_len = cmd.private_data_len;
  std::memcpy(m.private_data, cmd.private_data, sizeof cmd.private_data);
  if (c.conn_fd >= 0) rv_send(c.conn_fd, m);
  c.state = ConnState::kDone;
  return 0;
}

int do_disconnect(Ctx& c) {
  if (!c.ever_connected) return EINVAL;
  if (c.state == ConnState::kEstablished || c.state == ConnState::kRepSent ||
      c.state == ConnState::kRepRcvd) {
    Msg m{};
    m.type = MsgType::kDreq;
    if (c.conn_fd >= 0) rv_send(c.conn_fd, m);
    c.state = ConnState::kDreqSent;
  }
  return 0;  // already disconnecting: the kernel answers a DREQ with a DREP and returns 0
}

int do_listen(Ctx& c, int backlog) {
  if (!c.bound) {
    sockaddr_storage any{};
    any.ss_family = AF_INET;
    if (int rc = do_bind(c, any)) return rc;
  }
  if (c.state != ConnState::kIdle && c.state != ConnState::kListening) return EINVAL;
  if (int rc = rv_listen(c.bind_fd, backlog)) return -rc;
  if (c.state != ConnState::kListening) watch(c, c.bind_fd, Source::kBind);
  c.state = ConnState::kListening;
  return 0;
}

int do_set_option(Ctx& c, const rdma_ucm_set_option& cmd) {
  const void* val = reinterpret_cast<const void*>(cmd.optval);
  if (cmd.level == RDMA_OPTION_ID && cmd.optname == RDMA_OPTION_ID_TOS && cmd.optlen >= 1) {
    c.tos = *static_cast<const uint8_t*>(val);
    return 0;
  }
  // As rdma_set_ack_timeout: the local ACK timeout the RTS transition gets.
  if (cmd.level == RDMA_OPTION_ID && cmd.optname == RDMA_OPTION_ID_ACK_TIMEOUT && cmd.optlen >= 1) {
    c.ack_timeout = *static_cast<const uint8_t*>(val);
    return 0;
  }
  if (cmd.level == RDMA_OPTION_ID) return 0;  // REUSEADDR, AFONLY: accepted
  if (cmd.level == RDMA_OPTION_IB && cmd.optname == RDMA_OPTION_IB_PATH) {
    if (c.dst.ss_family == 0) return EINVAL;
    c.route_resolved = true;
    push_event(c, kEvRouteResolved, 0);
    return 0;
  }
  return ENOSYS;
}

int do_join(Ctx& c, uint64_t uid, const sockaddr_storage& a, uint64_t response) {
  if (!c.port.valid || !ip_family(a)) return EINVAL;
  static uint32_t next_mc = 1;
  McJoin j{next_mc++, uid, a};
  c.joins.push_back(j);
  rdma_ucm_create_id_resp r{j.id};
  respond(response, r, sizeof r);
  Event& e = push_event_ref(c, kEvMulticastJoin, 0);
  e.mc_id = j.id;
  e.resp.uid = uid;
  rdma_ucm_ud_param& ud = e.resp.param.ud;
  uint16_t mlid;
  Endpoint group{};
  mcast_group(c, a, group.gid, &mlid);
  group.lid = mlid;
  fill_ah(c, group, ud.ah_attr);
  ud.ah_attr.is_global = 1;
  std::memcpy(ud.ah_attr.grh.dgid, group.gid, 16);
  ud.ah_attr.grh.hop_limit = is_roce(c.port) ? 64 : 0;
  ud.qp_num = 0xffffff;
  ud.qkey = kUdpQkey;
  return 0;
}

int do_leave(uint32_t mc_id, uint64_t response) {
  for (auto& [id, c] : ctxs()) {
    for (auto it = c.joins.begin(); it != c.joins.end(); ++it) {
      if (it->id != mc_id) continue;
      rdma_ucm_destroy_id_resp r{it->events_reported};
      auto& q = c.channel->queue;
      for (auto e = q.begin(); e != q.end();) e = e->mc_id == mc_id ? q.erase(e) : e + 1;
      c.joins.erase(it);
      respond(response, r, sizeof r);
      return 0;
    }
  }
  return ENOENT;
}

int do_migrate(Channel& to, Ctx& c) {
  Channel& from = *c.channel;
  for (int fd : {c.bind_fd, c.conn_fd, c.timer_fd}) unwatch(c, fd);
  // Its queued events move with it, as ucma_move_events does.
  for (auto e = from.queue.begin(); e != from.queue.end();) {
    if (e->ctx_id != c.id) {
      ++e;
      continue;
    }
    c.channel = &to;
    Event moved = *e;
    e = from.queue.erase(e);
    push_event_ref(c, moved.resp.event, 0) = moved;
    c.channel = &from;
  }
  c.channel = &to;
  if (c.bind_fd >= 0 && c.state == ConnState::kListening) watch(c, c.bind_fd, Source::kBind);
  if (c.conn_fd >= 0) watch(c, c.conn_fd, Source::kConn);
  if (c.timer_fd >= 0) watch(c, c.timer_fd, Source::kTimer);
  return 0;
}

int do_create(Channel& ch, const rdma_ucm_create_id& cmd, uint16_t out) {
  if (cmd.ps != RDMA_PS_TCP && cmd.ps != RDMA_PS_UDP && cmd.ps != RDMA_PS_IPOIB &&
      cmd.ps != RDMA_PS_IB)
    return EINVAL;
  uint32_t id = next_id();
  Ctx& c = ctxs()[id];
  c.id = id;
  c.uid = cmd.uid;
  c.channel = &ch;
  c.ps = cmd.ps;
  c.qp_type = cmd.qp_type;
  rdma_ucm_create_id_resp r{id};
  respond(cmd.response, r, out);
  return 0;
}

// Every body is read as its full struct (librdmacm 44 sends them whole); a shorter one is
// zero-extended.
template <typename Cmd>
void read_body(const rdma_ucm_cmd_hdr& hdr, const uint8_t* buf, Cmd& cmd) {
  std::memset(&cmd, 0, sizeof cmd);
  std::memcpy(&cmd, buf + sizeof hdr, hdr.in < sizeof cmd ? hdr.in : sizeof cmd);
}

// Reads the body of a command naming an id and runs `fn` on that id (ENOENT for an unknown one).
template <typename Cmd, typename Fn>
int on_id(const rdma_ucm_cmd_hdr& hdr, const uint8_t* buf, Fn fn) {
  Cmd cmd;
  read_body(hdr, buf, cmd);
  Ctx* c = find_ctx(cmd.id);
  return c ? fn(*c, cmd) : ENOENT;
}

}  // namespace

// The ucma commands librdmacm writes, each read and handed to its handler: a dispatch table.
int command(Channel& ch, const rdma_ucm_cmd_hdr& hdr, const uint8_t* buf) {
  using Addr = sockaddr_storage;
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: {
      rdma_ucm_create_id cmd;
      read_body(hdr, buf, cmd);
      return do_create(ch, cmd, hdr.out);
    }
    case RDMA_USER_CM_CMD_DESTROY_ID:
      return on_id<rdma_ucm_destroy_id>(hdr, buf, [&](Ctx& c, auto& cmd) {
        rdma_ucm_destroy_id_resp r{destroy_ctx(c.id)};
        respond(cmd.response, r, hdr.out);
        return 0;
      });
    case RDMA_USER_CM_CMD_BIND_IP:
      return on_id<rdma_ucm_bind_ip>(hdr, buf, [](Ctx& c, auto& cmd) {
        return do_bind(c, from_sockaddr(&cmd.addr, sizeof cmd.addr));
      });
    case RDMA_USER_CM_CMD_BIND:
      return on_id<rdma_ucm_bind>(hdr, buf, [](Ctx& c, auto& cmd) {
        return do_bind(c, from_sockaddr(&cmd.addr, cmd.addr_size));
      });
    case RDMA_USER_CM_CMD_RESOLVE_IP:
      return on_id<rdma_ucm_resolve_ip>(hdr, buf, [](Ctx& c, auto& cmd) {
        Addr src = from_sockaddr(&cmd.src_addr, sizeof cmd.src_addr);
        return do_resolve_addr(c, src, from_sockaddr(&cmd.dst_addr, sizeof cmd.dst_addr));
      });
    case RDMA_USER_CM_CMD_RESOLVE_ADDR:
      return on_id<rdma_ucm_resolve_addr>(hdr, buf, [](Ctx& c, auto& cmd) {
        Addr src = from_sockaddr(&cmd.src_addr, cmd.src_size);
        return do_resolve_addr(c, src, from_sockaddr(&cmd.dst_addr, cmd.dst_size));
      });
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
      return on_id<rdma_ucm_resolve_route>(hdr, buf, [](Ctx& c, auto&) {
        if (c.dst.ss_family == 0 || !c.port.valid) return EINVAL;
        c.route_resolved = true;
        push_event(c, kEvRouteResolved, 0);
        return 0;
      });
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      return on_id<rdma_ucm_query>(hdr, buf, [&](Ctx& c, auto& cmd) {
        rdma_ucm_query_route_resp r;
        fill_route(c, r);
        respond(cmd.response, r, hdr.out);
        return 0;
      });
    case RDMA_USER_CM_CMD_CONNECT:
      return on_id<rdma_ucm_connect>(hdr, buf, do_connect);
    case RDMA_USER_CM_CMD_LISTEN:
      return on_id<rdma_ucm_listen>(
          hdr, buf, [](Ctx& c, auto& cmd) { return do_listen(c, static_cast<int>(cmd.backlog)); });
    case RDMA_USER_CM_CMD_ACCEPT:
      return on_id<rdma_ucm_accept>(hdr, buf, do_accept);
    case RDMA_USER_CM_CMD_REJECT:
      return on_id<rdma_ucm_reject>(hdr, buf, do_reject);
    case RDMA_USER_CM_CMD_DISCONNECT:
      return on_id<rdma_ucm_disconnect>(hdr, buf, [](Ctx& c, auto&) { return do_disconnect(c); });
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
      return on_id<rdma_ucm_init_qp_attr>(hdr, buf, [&](Ctx& c, auto& cmd) {
        ib_uverbs_qp_attr r;
        int rc = fill_qp_attr(c, cmd.qp_state, r);
        if (rc == 0) respond(cmd.response, r, hdr.out);
        return rc;
      });
    case RDMA_USER_CM_CMD_SET_OPTION:
      return on_id<rdma_ucm_set_option>(hdr, buf, do_set_option);
    case RDMA_USER_CM_CMD_NOTIFY:
      return 0;
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
      return on_id<rdma_ucm_join_ip_mcast>(hdr, buf, [](Ctx& c, auto& cmd) {
        return do_join(c, cmd.uid, from_sockaddr(&cmd.addr, sizeof cmd.addr), cmd.response);
      });
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      return on_id<rdma_ucm_join_mcast>(hdr, buf, [](Ctx& c, auto& cmd) {
        return do_join(c, cmd.uid, from_sockaddr(&cmd.addr, cmd.addr_size), cmd.response);
      });
    case RDMA_USER_CM_CMD_LEAVE_MCAST: {
      rdma_ucm_destroy_id cmd;  // the join's id in place of a CM id
      read_body(hdr, buf, cmd);
      return do_leave(cmd.id, cmd.response);
    }
    case RDMA_USER_CM_CMD_MIGRATE_ID:
      return on_id<rdma_ucm_migrate_id>(hdr, buf, [&](Ctx& c, auto& cmd) {
        if (c.channel->epfd != static_cast<int>(cmd.fd)) return ENOENT;
        do_migrate(ch, c);
        rdma_ucm_migrate_resp r{c.events_reported};
        respond(cmd.response, r, hdr.out);
        return 0;
      });
    default:
      return ENOSYS;  // QUERY (AF_IB only), GET_OPTION: librdmacm then keeps to the IP commands
  }
}

}  // namespace emu::prov::cm
