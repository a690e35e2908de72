// SPDX-License-Identifier: BSD-2-Clause
// Helpers shared by the engine's files: doorbell-record reads, key translation as a NIC does it,
// and the responder lookup. Internal to emu/.
#pragma once
#include <algorithm>
#include <cstdint>

#include "dma/memory.h"
#include "emu/barriers.h"
#include "emu/layout.h"
#include "emu/port.h"
#include "emu/sched/visibility.h"
#include "emu/segment.h"
#include "emu/wqe.h"
#include "ports/link_layer.h"

namespace emu::engine_detail {

constexpr int kMaxSpans = 32;
constexpr uint64_t kMaxMsgSize = 1ull << 31;

inline uint32_t* dbrec_of(Segment* seg, const QpSlot& qp) {
  return seg->at<uint32_t>(qp.dbrec_off);
}

// The send record as the device sees it: in a scheduled run with store buffers, without the
// stores not yet drained (emu/sched/visibility.h).
inline uint32_t sq_producer(Segment* seg, const QpSlot& qp) {
  uint32_t raw = device_load32(&dbrec_of(seg, qp)[1]);
  sched::device_view(qp.dbrec_off + sizeof raw, &raw, sizeof raw);
  return be32(raw) & 0xffff;
}
inline uint32_t rq_producer(Segment* seg, const QpSlot& qp) {
  return be32(device_load32(&dbrec_of(seg, qp)[0])) & 0xffff;
}

inline bool can_receive(uint32_t state) {
  return state == kQpsRtr || state == kQpsRts || state == kQpsSqd || state == kQpsSqe;
}

struct Sges {
  MemSpan span[kMaxSpans];
  int n = 0;
  uint64_t total = 0;
  bool is_inline = false;
  bool all_shared = false;  // every span's MR has a shared backing (recv_scatter sets it)
};

// The part [off, off + len) of a span list.
inline Sges sub_spans(const Sges& s, uint64_t off, uint64_t len) {
  Sges out;
  for (int i = 0; i < s.n && len; ++i) {
    if (off >= s.span[i].len) {
      off -= s.span[i].len;
      continue;
    }
    uint64_t take = std::min(s.span[i].len - off, len);
    out.span[out.n++] = {s.span[i].addr + off, take};
    out.total += take;
    len -= take;
    off = 0;
  }
  return out;
}

// A key check as the NIC does it: the key names an MR of the same PD and process that grants the
// access needed (kAccess* bits; 0 for a local read) and holds [addr, addr + len); *va is where
// addr is in the owner's address space. A memory window's key serves remote access only: the
// window's own rights and range, inside an MR that still lives, and for type 2 only through the
// QP that bound it (`via_qpn`, the responder); *mr_out is then the MR (its pages).
inline bool translate_key(Segment* seg, uint32_t pd, uint32_t owner, uint32_t key, uint64_t addr,
                          uint64_t len, uint32_t need, uint64_t* va,
                          const MrSlot** mr_out = nullptr, uint32_t via_qpn = 0) {
  const MrSlot* mr = seg->find_mr(key);
  if (mr_out) *mr_out = mr;
  if (!mr || mr->pd != pd || mr->owner != owner || (mr->access & need) != need) return false;
  if (addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len) return false;
  if (mr->mw_type) [[unlikely]] {
    constexpr uint32_t kRemote = kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic;
    if (!mr->mw_bound || !(need & kRemote) || (mr->mw_type == 2 && mr->mw_qpn != via_qpn))
      return false;
    const MrSlot* under = seg->find_mr(mr->mw_mr_key);
    if (!under || under->owner != owner) return false;
    if (mr_out) *mr_out = under;
  }
  *va = mr->addr + (addr - mr->iova);
  return true;
}

// The requester's own buffers, with its L_Key (need_write: the device writes into them).
inline bool translate_local(Segment* seg, const QpSlot& qp, uint32_t lkey, uint64_t addr,
                            uint64_t len, bool need_write, uint64_t* va,
                            const MrSlot** mr_out = nullptr) {
  uint32_t need = need_write ? uint32_t{kAccessLocalWrite} : 0;
  return translate_key(seg, qp.pd, qp.owner, lkey, addr, len, need, va, mr_out);
}

// The responder's buffers, with the R_Key a request carries: the QP must allow the access too
// (`qp_access`), and the key belong to the protection domain `pd` of process slot `owner`.
inline bool translate_remote(Segment* seg, const QpSlot& r, uint32_t pd, uint32_t owner,
                             uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
                             uint64_t* va, const MrSlot** mr_out = nullptr) {
  return (r.access & need) &&
         translate_key(seg, pd, owner, rkey, addr, len, need, va, mr_out, r.qpn);
}
inline bool translate_remote(Segment* seg, const QpSlot& qp, uint32_t rkey, uint64_t addr,
                             uint64_t len, uint32_t need, uint64_t* va,
                             const MrSlot** mr_out = nullptr) {
  return translate_remote(seg, qp, qp.pd, qp.owner, rkey, addr, len, need, va, mr_out);
}

inline uint32_t packets(uint64_t len, uint8_t mtu_code) {
  uint32_t shift = 7 + (mtu_code ? mtu_code : 1);  // the MTU is 128 << code: no division
  return len == 0 ? 1 : static_cast<uint32_t>((len + (1ull << shift) - 1) >> shift);
}

// A message of npk packets went from requester to responder: both PSNs move past it (UD and UC
// messages nobody received move only the requester's: responder nullptr).
inline void advance_psn(QpSlot& requester, QpSlot* responder, uint32_t npk) {
  requester.sq_psn = (requester.sq_psn + npk) & 0xffffff;
  if (responder) responder->rq_psn = (responder->rq_psn + npk) & 0xffffff;
}

// The CqeEmuFlags of a responder's CQE for a message whose WQE had this control segment.
inline uint8_t recv_cqe_flags(const CtrlSeg& ctrl, bool imm) {
  return static_cast<uint8_t>((imm ? kCqeFlagImm : 0) |
                              (ctrl_solicited(ctrl) ? kCqeFlagSolicited : 0));
}

// Whether the link under a QP's port is up: a port taken down (emu/control.h) is a pulled cable,
// nothing leaves or arrives through it.
inline bool qp_port_up(const Header* h, const QpSlot& qp) {
  return port_carries(h, qp.dev, qp.port);
}

// Whether the requester's address vector leads to the responder's port. InfiniBand routes by
// DLID, and a port drops a packet whose GRH names a GID it does not have. RoCE has no LIDs: the
// packet always carries a GRH and reaches the port holding its DGID with the type (v1 or v2) of
// the source GID. Nothing connects an InfiniBand port to an Ethernet one.
inline bool path_reaches(const Header* h, const QpSlot& requester, const QpSlot& responder) {
  if (requester.dev >= h->num_devices || requester.port < 1 || requester.port > kMaxPorts ||
      responder.dev >= h->num_devices || responder.port < 1 || responder.port > kMaxPorts)
    return false;
  const PortState& from = h->devices[requester.dev].ports[requester.port - 1];
  const PortState& to = h->devices[responder.dev].ports[responder.port - 1];
  if (from.link_layer != to.link_layer) return false;
  if (to.link_layer == kLinkLayerEthernet) {
    if (!requester.is_global || requester.sgid_index >= from.gid_count) return false;
    return port_gid_index(to, requester.dgid, from.gid_type[requester.sgid_index]) >= 0;
  }
  if (to.lid != requester.dlid) return false;
  return !requester.is_global || port_gid_index(to, requester.dgid, kGidTypeIb) >= 0;
}

// Whether r, the QP behind the requester's destination QPN, answers it as its responder, apart
// from the path: still that QP (its slot live under that number), of the type the requester talks
// to, connected back to the requester, able to receive, in a live process. All of this can change
// without a modify (a destroy, a reset, an error, a death), so it is asked for every message.
inline bool answers(const Header* h, const QpSlot& qp, const QpSlot& r) {
  // An XRC INI QP talks to a TGT QP, which outlives its creator (its handles keep it).
  uint8_t want = qp.type == kQptXrcSend ? uint8_t{kQptXrcRecv} : qp.type;
  return r.state.load(std::memory_order_acquire) == kSlotLive && r.qpn == qp.dest_qpn &&
         r.type == want && r.dest_qpn == qp.qpn && can_receive(r.qp_state.load()) &&
         (r.type == kQptXrcRecv ||
          h->procs[r.owner].state.load(std::memory_order_relaxed) == kProcAlive);
}

// The responder a requester's packets reach: the QP behind the destination QPN on the port the
// path leads to, of the same type, connected back to the requester, able to receive, in a live
// process, with the links of both ports up. nullptr: the packets go nowhere (the requester
// retries until its budget is spent).
inline QpSlot* connected_responder(Segment* seg, const QpSlot& qp) {
  Header* h = seg->hdr();
  if (!qp_port_up(h, qp)) return nullptr;
  QpSlot* r = seg->find_qp(qp.dest_qpn);
  if (!r || !answers(h, qp, *r) || !path_reaches(h, qp, *r) || !qp_port_up(h, *r)) return nullptr;
  return r;
}

// connected_responder, remembered in the requester's cache under route generation gen.
[[gnu::noinline]] inline QpSlot* look_up_responder(Segment* seg, QpSlot& qp, uint64_t gen) {
  QpSlot* r = connected_responder(seg, qp);
  qp.resp_off = r ? seg->offset_of(r) : 0;
  qp.resp_gen = gen;
  return r;
}

// connected_responder for a message, from the requester's cache (QpSlot::resp_off) while nothing
// that decides the path has changed since it was found (Header::route_gen, bumped by
// device_routes_changed after every such change): the path checks (both ports up, LID or GID
// reached) are then known to hold, and only answers() is asked again. The generation is read
// before anything it guards, so a change that lands during a lookup leaves a stale generation
// behind, not a stale responder. Caller holds qp's engine lock (the cache's one writer).
inline QpSlot* responder_of(Segment* seg, QpSlot& qp) {
  uint64_t gen = seg->hdr()->route_gen.load(std::memory_order_acquire);
  if (gen == qp.resp_gen && qp.resp_off) [[likely]] {
    QpSlot* r = seg->at<QpSlot>(qp.resp_off);
    if (answers(seg->hdr(), qp, *r)) return r;
  }
  return look_up_responder(seg, qp, gen);
}

// Whether a UD packet leaving `from` reaches the port `to` (the unicast counterpart of
// path_reaches, for an address vector instead of a connected QP's path).
inline bool ud_path_reaches(const PortState& from, const PortState& to, uint16_t dlid, bool grh,
                            const uint8_t dgid[16], uint8_t sgid_type) {
  if (from.link_layer != to.link_layer) return false;
  if (to.link_layer == kLinkLayerEthernet) return grh && port_gid_index(to, dgid, sgid_type) >= 0;
  return to.lid == dlid && (!grh || port_gid_index(to, dgid, kGidTypeIb) >= 0);
}

// A DCI's responder for one WQE: the DCT its address vector names (the DCT's number, its access
// key, the path), if that answers: live, a DCT able to receive, in a live process, holding the key
// the WQE presents, on a port the path reaches, links up. nullptr: the request goes nowhere, as a
// DCT with another key drops it (the DCI retries until its budget is spent).
inline QpSlot* dc_target(Segment* seg, const QpSlot& dci, const AvSeg& av) {
  Header* h = seg->hdr();
  if (!qp_port_up(h, dci) || dci.dev >= h->num_devices || dci.port < 1 || dci.port > kMaxPorts)
    return nullptr;
  QpSlot* r = seg->find_qp(be32(av.dqp) & 0xffffff);
  uint64_t key;
  std::memcpy(&key, &av, sizeof key);  // the datagram segment's first 8 bytes: the DC key
  if (!r || r->type != kQptDct || !can_receive(r->qp_state.load()) || r->dc_key != be64(key) ||
      h->procs[r->owner].state.load(std::memory_order_relaxed) != kProcAlive || !qp_port_up(h, *r))
    return nullptr;
  const PortState& from = h->devices[dci.dev].ports[dci.port - 1];
  const PortState& to = h->devices[r->dev].ports[r->port - 1];
  uint32_t gfl = be32(av.grh_gid_fl);
  bool grh = (gfl & kAvGrh) != 0 || from.link_layer == kLinkLayerEthernet;
  uint32_t sgid_index = (gfl >> 20) & 0xff;
  uint8_t sgid_type = sgid_index < from.gid_count ? from.gid_type[sgid_index] : uint8_t{kGidTypeIb};
  return ud_path_reaches(from, to, be16(av.rlid), grh, av.rgid, sgid_type) ? r : nullptr;
}

}  // namespace emu::engine_detail
