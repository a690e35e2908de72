// SPDX-License-Identifier: BSD-2-Clause
// Raw packet QPs on the device: a SEND is one whole Ethernet frame gathered from its SGEs. The NIC
// is an L2 port on the fabric's wire: the frame reaches every Ethernet port whose MAC is its
// destination (every port for a multicast or broadcast one) and, as a NIC loops back to itself,
// the sender's own port; on each, the port's flow rules (emu/raw.h) pick the raw packet QPs that
// receive it, an RSS QP's hash picking one of its receive WQs. Nothing is sent back: a frame
// nobody takes is gone, and the sender completes once it is on the wire.
#include <algorithm>
#include <cstring>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "emu/port.h"
#include "emu/raw.h"
#include "wire/pcap.h"

namespace emu {
using namespace engine_detail;

struct Engine::RawFrame {
  const Sges* local;  // the frame, in the sender's buffers
  int local_pid;
  uint32_t src_qpn;  // the sender: it does not receive its own frame
  FrameKey key;
  uint8_t layers;  // FrameLayer
};

namespace {

bool flow_on(const FlowSlot& f, uint32_t dev, uint8_t port) {
  return f.state.load(std::memory_order_acquire) == kSlotLive && f.rule.qpn != 0 &&
         f.rule.dev == dev && f.rule.port == port;
}

// Whether the frame's destination MAC names this port (a multicast or broadcast one names all).
bool mac_reaches(const PortState& port, const FrameKey& key) {
  if (key.dmac[0] & 1) return true;
  uint8_t mac[6];
  return port_mac(port, mac) && std::memcmp(mac, key.dmac, 6) == 0;
}

}  // namespace

ExecOutcome Engine::exec_raw(QpSlot& qp, const ParsedWqe& w, int local_pid, CqeInfo* out) {
  const Sges& local = w.local;
  if (local.total < 14 || local.total > kMaxRawFrame) {
    out->cqe_opcode = kCqeReqErr;
    out->syndrome = kSynLocalLength;
    return ExecOutcome::done;
  }
  if (!qp_port_up(h_, qp)) return ExecOutcome::done;  // a port that is down sends nothing
  RawFrame fr{&local, local_pid, qp.qpn, {}, 0};
  uint8_t head[kFrameHeadBytes];
  uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(local.total, kFrameHeadBytes));
  Sges part = sub_spans(local, 0, n);
  MemSpan to{reinterpret_cast<uint64_t>(head), n};
  if (dma_copy(local_pid, part.span, part.n, 0, &to, 1) != CopyResult::ok)
    return ExecOutcome::done;  // the sender's buffer vanished with its process
  if (pcap_) [[unlikely]]
    capture_raw(local, local_pid);
  fr.layers = parse_frame(head, n, &fr.key);
  if (h_->raw.live_flows.load(std::memory_order_acquire) == 0) return ExecOutcome::done;
  for (uint32_t d = 0; d < h_->num_devices; ++d)
    for (uint32_t p = 1; p <= h_->devices[d].num_ports; ++p) {
      const PortState& ps = h_->devices[d].ports[p - 1];
      bool own = d == qp.dev && p == qp.port;
      if (ps.link_layer != kLinkLayerEthernet || !port_carries(h_, d, p) ||
          (!own && !mac_reaches(ps, fr.key)))
        continue;
      steer_raw(fr, d, static_cast<uint8_t>(p));
    }
  return ExecOutcome::done;
}

