// SPDX-License-Identifier: BSD-2-Clause
// The packet wire (docs/design/reliability.md): while fault rules are set or this process writes a
// capture, a connected QP's message goes as packets. Its packets are sent in rounds; each packet's
// fate (delivered, dropped, duplicated, reordered, delayed, corrupted) is a pure function of the
// fault rules, the connection, its PSN and the round; the responder takes packets in PSN order and
// answers as the IBTA has it:
//   a gap              -> PSN sequence error NAK -> the requester resends from the NAKed PSN
//   nothing after a loss, or a lost answer -> the requester's local ACK timeout -> resend all
//   a duplicate        -> ignored (its message already carried out: SEND delivered once, WRITE and
//                         READ redone idempotently, an atomic's answer replayed from the first)
//   retry_cnt spent    -> IBV_WC_RETRY_EXC_ERR, the QP in ERR (retries count since the last
//                         progress: a NAK that acknowledges new packets renews them)
// UC resends nothing: a message with a packet missing is dropped and its receive WQE stays. The
// message's bytes move with the engine's one DMA once the responder has all of its packets; what
// the packets change is whether, when, and how many retries it took. Without rules and capture
// none of this runs (Engine::wire_on, one test per message).
#include <cstring>
#include <vector>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "device/wqe_parse.h"
#include "emu/faults.h"
#include "wire/frame.h"
#include "wire/packet.h"
#include "wire/pcap.h"

