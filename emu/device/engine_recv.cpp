// SPDX-License-Identifier: BSD-2-Clause
// The responder's receive side: taking receive WQEs from a QP's own receive queue or from the
// shared receive queue it is attached to, and UD delivery (address vectors, Q_Keys, the GRH,
// multicast). Both run in whichever process's engine executes the sender's WQE.
#include <cstring>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "emu/net.h"
#include "emu/notify.h"

namespace emu {
using namespace engine_detail;

bool Engine::recv_of_srq(QpSlot& r, uint32_t xrc_srqn, RecvRef* out) {
  if (r.type == kQptXrcRecv) {
    // XRC: the packet names the SRQ, which must be an XRC SRQ of the TGT QP's domain.
    SrqSlot* s = seg_->find_srq(xrc_srqn);
    if (!s || !s->xrcd_ref || s->xrcd_ref != r.xrcd_ref) return false;
    out->srq = s;
    return true;
  }
  if (r.srq_ref) {
    // A QP keeps its SRQ alive (destroy_srq is refused while QPs are attached); a dying slot
    // means both are being torn down: no receive.
    out->srq = &srq_slot(h_, (r.srq_ref - 1) & (kMaxSrqs - 1));
  }
  return true;
}

bool Engine::recv_empty(RecvRef& q) {
  if (q.srq) {
    SrqSlot& s = *q.srq;
    if (s.state.load(std::memory_order_acquire) != kSlotLive) return true;
    if (((s.ci ^ s.pi_seen) & 0xffff) != 0) return false;
    s.pi_seen = be32(device_load32(seg_->at<uint32_t>(s.dbrec_off))) & 0xffff;
    return (s.ci & 0xffff) == s.pi_seen;
  }
  QpSlot& r = *q.qp;
  if (((r.rq_ci ^ r.rq_pi_seen) & 0xffff) != 0) return false;
  r.rq_pi_seen = rq_producer(seg_, r);
  return (r.rq_ci & 0xffff) == r.rq_pi_seen;
}

// Whether the receive queue is empty; if so the requester is registered to be woken by the next
// receive posted there. Registering and then looking again (the poster stores its doorbell record
// and then looks for a waiter) means one of the two always sees the other.
bool Engine::recv_empty_register(const QpSlot& requester, RecvRef& q) {
  if (!recv_empty(q)) return false;
  if (q.qp->state.load(std::memory_order_acquire) != kSlotLive) return true;  // being destroyed
  std::atomic<uint32_t>& waiter = q.srq ? q.srq->rnr_waiter : q.qp->rnr_waiter;
  waiter.store(requester.qpn + 1, std::memory_order_seq_cst);
  return recv_empty(q);
}

const uint8_t* Engine::srq_head(const SrqSlot& s, uint32_t* seg_bytes, uint16_t* wqe_index) {
  uint32_t idx = s.head & (s.wqe_cnt - 1);
  *wqe_index = static_cast<uint16_t>(idx);
  *seg_bytes = s.stride - sizeof(SrqNextSeg);
  return seg_->at<uint8_t>(s.buf_off) + size_t(idx) * s.stride + sizeof(SrqNextSeg);
}

uint16_t Engine::srq_next(const SrqSlot& s) {
  SrqNextSeg next;
  std::memcpy(&next, seg_->at<uint8_t>(s.buf_off) + size_t(s.head & (s.wqe_cnt - 1)) * s.stride,
              sizeof next);
  return be16(next.next_wqe_index);
}

void Engine::srq_consume(SrqSlot& s, uint16_t next) {
  s.head = next;
  ++s.ci;
  // The limit event: once, when fewer WQEs than the armed limit remain (ibv_modify_srq(3)).
  uint32_t limit = s.limit.load(std::memory_order_relaxed);
  if (limit) {
    uint32_t pi = be32(device_load32(seg_->at<uint32_t>(s.dbrec_off))) & 0xffff;
    uint32_t left = (pi - s.ci) & 0xffff;
    if (left < limit && s.limit.exchange(0) != 0 && s.ctx < kMaxContexts)
      notify_async(h_->ctxs[s.ctx], s.uid, kEvSrqLimit);
  }
}

bool Engine::recv_scatter(const RecvRef& q, const uint8_t* wqe, uint32_t seg_bytes, Sges* out,
                          bool* addr_is_va) {
  // The keys are the receive queue's: an XRC SRQ's PD and process, else the QP's.
  uint32_t pd = q.srq && q.srq->xrcd_ref ? q.srq->pd : q.qp->pd;
  uint32_t owner = q.srq && q.srq->xrcd_ref ? q.srq->owner : q.qp->owner;
  out->n = 0;
  out->total = 0;
  out->all_shared = true;
  *addr_is_va = true;
  for (uint32_t off = 0; off + sizeof(DataSeg) <= seg_bytes; off += sizeof(DataSeg)) {
    DataSeg d;
    std::memcpy(&d, wqe + off, sizeof d);
    if (be32(d.lkey) == kInvalidLkey) break;
    uint64_t len = be32(d.byte_count) ? be32(d.byte_count) : kMaxMsgSize;
    uint64_t va;
    const MrSlot* mr = nullptr;
    if (out->n == kMaxSpans || !translate_key(seg_, pd, owner, be32(d.lkey), be64(d.addr), len,
                                              kAccessLocalWrite, &va, &mr))
      return false;
    if (!mr->share_len) out->all_shared = false;
    if (va != be64(d.addr)) *addr_is_va = false;
    out->span[out->n++] = {va, len};
    out->total += len;
  }
  return true;
}

// ---- UD ----

namespace {

// A UD receive's L3 header type on a RoCE port (the CQE's SL field there).
constexpr uint8_t kRoceL3Grh = 0, kRoceL3Ipv6 = 1, kRoceL3Ipv4 = 2;

bool ipv4_mapped(const uint8_t gid[16]) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid, prefix, 12) == 0;
}