void Engine::steer_raw(const RawFrame& fr, uint32_t dev, uint8_t port) {
  // NORMAL rules: the matching ones of the best (lowest) priority take the frame. The default
  // rules take what no NORMAL rule took (MC_DEFAULT only multicast); sniffers take everything.
  RawSteering& raw = h_->raw;
  uint32_t best = UINT32_MAX;
  for (const FlowSlot& f : raw.flows)
    if (flow_on(f, dev, port) && f.rule.kind == kFlowNormal && f.rule.priority < best &&
        flow_matches(f.rule, fr.key, fr.layers))
      best = f.rule.priority;
  bool multicast = fr.key.dmac[0] & 1;
  constexpr int kSeen = 16;  // a QP with several rules that take the frame gets one copy
  uint32_t seen[kSeen];
  int nseen = 0;
  for (const FlowSlot& f : raw.flows) {
    if (!flow_on(f, dev, port) || f.rule.qpn == fr.src_qpn) continue;
    bool take = f.rule.kind == kFlowSniffer ||
                (f.rule.kind == kFlowNormal && f.rule.priority == best &&
                 flow_matches(f.rule, fr.key, fr.layers)) ||
                (best == UINT32_MAX &&
                 (f.rule.kind == kFlowAllDefault || (f.rule.kind == kFlowMcDefault && multicast)));
    if (!take || std::find(seen, seen + nseen, f.rule.qpn) != seen + nseen) continue;
    if (nseen < kSeen) seen[nseen++] = f.rule.qpn;
    deliver_raw(fr, f);
  }
}

void Engine::deliver_raw(const RawFrame& fr, const FlowSlot& flow) {
  QpSlot* r = seg_->find_qp(flow.rule.qpn);
  if (!r || r->type != kQptRaw) return;
  if (r->rss_ref) {
    // The RSS QP's hash picks the receive WQ.
    const RssSlot& rss = h_->raw.rss[(r->rss_ref - 1) % kMaxRssQps];
    if (rss.state.load(std::memory_order_acquire) != kSlotLive) return;
    uint32_t i = rss_hash(rss, fr.key, fr.layers) & ((1u << rss.log_size) - 1);
    r = seg_->find_qp(rss.wq_qpn[i]);
    if (!r) return;
  }
  // Dropped silently, as an Ethernet NIC drops: a queue not ready, a dead process, no receive.
  if (!can_receive(r->qp_state.load()) ||
      h_->procs[r->owner].state.load(std::memory_order_relaxed) != kProcAlive)
    return;
  RecvRef q = recv_of(*r);
  CqeInfo rc{};
  uint8_t syndrome = 0;
  CqSlot& cq = cq_slot(h_, r->recv_cq);
  bool placed;
  {
    ShmLockGuard held(recv_lock(q), seg_->self());
    settle_owed(q);
    if (recv_empty(q)) return;
    if (!raw_payload(fr, q, &rc.wqe_counter, &syndrome)) return;
    rc.qpn = r->qpn;
    rc.cqe_opcode = syndrome ? kCqeRespErr : kCqeRespSend;
    rc.syndrome = syndrome;
    rc.byte_cnt = syndrome ? 0 : static_cast<uint32_t>(fr.local->total);
    placed = complete_recv(q, cq, rc);
  }
  if (placed) step_raise_event(cq, rc);
  if (syndrome) enter_error(*r);
}

bool Engine::raw_payload(const RawFrame& fr, const RecvRef& q, uint16_t* wqe_index,
                         uint8_t* syndrome) {
  const Sges& local = *fr.local;
  Sges scatter;
  if (!recv_target(q, local.total, wqe_index, &scatter, syndrome)) return true;
  Sges dst = sub_spans(scatter, 0, local.total);
  CopyResult cr =
      dma_copy(fr.local_pid, local.span, local.n, h_->procs[q.qp->owner].pid, dst.span, dst.n);
  // The receiver died, or the sender's buffer vanished: the frame is lost.
  if (cr == CopyResult::dst_gone || cr == CopyResult::src_gone || cr == CopyResult::src_fault)
    return false;
  if (cr != CopyResult::ok) *syndrome = kSynLocalProt;
  return true;
}

void Engine::capture_raw(const Sges& local, int local_pid) {
  // The frame is already Ethernet: it goes into the capture as it is.
  if (pcap_->full()) return;
  uint8_t frame[kMaxRawFrame];
  MemSpan to{reinterpret_cast<uint64_t>(frame), local.total};
  if (dma_copy(local_pid, local.span, local.n, 0, &to, 1) != CopyResult::ok) return;
  pcap_->write(true, frame, local.total, "raw packet");
}

}  // namespace emu