namespace emu {
using namespace engine_detail;
namespace {

wire::MsgKind msg_kind(uint8_t op) {
  switch (op) {
    case kOpSendImm:
      return wire::MsgKind::send_imm;
    case kOpSendInval:
      return wire::MsgKind::send_inv;
    case kOpRdmaWrite:
    case kOpAtomicWrite:
      return wire::MsgKind::write;
    case kOpRdmaWriteImm:
      return wire::MsgKind::write_imm;
    case kOpRdmaRead:
      return wire::MsgKind::read;
    case kOpAtomicCs:
      return wire::MsgKind::cmp_swap;
    case kOpAtomicFa:
      return wire::MsgKind::fetch_add;
    default:
      return wire::MsgKind::send;
  }
}

uint8_t fault_op_of(uint8_t wqe_op) {
  if (is_atomic(wqe_op)) return kFopAtomic;
  if (wqe_op == kOpRdmaRead) return kFopRead;
  if (has_raddr(wqe_op)) return kFopWrite;
  return kFopSend;
}

// The spans of [off, off + len) of a gather/scatter list.
int sub_spans(const Sges& s, uint64_t off, uint64_t len, MemSpan* out) {
  int n = 0;
  for (int i = 0; i < s.n && len; ++i) {
    if (off >= s.span[i].len) {
      off -= s.span[i].len;
      continue;
    }
    uint64_t take = std::min(len, s.span[i].len - off);
    out[n++] = MemSpan{s.span[i].addr + off, take};
    len -= take;
    off = 0;
  }
  return n;
}

}  // namespace

// The responder's side of one round: packets taken in PSN order.
struct Engine::WireRx {
  uint32_t accepted;
  bool nak = false;
  uint32_t nak_at = 0;
  void arrive(uint32_t i) {
    if (i == accepted)
      ++accepted;
    else if (i > accepted && !nak) {
      nak = true;
      nak_at = accepted;
    }
  }
};

// One packet as the capture shows it.
struct Engine::WirePacket {
  bool from_responder;
  uint8_t op;  // BTH operation (low 5 bits)
  uint32_t psn;
  uint32_t index;  // payload: this packet's share of the message (by path MTU)
  uint32_t count;  // packets carrying the payload
  uint8_t aeth;    // answers
  FaultKind fault;
  uint32_t round;
};

FaultKind Engine::wire_fate(const Exchange& x, const FaultRules& rules, const WireQp& ws,
                            bool from_responder, uint8_t fop, uint32_t psn) {
  PacketKey k{};
  k.dev = from_responder ? x.r.dev : x.qp.dev;
  k.qpn = x.qp.qpn;
  k.psn = psn;
  k.attempt = ws.round;
  k.number = ((psn - ws.base_psn) & 0xffffff) + 1;
  k.op = fop;
  FaultKind f = fault_decide(rules, k);
  if (f != kFaultNone) h_->faults.injected[f].fetch_add(1, std::memory_order_relaxed);
  return f;
}

void Engine::wire_capture(const Exchange& x, const WirePacket& p) {
  if (!pcap_ || pcap_->full()) return;
  const QpSlot& from = p.from_responder ? x.r : x.qp;
  const QpSlot& to = p.from_responder ? x.qp : x.r;
  const PortState& port = h_->devices[from.dev].ports[from.port - 1];
  wire::Frame f{};
  f.ethernet = port.link_layer == kLinkLayerEthernet;
  f.grh = from.is_global;
  f.sl = from.sl;
  f.src.lid = port.lid;
  f.dst.lid = from.dlid;
  if (from.sgid_index < kGidTableLen) std::memcpy(f.src.gid, port.gid[from.sgid_index], 16);
  std::memcpy(f.dst.gid, from.dgid, 16);
  uint8_t tr = x.qp.type == kQptXrcSend ? wire::kTrXrc : x.unreliable ? wire::kTrUc : wire::kTrRc;
  f.opcode = tr | p.op;
  f.dest_qpn = to.qpn;
  f.psn = p.psn;
  const ParsedWqe& w = x.w;
  f.solicited = !p.from_responder && p.index + 1 == p.count && ctrl_solicited(*w.ctrl);
  f.ack_req = !p.from_responder && p.index + 1 == p.count;
  f.reth_va = be64(w.raddr.raddr);
  f.reth_rkey = be32(w.raddr.rkey);
  f.reth_len = static_cast<uint32_t>(w.local.total);
  f.atomic_swap = be64(w.atom.swap_add);
  f.atomic_cmp = be64(w.atom.compare);
  f.aeth_syndrome = p.aeth;
  f.imm_be = w.ctrl->imm;
  f.xrc_srqn = be32(w.xrc.xrc_srqn);
  // The payload: a request's share of the gather list, or a READ response's (or an atomic's
  // original value) from the buffers it landed in.
  thread_local std::vector<uint8_t> data, frame;
  uint32_t mtu = wire::mtu_bytes(x.qp.path_mtu);
  bool carries = p.op != wire::kReadRequest && p.op != wire::kAck && p.op != wire::kCmpSwap &&
                 p.op != wire::kFetchAdd;
  uint64_t off = uint64_t{p.index} * mtu;
  uint64_t len = carries && off < w.local.total ? std::min<uint64_t>(mtu, w.local.total - off) : 0;
  if (p.op == wire::kAtomicAck) off = 0, len = 0;
  data.assign(len ? len : 8, 0);
  MemSpan spans[kMaxSpans];
  MemSpan dst{reinterpret_cast<uint64_t>(data.data()), len};
  int n = len ? sub_spans(w.local, off, len, spans) : 0;
  if (n) dma_copy(x.local_pid, spans, n, 0, &dst, 1);  // a buffer gone: zeros in the capture
  if (p.op == wire::kAtomicAck && w.local.total >= 8) {
    MemSpan orig{reinterpret_cast<uint64_t>(data.data()), 8};
    n = sub_spans(w.local, 0, 8, spans);
    if (dma_copy(x.local_pid, spans, n, 0, &orig, 1) == CopyResult::ok) {
      uint64_t v;
      std::memcpy(&v, data.data(), 8);
      f.atomic_orig = v;  // in host order in the buffer, as the verbs user reads it
    }
  }
  f.payload = data.data();
  f.payload_len = static_cast<uint32_t>(len);
  frame.resize(wire::kMaxFrameHeaders + len + 16);
  size_t flen = wire::build_frame(f, frame.data());
  char comment[96];
  int c = 0;
  if (p.fault != kFaultNone)
    c = std::snprintf(comment, sizeof comment, "emu: %s", fault_name(p.fault));
  if (p.round && !p.from_responder)
    std::snprintf(comment + c, sizeof comment - c, "%semu: retransmission %u", c ? "; " : "",
                  p.round);
  else if (!c)
    comment[0] = '\0';
  pcap_->write(f.ethernet, frame.data(), flen, comment);
}

// Sends packets [from, count) of a round (requests, or READ responses) through their fates into
// the receiver, as the capture shows them.
void Engine::wire_burst(const Exchange& x, const FaultRules& rules, WireQp& ws, bool responder,
                        uint32_t from, uint32_t count, WireRx& rx) {
  thread_local std::vector<uint32_t> late;
  late.clear();
  uint8_t fop = fault_op_of(x.w.opcode);
  wire::MsgKind kind = msg_kind(x.w.opcode);
  bool held = false;
  uint32_t held_i = 0;
  for (uint32_t i = from; i < count; ++i) {
    uint32_t psn = (ws.msg_psn + i) & 0xffffff;
    FaultKind f = wire_fate(x, rules, ws, responder, fop, psn);
    uint8_t op = responder ? wire::read_response_op(i, count) : wire::request_op(kind, i, count);
    if (x.w.opcode == kOpAtomicWrite && !responder) op = 0x1d;  // RDMA ATOMIC WRITE
    uint8_t aeth = (responder && op != wire::kReadRespMiddle) ? wire::kAethAck : 0;
    wire_capture(x, WirePacket{responder, op, psn, i, count, aeth, f, ws.round});
    if (ws.round && !responder) h_->faults.retransmitted.fetch_add(1, std::memory_order_relaxed);
    bool hold_this = false;
    switch (f) {
      case kFaultDrop:
      case kFaultCorrupt:
        break;  // a bad ICRC is dropped silently by the receiver
      case kFaultDup:
        rx.arrive(i), rx.arrive(i);
        break;
      case kFaultReorder:
        hold_this = true;
        break;
      case kFaultDelay:
        late.push_back(i);
        break;
      default:
        rx.arrive(i);
    }
    if (held) rx.arrive(held_i);
    held = hold_this;
    held_i = i;
  }
  if (held) rx.arrive(held_i);
  for (uint32_t i : late) rx.arrive(i);
}

// One answer (ACK, NAK, atomic ACK) from the responder: whether it reached the requester.
bool Engine::wire_answer(const Exchange& x, const FaultRules& rules, WireQp& ws, uint8_t op,
                         uint8_t aeth, uint32_t psn) {
  FaultKind f = wire_fate(x, rules, ws, true, kFopAck, psn);
  wire_capture(x, WirePacket{true, op, psn, 0, 1, aeth, f, ws.round});
  return f != kFaultDrop && f != kFaultCorrupt;
}

// The message a send queue's head carries on the wire: how many request packets it sends (READ
// and atomics: one), and its last PSN (the one its ACK names).
struct Engine::WireMessage {
  bool read;
  bool atomic;
  uint32_t requests;
  uint32_t last_psn;
};

namespace {

// The wire state of qp's head message, new for a QP's new incarnation or a new head WQE.
WireQp& wire_state_of(Header* h, const QpSlot& qp) {
  WireQp& ws = wire_slot(h, qp.qpn & (kMaxQps - 1));
  uint32_t inc = qp.incarnation.load(std::memory_order_relaxed);
  if (ws.incarnation != inc || !ws.based) {
    ws = WireQp{};
    ws.incarnation = inc;
    ws.based = 1;
    ws.base_psn = qp.sq_psn;
  }
  if (!ws.active || ws.head_ci != qp.sq_ci) {
    ws.active = 1;
    ws.head_ci = qp.sq_ci;
    ws.msg_psn = qp.sq_psn;
    ws.accepted = ws.round = ws.retries = 0;
    ws.executed = 0;
  }
  return ws;
}

// One retry of qp's budget, if it has one left.
bool spend_retry(WireQp& ws, const QpSlot& qp) {
  if (ws.retries >= qp.retry_cnt) return false;
  ++ws.retries;
  return true;
}

}  // namespace

bool Engine::wire_execute_once(Exchange& x, WireQp& ws, ExecOutcome* out) {
  if (ws.executed) return true;
  ExecOutcome o = exec_message(x);
  if (o != ExecOutcome::done) {
    ws.accepted = 0;  // RNR or no responder: the message goes again from its start
    *out = o;
    return false;
  }
  if (x.out->cqe_opcode == kCqeReqErr || x.unreliable) {
    ws.active = 0;  // an error NAK (not subject to faults) or UC: done with this message
    *out = ExecOutcome::done;
    return false;
  }
  ws.executed = 1;
  return true;
}

bool Engine::wire_answered(const Exchange& x, const FaultRules& rules, WireQp& ws,
                           const WireMessage& m, bool* gap) {
  if (!m.read)
    return wire_answer(x, rules, ws, m.atomic ? wire::kAtomicAck : wire::kAck, wire::kAethAck,
                       m.last_psn);
  WireRx back{0};
  wire_burst(x, rules, ws, true, 0, x.npk, back);
  *gap = back.accepted != x.npk && back.nak;
  return back.accepted == x.npk;
}

bool Engine::wire_nak_answered(const Exchange& x, const FaultRules& rules, WireQp& ws,
                               const WireRx& rx) {
  h_->faults.naks.fetch_add(1, std::memory_order_relaxed);
  uint32_t nak_psn = (ws.msg_psn + rx.nak_at) & 0xffffff;
  return wire_answer(x, rules, ws, wire::kAck, wire::kAethNakSeq, nak_psn);
}

ExecOutcome Engine::exec_on_wire(Exchange& x) {
  QpSlot& qp = x.qp;
  WireQp& ws = wire_state_of(h_, qp);
  FaultRules rules = faults_get(seg_);
  uint8_t op = x.w.opcode;
  WireMessage m{op == kOpRdmaRead, is_atomic(op), 0, (ws.msg_psn + x.npk - 1) & 0xffffff};
  m.requests = m.read || m.atomic ? 1 : x.npk;
  uint32_t from = 0;  // a timeout resends the message from its first PSN
  for (;; ++ws.round) {
    uint32_t before = ws.accepted;  // what the responder held when this round began
    WireRx rx{ws.accepted};
    wire_burst(x, rules, ws, false, from, m.requests, rx);
    ws.accepted = rx.accepted;
    if (x.unreliable && ws.accepted < m.requests) {
      ws.active = 0;  // UC: the message is lost, its receive WQE stays for the next one
      return dropped(x);
    }
    if (ws.accepted == m.requests) {
      ExecOutcome out;
      if (!wire_execute_once(x, ws, &out)) return out;
      bool gap = false;
      if (wire_answered(x, rules, ws, m, &gap)) {
        ws.active = 0;
        return ExecOutcome::done;
      }
      if (gap) {  // a gap in the READ responses: the requester asks again at once
        if (!spend_retry(ws, qp)) break;
        from = 0;
        continue;
      }
    } else if (rx.nak && wire_nak_answered(x, rules, ws, rx)) {
      // A NAK acknowledges the packets before its PSN: progress renews the retry budget, as a new
      // acknowledgement does on hardware and in rxe (else a long message under steady loss would
      // fail although every round moves it on).
      if (rx.nak_at > before) ws.retries = 0;
      if (!spend_retry(ws, qp)) break;
      from = rx.nak_at;
      continue;
    }
    // Nothing (or no answer) came back: the local ACK timeout, then everything again.
    h_->faults.timeouts.fetch_add(1, std::memory_order_relaxed);
    if (!spend_retry(ws, qp)) break;
    ++ws.round;
    return ExecOutcome::stall_retry;
  }
  ws.active = 0;
  log("QP 0x%x: transport retries exhausted on the wire", qp.qpn);
  x.out->cqe_opcode = kCqeReqErr;
  x.out->syndrome = kSynRetryExc;
  return ExecOutcome::done;
}

// UD: the datagram's fate. Returns how many copies arrive (0, 1 or 2).
int Engine::ud_on_wire(const QpSlot& qp, const ParsedWqe& w, int local_pid, uint32_t dqpn,
                       uint32_t qkey) {
  FaultRules rules = faults_get(seg_);
  uint32_t psn = (qp.sq_psn - 1) & 0xffffff;
  PacketKey k{qp.dev, qp.qpn, psn, 0, 0, kFopUd};
  k.number = psn + 1;
  FaultKind f = fault_decide(rules, k);
  if (f != kFaultNone) h_->faults.injected[f].fetch_add(1, std::memory_order_relaxed);
  if (pcap_ && !pcap_->full()) {
    const PortState& port = h_->devices[qp.dev].ports[qp.port - 1];
    uint32_t gfl = be32(w.av.grh_gid_fl);
    uint32_t sgid = (gfl >> 20) & 0xff;
    wire::Frame fr{};
    fr.ethernet = port.link_layer == kLinkLayerEthernet;
    fr.grh = (gfl & kAvGrh) != 0;
    fr.sl = w.av.stat_rate_sl & 0xf;
    fr.src.lid = port.lid;
    fr.dst.lid = be16(w.av.rlid);
    if (sgid < kGidTableLen) std::memcpy(fr.src.gid, port.gid[sgid], 16);
    std::memcpy(fr.dst.gid, w.av.rgid, 16);
    fr.opcode =
        static_cast<uint8_t>(wire::kTrUd | (w.opcode == kOpSendImm ? uint8_t{wire::kSendOnlyImm}
                                                                   : uint8_t{wire::kSendOnly}));
    fr.dest_qpn = dqpn;
    fr.psn = psn;
    fr.solicited = ctrl_solicited(*w.ctrl);
    fr.deth_qkey = qkey;
    fr.deth_src_qpn = qp.qpn;
    fr.imm_be = w.ctrl->imm;
    thread_local std::vector<uint8_t> data, frame;
    data.assign(w.local.total ? w.local.total : 1, 0);
    MemSpan dst{reinterpret_cast<uint64_t>(data.data()), w.local.total};
    if (w.local.total) dma_copy(local_pid, w.local.span, w.local.n, 0, &dst, 1);
    fr.payload = data.data();
    fr.payload_len = static_cast<uint32_t>(w.local.total);
    frame.resize(wire::kMaxFrameHeaders + w.local.total + 16);
    size_t len = wire::build_frame(fr, frame.data());
    char comment[32] = "";
    if (f != kFaultNone) std::snprintf(comment, sizeof comment, "emu: %s", fault_name(f));
    pcap_->write(fr.ethernet, frame.data(), len, comment);
  }
  if (f == kFaultDrop || f == kFaultCorrupt) return 0;
  return f == kFaultDup ? 2 : 1;  // UD takes no notice of PSNs: a duplicate is received twice
}

}  // namespace emu