// RoCE v2 between IPv4 addresses: the 40 bytes ahead of a UD receive hold 20 zero bytes and then
// the packet's IPv4 header (as mlx5 and rxe deliver it; ibv_init_ah_from_wc reads it there).
void ipv4_header_in_grh(Grh* g, uint8_t tos, uint8_t ttl, uint32_t udp_bytes) {
  uint8_t ip[20] = {};
  uint16_t total = static_cast<uint16_t>(20 + udp_bytes);
  ip[0] = 0x45;
  ip[1] = tos;
  ip[2] = total >> 8;
  ip[3] = total & 0xff;
  ip[6] = 0x40;  // don't fragment
  ip[8] = ttl;
  ip[9] = net::kIpProtoUdp;
  std::memcpy(ip + 12, g->sgid + 12, 4);
  std::memcpy(ip + 16, g->dgid + 12, 4);
  uint16_t csum = net::ipv4_checksum(ip);
  ip[10] = csum >> 8;
  ip[11] = csum & 0xff;
  std::memset(g, 0, sizeof *g);
  std::memcpy(reinterpret_cast<uint8_t*>(g) + 20, ip, 20);
}

// Whether q joined the group; RoCE has no LIDs: the group is its GID alone.
bool joined(const QpSlot& q, const uint8_t gid[16], uint16_t lid, bool gid_only) {
  for (uint32_t i = 0; i < q.n_mcast && i < kMaxMcastPerQp; ++i)
    if ((gid_only || q.mcast[i].lid == lid) && std::memcmp(q.mcast[i].gid, gid, 16) == 0)
      return true;
  return false;
}

}  // namespace

ExecOutcome Engine::exec_ud(QpSlot& qp, const ParsedWqe& w, int local_pid, CqeInfo* out) {
  const CtrlSeg& ctrl = *w.ctrl;
  const AvSeg& av = w.av;
  const Sges& local = w.local;
  const PortState& port = h_->devices[qp.dev].ports[qp.port - 1];
  uint64_t mtu = 128ull << (port.active_mtu ? port.active_mtu : 1);
  if (local.total > mtu) {  // a UD message is one packet
    out->cqe_opcode = kCqeReqErr;
    out->syndrome = kSynLocalLength;
    return ExecOutcome::done;
  }
  advance_psn(qp, nullptr, 1);  // a datagram is one packet
  // Sent is done for UD: whether anyone received it is not the requester's to know. A port that
  // is down sends nothing.
  if (!qp_port_up(h_, qp)) return ExecOutcome::done;
  UdPacket pkt{};
  pkt.ctrl = &ctrl;
  pkt.local = &local;
  pkt.local_pid = local_pid;
  pkt.qkey = be32(av.qkey);
  if (pkt.qkey & kQkeyUseQp) pkt.qkey = qp.qkey;
  pkt.src_qpn = qp.qpn;
  pkt.slid = port.lid;
  pkt.sl = av.stat_rate_sl & 0xf;
  uint32_t gfl = be32(av.grh_gid_fl);
  pkt.has_grh = (gfl & kAvGrh) != 0;
  uint32_t sgid_index = (gfl >> 20) & 0xff;
  if (pkt.has_grh && sgid_index >= port.gid_count) return ExecOutcome::done;  // no such source
  uint8_t sgid_type = pkt.has_grh ? port.gid_type[sgid_index] : uint8_t{kGidTypeIb};
  if (pkt.has_grh) {
    Grh& g = pkt.grh;
    uint32_t imm = w.opcode == kOpSendImm ? 4 : 0;
    uint32_t ib_bytes =
        12 + 8 + imm + static_cast<uint32_t>(local.total) + 4;  // BTH DETH data ICRC
    g.version_tclass_flow = be32(6u << 28 | uint32_t(av.tclass) << 20 | (gfl & 0xfffff));
    g.paylen = be16(static_cast<uint16_t>(ib_bytes));
    g.next_hdr = sgid_type == kGidTypeRoceV2 ? 17 : 0x1b;  // v2: UDP carries the BTH
    g.hop_limit = av.hop_limit;
    std::memcpy(g.sgid, port.gid[sgid_index], 16);
    std::memcpy(g.dgid, av.rgid, 16);
    bool ipv4 = sgid_type == kGidTypeRoceV2 && ipv4_mapped(g.sgid) && ipv4_mapped(g.dgid);
    if (ipv4) ipv4_header_in_grh(&g, av.tclass, av.hop_limit, 8 + ib_bytes);
    // On Ethernet the receive CQE's SL field is the packet's L3 header type, as mlx5 reports it
    // (its PRM; UCX's UD reads it there to find the destination address in the 40 bytes ahead
    // of the payload): 0 a RoCE v1 GRH, 1 IPv6, 2 IPv4.
    if (port.link_layer == kLinkLayerEthernet)
      pkt.sl = sgid_type != kGidTypeRoceV2 ? kRoceL3Grh : ipv4 ? kRoceL3Ipv4 : kRoceL3Ipv6;
  }
  uint32_t dqpn = be32(av.dqp) & 0xffffff;
  uint16_t dlid = be16(av.rlid);
  int copies = 1;  // the packet wire may lose or duplicate the datagram
  if (wire_on()) [[unlikely]]
    if ((copies = ud_on_wire(qp, w, local_pid, dqpn, pkt.qkey)) == 0) return ExecOutcome::done;
  bool multicast =
      dqpn == kMcastQpn &&
      (port.link_layer == kLinkLayerEthernet ? av.rgid[0] == 0xff : dlid >= kMcastLidBase);
  if (multicast) {
    // Every UD QP on the fabric that joined the group, on a live port of the same link layer.
    each_qp(h_, [&](QpSlot& r) {
      if (r.state.load(std::memory_order_acquire) != kSlotLive || r.type != kQptUd ||
          !joined(r, av.rgid, dlid, port.link_layer == kLinkLayerEthernet) || !qp_port_up(h_, r) ||
          h_->devices[r.dev].ports[r.port - 1].link_layer != port.link_layer)
        return;
      for (int c = 0; c < copies; ++c) deliver_ud(pkt, r);
    });
  } else if (QpSlot* r = seg_->find_qp(dqpn)) {
    const PortState& rp = h_->devices[r->dev].ports[r->port - 1];
    if (r->type == kQptUd && qp_port_up(h_, *r) &&
        ud_path_reaches(port, rp, dlid, pkt.has_grh, av.rgid, sgid_type))
      for (int c = 0; c < copies; ++c) deliver_ud(pkt, *r);
  }
  return ExecOutcome::done;
}

void Engine::deliver_ud(const UdPacket& pkt, QpSlot& r) {
  // Dropped silently, as the IBTA has it for UD: a QP not ready to receive, a Q_Key mismatch, a
  // dead process, no receive posted.
  if (!can_receive(r.qp_state.load()) || r.qkey != pkt.qkey) return;
  if (h_->procs[r.owner].state.load(std::memory_order_relaxed) != kProcAlive) return;
  RecvRef q = recv_of(r);
  CqeInfo rc;
  clear_cqe_info(&rc);
  uint8_t syndrome = 0;
  CqSlot& cq = cq_slot(h_, r.recv_cq);
  bool placed;
  {
    ShmLockGuard held(recv_lock(q), seg_->self());
    settle_owed(q);
    if (recv_empty(q)) return;
    if (!ud_payload(pkt, q, &rc, &syndrome)) return;
    rc.qpn = r.qpn;
    rc.src_qpn = pkt.src_qpn | uint32_t(pkt.sl) << 24 | (pkt.has_grh ? kCqeRqpnGrh : 0);
    rc.slid = pkt.slid;
    if (syndrome) {
      rc.cqe_opcode = kCqeRespErr;
      rc.syndrome = syndrome;
    } else {
      bool imm = ctrl_opcode(*pkt.ctrl) == kOpSendImm;
      rc.cqe_opcode = imm ? kCqeRespSendImm : kCqeRespSend;
      rc.byte_cnt = static_cast<uint32_t>(kGrhBytes + pkt.local->total);
      rc.imm_be = pkt.ctrl->imm;
      rc.emu_flags |= recv_cqe_flags(*pkt.ctrl, imm);
    }
    placed = complete_recv(q, cq, rc);
  }
  if (placed) step_raise_event(cq, rc);
  if (syndrome) enter_error(r);
}

bool Engine::recv_target(const RecvRef& q, uint64_t need, uint16_t* wqe_index, Sges* scatter,
                         uint8_t* syndrome, bool* addr_is_va) {
  uint32_t seg_bytes;
  const uint8_t* wqe = recv_head(q, &seg_bytes, wqe_index);
  bool va;
  if (!recv_scatter(q, wqe, seg_bytes, scatter, addr_is_va ? addr_is_va : &va))
    *syndrome = kSynLocalProt;
  else if (scatter->total < need)
    *syndrome = kSynLocalLength;
  return *syndrome == 0;
}

bool Engine::ud_payload(const UdPacket& pkt, const RecvRef& q, CqeInfo* rc, uint8_t* syndrome) {
  const Sges& local = *pkt.local;
  Sges scatter;
  bool addr_is_va;
  if (!recv_target(q, kGrhBytes + local.total, &rc->wqe_counter, &scatter, syndrome, &addr_is_va))
    return true;
  int rpid = h_->procs[q.qp->owner].pid;
  if (addr_is_va && rpid != seg_->pid()) {
    // The GRH (when one came) and the payload into the receive CQ's staging area.
    Staged st = stage_payload(cq_slot(h_, q.qp->recv_cq), &pkt.grh, pkt.has_grh ? kGrhBytes : 0,
                              pkt.local_pid, local, rc);
    if (st != Staged::not_staged) return st == Staged::staged;
  }
  CopyResult cr = CopyResult::ok;
  bool local_here = pkt.local_pid == 0 || pkt.local_pid == seg_->pid();
  if (pkt.has_grh && local_here && local.n < kMaxSpans) {
    // GRH and payload are both in this process: one gather list, one copy.
    Sges src;
    src.span[src.n++] = {reinterpret_cast<uint64_t>(&pkt.grh), kGrhBytes};
    for (int i = 0; i < local.n; ++i) src.span[src.n++] = local.span[i];
    Sges dst = sub_spans(scatter, 0, kGrhBytes + local.total);
    cr = dma_copy(0, src.span, src.n, rpid, dst.span, dst.n);
  } else {
    if (pkt.has_grh) {
      MemSpan g{reinterpret_cast<uint64_t>(&pkt.grh), kGrhBytes};
      Sges head = sub_spans(scatter, 0, kGrhBytes);
      cr = dma_copy(0, &g, 1, rpid, head.span, head.n);
    }
    if (cr == CopyResult::ok && local.total) {
      Sges body = sub_spans(scatter, kGrhBytes, local.total);
      cr = dma_copy(pkt.local_pid, local.span, local.n, rpid, body.span, body.n);
    }
  }
  // The receiver died, or our own buffer vanished: the packet is lost.
  if (cr == CopyResult::dst_gone || cr == CopyResult::src_gone || cr == CopyResult::src_fault)
    return false;
  if (cr != CopyResult::ok) *syndrome = kSynLocalProt;
  return true;
}

}  // namespace emu
