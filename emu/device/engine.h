// SPDX-License-Identifier: BSD-2-Clause
// The device engine: what a NIC does with what the driver wrote. It has no thread of its own;
// whoever runs it (the posting thread, a poller, the device thread, a scheduler) calls its entry
// points, and it behaves the same in any attached process.
//
// The work on one send queue is a sequence of steps, each one member function of the device state
// with one entry, so that a scheduler or a fault injector (inside emu/) can run them one at a time
// under the QP's engine lock; run_sq is the loop that calls them in order:
//   1. step_fetch_dbrec(qp)            read the send doorbell record, checked (a record that went
//                                      backwards or counts blocks the ring was not given)
//   2. step_fetch_wqe(qp, buf, &bbs)   the WQE at sq_ci: its BlueFlame copy, else the ring; a
//                                      stale or torn one is a local QP operation error
//   3. step_execute(qp, wqe, &cqe)     parse (device/wqe_parse.h) and run one opcode family:
//                                      exec_rdma (WRITE, WRITE_IMM, READ), exec_atomic, exec_send
//                                      (SEND, SEND_IMM; engine_exec.cpp), exec_ud (engine_recv.cpp)
//      step_execute_writes(qp, pi)     instead of 2-4: a run of plain WRITEs in one DMA call
//                                      (engine_batch.cpp)
//   4. step_complete(qp, cqe, signaled, bbs)  the requester's CQE (step_write_cqe), sq_ci past the
//                                      WQE, and an error stops the send queue
//   5. step_raise_event(cq, cqe)       the completion event of a CQ armed for it (after each CQE
//                                      step_write_cqe placed; write_cqe does both)
// A head WQE whose responder does not answer stalls (stall_or_fail) and is retried by a later run.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "device/doorbell.h"
#include "device/engine_internal.h"
#include "dma/memory.h"
#include "emu/device.h"
#include "emu/faults.h"
#include "emu/kill_point.h"
#include "emu/layout.h"
#include "emu/sched/sched.h"
#include "emu/segment.h"
#include "emu/staging.h"
#include "emu/wqe.h"

namespace emu::engine_detail {
struct ParsedWqe;
}
namespace emu::wire {
class Pcap;
}

namespace emu {

struct CqeInfo {
  uint8_t cqe_opcode;  // CqeOpcode
  uint8_t syndrome;    // for error CQEs
  uint8_t wqe_opcode;  // requester: the WQE's opcode
  uint8_t emu_flags;   // CqeEmuFlags
  uint16_t wqe_counter;
  uint16_t slid;
  uint32_t qpn;
  uint32_t src_qpn;
  uint32_t byte_cnt;
  uint32_t imm_be;      // immediate data as it travels (big-endian)
  uint32_t srqn;        // XRC: the SRQ that took the receive (the CQE's srqn_uidx)
  uint8_t rnr_timer;    // on an RNR stall: the responder's min_rnr_timer code
  bool inline_scatter;  // the payload (byte_cnt <= kCqeInlineMax bytes) is in inline_data
  bool staged;          // the payload waits in the CQ's staging area, in the slots staged_ref names
  uint8_t tm_op;        // a tag matching CQE's CqeTmOp (0: none), with the header's fields
  uint32_t tm_app_ctx;  // (host order)
  // Requester: a rendezvous this SEND started at a TM SRQ, finished once the SEND has completed
  // (the read, the FIN to the requester, the data CQE): 1 + (SRQ slot << 16 | tag index).
  uint32_t tm_rndv;
  uint64_t tm_tag;
  uint8_t vendor_err;  // error CQEs: 0 = the syndrome, as mlx5 reports it
  // Read only under their flags (staged, inline_scatter), so clear_cqe_info leaves them: the two
  // CQEs of a message clear 56 bytes each, not 104.
  StagedRef staged_ref;
  uint8_t inline_data[kCqeInlineMax];
};

// An empty CqeInfo, up to the fields read only under a flag (staged_ref, inline_data).
// `CqeInfo{}` compiles to `rep stosq`, whose start-up costs several times the stores (about 20 ns
// against 3 on this VM), and the engine clears two per message. The zero comes out of an empty
// asm: a loop storing a known zero is a memset to GCC, which it emitted as `rep stosq` again.
inline void clear_cqe_info(CqeInfo* c) {
  typedef long long Zero16 __attribute__((vector_size(16)));
  constexpr size_t kCleared = offsetof(CqeInfo, staged_ref);
  static_assert(kCleared >= 16 && std::is_trivially_copyable_v<CqeInfo>);
  Zero16 zero = {};
  asm("" : "+x"(zero));  // opaque to the optimizer: stores, not a memset
  // Copied, not stored through a vector pointer (a CqeInfo is 8-aligned); the stores in a row, not
  // a loop around one.
  auto* p = reinterpret_cast<char*>(c);
#pragma GCC unroll 8
  for (size_t i = 0; i + 16 <= kCleared; i += 16) std::memcpy(p + i, &zero, 16);
  if constexpr (kCleared % 16 != 0) std::memcpy(p + kCleared - 16, &zero, 16);  // the tail
}

// An error CQE for the WQE at consumer position ci of qp's send queue (kCqeReqErr, naming the
// WQE's opcode) or receive queue (kCqeRespErr): a flush, a malformed WQE, a spent retry budget.
inline CqeInfo error_cqe(uint8_t cqe_opcode, uint8_t syndrome, const QpSlot& qp, uint32_t ci,
                         uint8_t wqe_opcode = 0) {
  CqeInfo info{};
  info.cqe_opcode = cqe_opcode;
  info.syndrome = syndrome;
  info.wqe_opcode = wqe_opcode;
  info.wqe_counter = static_cast<uint16_t>(ci & 0xffff);
  info.qpn = qp.qpn;
  return info;
}

// What executing the head WQE came to.
enum class ExecOutcome {
  done,         // completed (successfully or with an error CQE)
  stall_rnr,    // responder has no receive posted
  stall_retry,  // no answer from the responder (missing, not ready, or dead)
};

class Engine {
 public:
  using Clock = uint64_t (*)();

  explicit Engine(Segment* seg);

  // This process's engine over its attached segment (made on first use).
  static Engine* process_engine();

  // A doorbell write reached the device: the 8-byte doorbell value, or the first 8 bytes of a
  // BlueFlame copy (both are the head of a control segment). The value is the write itself, as a
  // NIC receives it, not a later read of the register another QP may share.
  void on_doorbell(uint64_t ctrl_head);

  // Runs the send queue of qp until it is empty or stalled. Safe from any thread or process: one
  // runner at a time; a caller that finds it busy leaves its work to the runner, which re-checks.
  // force_retry: try a stalled head WQE now (the responder just posted a receive).
  void kick_sq(QpSlot& qp, bool force_retry = false);

  // Flushes the receive queue of a QP in ERR (WR_FLUSH_ERR for every posted receive).
  void flush_rq(QpSlot& qp);
  // A CQ doorbell in mlx5's form reached the device from a register page of context ctx
  // (cq_doorbell.cpp): arms the CQ it names.
  void on_cq_doorbell(uint32_t ctx, uint64_t value);
  // With qp's receive lock held (its own queue): the receive completion a holder that died was
  // placing is finished (settle_owed).
  void settle_rq(QpSlot& qp) {
    if (qp.srq_ref) return;  // the SRQ's record, settled by the SRQ's next holder
    RecvRef q{&qp, nullptr};
    settle_owed(q);
  }

  // Moves a QP to ERR and flushes both queues, as a device does after an error.
  void enter_error(QpSlot& qp);

  // A process died: what an engine of its left half done on qp's queues is finished now (the
  // receive completion it was placing, the completion events it had taken the arm of qp's CQs
  // for), as the NIC, which does not die with a process, finished it before the death was seen.
  void finish_for_the_dead(QpSlot& qp);
  // The completion event a dead process took cq's arm for and did not write: written now (true).
  bool raise_lost_event(CqSlot& cq);
  // The same, once the raiser named in cq has either written its event or died.
  void raise_owed_event(CqSlot& cq);

  // The CQ enters error, as after an overrun: it takes no more CQEs, its owner gets
  // IBV_EVENT_CQ_ERR and every QP completing into it goes to ERR with IBV_EVENT_QP_FATAL.
  void cq_error(CqSlot& cq);
  // An async event on qp, to its owner (an XRC TGT QP: to every holder of a handle).
  void raise_qp_event(const QpSlot& qp, uint32_t type);

  // Writes one CQE and raises the completion event if the CQ is armed for it. Inline: two per
  // message; a CQE naming staged bytes goes through write_staged_cqe.
  // qp: the QP the CQE names, if the caller has it at hand (its incarnation is stamped on the CQE;
  // else it is looked up by number).
  void write_cqe(CqSlot& cq, const CqeInfo& info, const QpSlot* qp = nullptr) {
    if (info.staged) [[unlikely]]
      return write_staged_cqe(cq, info);
    if (step_write_cqe(cq, info, qp)) step_raise_event(cq, info);
  }

  static uint64_t rnr_delay_us(uint8_t min_rnr_timer);
  static uint64_t transport_timeout_us(uint8_t timeout);

  // ---- Steps (see the top of this file). The send-queue steps need qp's engine lock held. ----

  // The producer index the device goes on with.
  // Each step starts with its scheduling point (one thread-local load outside a scheduled run).
  uint32_t step_fetch_dbrec(QpSlot& qp) {
    sched::point(sched::kPointDevDbrec, qp.qpn);
    return dbrec_checked(seg_, qp, engine_detail::sq_producer(seg_, qp));
  }
  // Whether step_execute_writes may find a run, asked without a call for every WQE of a SEND
  // stream: two or more blocks pending, and a WRITE or READ at the head (its opcode read in the
  // ring: published, the head is below the producer index just read). run_sq asks it first.
  bool run_may_form(const QpSlot& qp, uint32_t producer) const {
    if (((producer - qp.sq_ci) & 0xffff) < 2) return false;
    const auto& head = *seg_->at<CtrlSeg>(qp.sq_off + (qp.sq_ci & (qp.sq_bbs - 1)) * kSendWqeBB);
    uint8_t op = ctrl_opcode(head);
    return op == kOpRdmaWrite || op == kOpRdmaRead;
  }
  // What fetching the WQE at a ring position gave: a WQE; a BlueFlame copy that did not parse
  // (already reported as torn); or a slot holding no WQE for that position (stale).
  enum class Fetch { ok, bad_bf, stale };
  // The WQE at sq_ci into buf (kMaxWqeBBs * kSendWqeBB bytes), and the blocks it takes.
  Fetch step_fetch_wqe(QpSlot& qp, uint8_t* buf, uint32_t* bbs) {
    sched::point(sched::kPointDevWqe, qp.sq_off + (qp.sq_ci & (qp.sq_bbs - 1)) * kSendWqeBB);
    return fetch_wqe_at(qp, qp.sq_ci, buf, bbs);
  }
  ExecOutcome step_execute(QpSlot& qp, const uint8_t* wqe, CqeInfo* out);
  // Executes a run of plain RDMA WRITEs at the head with one DMA call; returns how many (0: the
  // head is not such a run, or something in it needs the one-at-a-time path and its errors).
  uint32_t step_execute_writes(QpSlot& qp, uint32_t producer);
  // Its parts (engine_batch.cpp): the WQEs a run may take at most (0: none here), the run's WQEs
  // added one by one while they qualify, and the run's completions.
  struct Run;
  uint32_t run_span(QpSlot& qp, uint32_t producer);
  bool add_to_run(QpSlot& qp, const QpSlot& r, Run& run);
  void complete_run(QpSlot& qp, QpSlot* r, const Run& run);
  // The head WQE (bbs blocks) is done: its CQE if signaled or failed, the consumer index past it,
  // and a failure (other than a flush) stops the send queue.
  void step_complete(QpSlot& qp, const CqeInfo& info, bool signaled, uint32_t bbs) {
    bool error = info.cqe_opcode == kCqeReqErr;
    if (signaled || error) write_cqe(cq_slot(h_, qp.send_cq), info, &qp);
    qp.sq_ci += bbs;
    if (info.tm_rndv) [[unlikely]]
      tm_rndv_finish(qp, info.tm_rndv);
    // A flush completion comes from a queue already stopped.
    if (error && info.syndrome != kSynWrFlush) send_queue_error(qp);
  }
  // Executes one tag list operation of a TM SRQ, as a NIC does a command of the SRQ's command
  // queue (engine_tm.cpp). false: a DEL found no posted tag there.
  bool tm_list_op(SrqSlot& srq, const TmListOp& op);
  // Places one CQE in its ring; false: the CQ is in error (overrun) and took nothing. qp: as for
  // write_cqe. owed: a receive queue's record (QpSlot::rq_owed), given the slot as soon as it is
  // taken (complete_recv).
  bool step_write_cqe(CqSlot& cq, const CqeInfo& info, const QpSlot* qp = nullptr,
                      std::atomic<uint64_t>* owed = nullptr);
  void step_raise_event(CqSlot& cq, const CqeInfo& info) {
    if (cq.chan_wfd < 0) return;  // no completion channel: an armed CQ has nowhere to signal
    raise_if_armed(cq, info);
  }

 private:
  void write_staged_cqe(CqSlot& cq, const CqeInfo& info);
  // Whether the CQE of reserved slot pi is in the ring (or consumed already).
  bool cqe_placed(const CqSlot& cq, uint32_t pi);
  // Fills the ring slot of reserved index pi (the ring's current word) and publishes it.
  // (Inlined into step_write_cqe: a call per CQE was a fifth of the CQE's instructions.)
  [[gnu::always_inline]] inline void fill_cqe(CqSlot& cq, uint64_t ring_word, uint32_t pi,
                                              const CqeInfo& info, const QpSlot* qp);
  void raise_if_armed(CqSlot& cq, const CqeInfo& info);
  // kick_sq inside an engine section: run the send queue, or leave it to the runner inside.
  void run_or_leave(QpSlot& qp);
  void run_sq(QpSlot& qp, bool force_retry);
  // The WQE at ring position pos into buf: the common one-block WQE of the ring without a call
  // (fetch_one_block, device/doorbell.h; not in a scheduled run), anything else the general way.
  Fetch fetch_wqe_at(QpSlot& qp, uint32_t pos, uint8_t* buf, uint32_t* bbs) {
    if (!sched::scheduled() && fetch_one_block(seg_, qp, pos, buf)) {
      *bbs = 1;
      return Fetch::ok;
    }
    return fetch_wqe_general(qp, pos, buf, bbs);
  }
  Fetch fetch_wqe_general(QpSlot& qp, uint32_t pos, uint8_t* buf, uint32_t* bbs);
  // The head WQE of a queue in ERR or SQE: flushed (or stepped over if it is no WQE).
  void flush_head(QpSlot& qp, uint8_t* buf);
  // A slot at sq_ci that holds no valid WQE: a local QP operation error.
  void fail_malformed(QpSlot& qp, Fetch got);
  // Whether the stalled head WQE is tried now: its retry is due (or forced).
  bool retry_now(QpSlot& qp, bool* force_retry);
  bool retry_due(QpSlot& qp);
  // The head WQE got no answer: stall it, or fail it once its retry budget is spent. Returns
  // whether the runner goes on (it failed) or stops (it waits).
  bool stall_or_fail(QpSlot& qp, ExecOutcome out, const CqeInfo& info, uint8_t wqe_opcode,
                     uint32_t bbs);

  // One message of a connected QP (RC, UC, XRC) to its responder (engine_exec.cpp).
  struct Exchange {
    QpSlot& qp;
    QpSlot& r;
    const engine_detail::ParsedWqe& w;
    CqeInfo* out;
    uint32_t npk;     // packets the message takes on the requester's path
    bool unreliable;  // UC: no acknowledgements
    int local_pid;    // where the requester's buffers are (0: this process)
    int remote_pid;
    uint16_t my_lid;
    // Whose keys an RDMA or atomic request is checked against: the responder QP's PD, or for XRC
    // the PD of the XRC SRQ the request names (a TGT QP has none of its own).
    uint32_t key_pd;
    uint32_t key_owner;
  };
  // XRC: RDMA and atomics are checked against, and land in, the XRC SRQ the request names.
  bool xrc_key_domain(Exchange& x);
  // Memory windows (engine_mw.cpp): a bind executed for QP qp; an invalidate of a type 2 window
  // of PD pd by its key (LOCAL_INV, or SEND with invalidate at the responder). false: the error.
  bool bind_mw(const QpSlot& qp, const BindSeg& b);
  bool invalidate_mw(uint32_t pd, uint32_t key);
  ExecOutcome exec_message(Exchange& x);  // one of the three below, by opcode
  ExecOutcome exec_rdma(Exchange& x);
  ExecOutcome exec_atomic(Exchange& x);
  ExecOutcome exec_send(Exchange& x);
  // Tag matching (engine_tm.cpp). What a message to a TM SRQ came to, decided under the SRQ's
  // lock: matched (op kTmOpConsumedMsg or kTmOpConsumed, done without an SRQ receive) or to be
  // delivered into an SRQ receive (kTmOpUnexpected, kTmOpNoTag).
  struct TmVerdict {
    uint8_t op;
    uint8_t syndrome;  // a matched eager message that did not fit or could not be placed
    uint16_t index;    // the tag
    uint32_t app_ctx;
    uint64_t tag;
    uint32_t bytes;  // placed in the tagged buffer
    bool matched() const { return op == kTmOpConsumedMsg || op == kTmOpConsumed; }
  };
  TmVerdict tm_classify(Exchange& x, SrqSlot& srq);
  ExecOutcome tm_matched(Exchange& x, SrqSlot& srq, const TmVerdict& v);
  void tm_rndv_finish(QpSlot& qp, uint32_t ref);
  void tm_send_fin(QpSlot& qp, const QpSlot* r, const TmTag& t);

  // The packet wire (engine_wire.cpp, docs/design/reliability.md): on while fault rules are set or
  // this process writes a capture (EMU_PCAP); off, a message is one DMA and this is one test.
  bool wire_on() const {
    return pcap_ != nullptr || h_->faults.nrules.load(std::memory_order_relaxed) != 0;
  }
  struct WirePacket;
  struct WireRx;
  ExecOutcome exec_on_wire(Exchange& x);
  FaultKind wire_fate(const Exchange& x, const FaultRules& rules, const WireQp& ws,
                      bool from_responder, uint8_t fop, uint32_t psn);
  void wire_burst(const Exchange& x, const FaultRules& rules, WireQp& ws, bool responder,
                  uint32_t from, uint32_t count, WireRx& rx);
  bool wire_answer(const Exchange& x, const FaultRules& rules, WireQp& ws, uint8_t op, uint8_t aeth,
                   uint32_t psn);
  // exec_on_wire's steps: the message executed once all its requests arrived (false with *out:
  // the requester is done with it for now), its answer's fate after execution (*gap: READ
  // responses with a hole the requester NAKs), and a sequence NAK's fate.
  struct WireMessage;
  bool wire_execute_once(Exchange& x, WireQp& ws, ExecOutcome* out);
  bool wire_answered(const Exchange& x, const FaultRules& rules, WireQp& ws, const WireMessage& m,
                     bool* gap);
  bool wire_nak_answered(const Exchange& x, const FaultRules& rules, WireQp& ws, const WireRx& rx);
  void wire_capture(const Exchange& x, const WirePacket& p);

  // Error injection (engine_inject.cpp, emu/inject.h): on while wc rules are set, one test.
  bool inject_on() const { return h_->inject.wc_rules.load(std::memory_order_relaxed) != 0; }
  // The head WQE (buf, bbs blocks), on its first execution: completed with an injected status
  // (and the send queue stopped) if a rule acts on it.
  bool inject_head(QpSlot& qp, const uint8_t* buf, uint32_t bbs);
  // UD: how many copies of the datagram arrive (0, 1, 2), and its capture.
  int ud_on_wire(const QpSlot& qp, const engine_detail::ParsedWqe& w, int local_pid, uint32_t dqpn,
                 uint32_t qkey);
  // What the requester sees when...
  ExecOutcome dropped(Exchange& x);  // UC: a message nobody takes is gone, the requester done
  ExecOutcome gone(Exchange& x);     // the responder vanished: UC dropped, else retried
  ExecOutcome rnr(Exchange& x);      // no receive posted (its caller holds the receive lock)
  ExecOutcome responder_error(Exchange& x, uint8_t req_syndrome, uint32_t event);
  // A failed DMA of a WRITE or READ: whose side it was decides the error.
  ExecOutcome rdma_copy_failed(Exchange& x, CopyResult cr);
  CopyResult rdma_copy(Exchange& x, uint64_t va, int rpid, const MrSlot* rmr);
  // A copy that faulted (`cr`: a page of a buffer gone, the program unmapped registered memory),
  // once more with the spans of this process's MRs (smr, dmr: each span's MR, or nullptr) taken
  // through the MR's pages in the registration file, which the MR keeps as a NIC keeps pinned
  // pages. `cr` if no span could be (the pages are not in the file: EMU_SHARED_MR=0, a partial
  // page, ODP) or a side is another process's (its memory is reached with process_vm_*).
  // A WQE mixing inline data and pointers (ParsedWqe::mixed): its message gathered into `small`
  // (kMixedOnStack bytes) or `large`, and w->local made that one span of the engine's memory.
  // 0, or the syndrome of the requester's error.
  static constexpr uint32_t kMixedOnStack = 1024;  // (the engine may run on a signal stack)
  static constexpr uint32_t kMixedMax = 64u << 20;
  uint8_t gather_mixed(const QpSlot& qp, engine_detail::ParsedWqe* w, uint8_t* small,
                       std::vector<uint8_t>* large);
  CopyResult copy_via_mr_pages(CopyResult cr, int spid, const MemSpan* src, int nsrc,
                               const MrSlot* const* smr, int dpid, const MemSpan* dst, int ndst,
                               const MrSlot* const* dmr);

  // The receive queue a responder takes WQEs from: its own, or its SRQ (engine_recv.cpp).
  struct RecvRef {
    QpSlot* qp;
    SrqSlot* srq;  // nullptr: the QP's own receive queue
  };
  // For an XRC TGT QP the SRQ is the one the packet names (xrc_srqn); nullptr srq and false: no
  // such SRQ in the TGT QP's domain. The receive-queue accessors below are inline for a QP's own
  // queue (a SEND asks each once) and leave an SRQ to engine_recv.cpp.
  bool recv_of(QpSlot& r, uint32_t xrc_srqn, RecvRef* out) {
    *out = RecvRef{&r, nullptr};
    if (r.type != kQptXrcRecv && !r.srq_ref) [[likely]]
      return true;
    return recv_of_srq(r, xrc_srqn, out);
  }
  bool recv_of_srq(QpSlot& r, uint32_t xrc_srqn, RecvRef* out);
  RecvRef recv_of(QpSlot& r) {
    RecvRef q;
    recv_of(r, 0, &q);
    return q;
  }
  // The process whose memory the receive buffers are in, and the CQ the completion goes to.
  int recv_pid(const RecvRef& q) const { return h_->procs[q.srq ? q.srq->owner : q.qp->owner].pid; }
  CqSlot& recv_cq(const RecvRef& q) {
    return cq_slot(h_, q.srq && q.srq->xrcd_ref ? q.srq->cq : q.qp->recv_cq);
  }
  // The lock that serialises the queue's consumers (held with ShmLockGuard; nothing that may
  // flush this queue, such as enter_error, runs under it).
  static ShmLock& recv_lock(const RecvRef& q) { return q.srq ? q.srq->lock : q.qp->rq_lock; }
  bool recv_empty(RecvRef& q);
  // Whether the queue is empty, the requester then registered to be woken by the next receive.
  // A QP's own queue below the producer index the device last read is not empty: no load of the
  // receiver's doorbell record (QpSlot::rq_pi_seen); caught up with it, the record is read again
  // (recv_empty's own-queue half, inline: a receiver that posts one receive per message has the
  // device catch up every time).
  bool recv_empty_wait(const QpSlot& requester, RecvRef& q) {
    if (!q.srq) [[likely]] {
      QpSlot& r = *q.qp;
      if (((r.rq_ci ^ r.rq_pi_seen) & 0xffff) != 0) return false;
      r.rq_pi_seen = engine_detail::rq_producer(seg_, r);
      if ((r.rq_ci & 0xffff) != r.rq_pi_seen) return false;
    }
    return recv_empty_register(requester, q);
  }
  bool recv_empty_register(const QpSlot& requester, RecvRef& q);
  // The data segments of the next receive WQE, their size in bytes and the index the CQE names.
  const uint8_t* recv_head(const RecvRef& q, uint32_t* seg_bytes, uint16_t* wqe_index) {
    if (q.srq) [[unlikely]]
      return srq_head(*q.srq, seg_bytes, wqe_index);
    const QpSlot& r = *q.qp;
    *wqe_index = static_cast<uint16_t>(r.rq_ci & 0xffff);
    *seg_bytes = r.rq_stride;
    return seg_->at<uint8_t>(r.rq_off) + (r.rq_ci & (r.rq_wqe_cnt - 1)) * r.rq_stride;
  }
  const uint8_t* srq_head(const SrqSlot& s, uint32_t* seg_bytes, uint16_t* wqe_index);
  void recv_consume(RecvRef& q) {
    if (q.srq) [[unlikely]]
      return srq_consume(*q.srq, srq_next(*q.srq));
    ++q.qp->rq_ci;
  }
  // The SRQ's WQE after its head, read before the head's completion is placed: from then on the
  // driver may link the head WQE anew.
  uint16_t srq_next(const SrqSlot& s);
  void srq_consume(SrqSlot& s, uint16_t next);
  static std::atomic<uint64_t>& recv_owed_of(const RecvRef& q) {
    return q.srq ? q.srq->owed : q.qp->rq_owed;
  }
  // A receive's completion and the WQE's consumption as one step against death, under the queue's
  // lock (the caller's): the CQE is placed (its slot recorded in the queue's rq_owed as soon as it
  // is taken), then the WQE consumed, then the record cleared. A holder killed in between leaves
  // the record for the lock's next holder (settle_owed), so the receive is neither lost (its CQE
  // slot a hole that stops the CQ, its WQE gone) nor completed twice. false: the CQ is in error
  // and took nothing (the WQE is consumed all the same). The completion event is the caller's,
  // once the lock is down (step_raise_event).
  // (Inline, below the class: one per message, and its callers are in four files.)
  inline bool complete_recv(RecvRef& q, CqSlot& cq, const CqeInfo& rc, const QpSlot* qp = nullptr);
  // Staged, then failed at the responder (a SEND with invalidate naming a bad key): the staged
  // bytes released, the CQE completed without them.
  bool complete_recv_unstaged(RecvRef& q, CqSlot& cq, const CqeInfo& rc, const QpSlot* qp);
  // Called by each holder of a receive queue's lock before it uses the queue: finishes what a
  // holder that died inside complete_recv left. A CQE it placed: the WQE is consumed. A slot it
  // took but did not fill: the WQE completes there as flushed (IBV_WC_WR_FLUSH_ERR; what it had
  // received is not known) and is consumed.
  // (The check inline: every holder asks, and the record is almost always clear.)
  void settle_owed(RecvRef& q) {
    uint64_t v = recv_owed_of(q).load(std::memory_order_acquire);
    if (v != 0) [[unlikely]]
      settle_owed_record(q, v);
  }
  void settle_owed_record(RecvRef& q, uint64_t v);
  // The receive CQE of a SEND (engine_exec.cpp).
  // (exec_send's only callee of its kind: inlined there.)
  [[gnu::always_inline]] inline void send_cqe(const Exchange& x, const RecvRef& rq, CqeInfo* rc,
                                              uint8_t* resp_syndrome, const TmVerdict& tm);
  // A SEND's payload into the head receive WQE of rq, whose lock the caller holds. false: the
  // requester's outcome is *early and the receive stays; true: consume it (*resp_syndrome: the
  // responder's error, if any).
  // (exec_send's only callee of its kind: inlined there.)
  [[gnu::always_inline]] inline bool send_payload(Exchange& x, const RecvRef& rq, CqeInfo* rc,
                                                  uint8_t* resp_syndrome, ExecOutcome* early);
  // Its ways of moving the payload (each returns as send_payload does): in the receive CQE, through
  // shared windows into the receive buffers, or by a DMA call (with its errors).
  [[gnu::always_inline]] inline bool payload_into_cqe(Exchange& x, CqeInfo* rc, ExecOutcome* early);
  [[gnu::always_inline]] inline bool payload_through_windows(Exchange& x,
                                                             const engine_detail::Sges& scatter,
                                                             const uint64_t* window,
                                                             ExecOutcome* early);
  [[gnu::always_inline]] inline bool payload_by_dma(Exchange& x, const RecvRef& rq,
                                                    const uint8_t* rwqe,
                                                    const engine_detail::Sges& scatter,
                                                    uint8_t* resp_syndrome, ExecOutcome* early);
  // Receive staging (engine_stage.cpp): the payload (after `prefix_len` bytes of `prefix` in this
  // process, a UD GRH) into the staging area of the receive CQ, rc then naming the slots.
  // not_staged: the CQ has no area (rc asks for one) or no room; place the payload directly.
  enum class Staged { not_staged, staged, src_fault };
  Staged stage_payload(CqSlot& cq, const void* prefix, uint32_t prefix_len, int src_pid,
                       const engine_detail::Sges& src, CqeInfo* rc);
  void release_staged(CqSlot& cq, const CqeInfo& info);
  // Shared windows (EMU_SHARED_MR) into the first msg_len bytes of every buffer of a receive WQE's
  // scatter list (checked by recv_scatter); false: not all of them have one.
  bool recv_windows(const RecvRef& rq, const uint8_t* rwqe, const engine_detail::Sges& scatter,
                    uint64_t msg_len, uint64_t* window);
  // The MR of each buffer of a receive WQE's scatter list (checked by recv_scatter; nullptr for
  // one whose key no longer translates).
  void recv_mrs(const RecvRef& rq, const uint8_t* rwqe, const engine_detail::Sges& scatter,
                uint64_t msg_len, const MrSlot** mrs);
  // Translates a receive WQE's scatter list with the responder's keys; false: a bad key.
  bool recv_scatter(const RecvRef& q, const uint8_t* wqe, uint32_t seg_bytes,
                    engine_detail::Sges* out, bool* addr_is_va);
  // UD: one packet to a QP or a multicast group.
  struct UdPacket {
    const CtrlSeg* ctrl;
    const engine_detail::Sges* local;
    int local_pid;
    uint32_t qkey;
    uint32_t src_qpn;
    uint16_t slid;
    uint8_t sl;
    bool has_grh;
    Grh grh;
  };
  ExecOutcome exec_ud(QpSlot& qp, const engine_detail::ParsedWqe& w, int local_pid, CqeInfo* out);
  void deliver_ud(const UdPacket& pkt, QpSlot& r);
  // The packet into the head receive WQE of q, whose lock the caller holds. false: the packet is
  // lost and the receive stays; true: consume it (*syndrome: the responder's error, if any).
  // The head receive WQE's index and scatter list, if it takes `need` bytes; else false and the
  // receiver's syndrome (a bad L_Key in it: LOC_PROT, too small: LOC_LEN).
  bool recv_target(const RecvRef& q, uint64_t need, uint16_t* wqe_index,
                   engine_detail::Sges* scatter, uint8_t* syndrome, bool* addr_is_va = nullptr);
  // Raw packet QPs (engine_raw.cpp): a frame to the QPs whose flow rules take it on every port
  // its destination MAC reaches.
  struct RawFrame;
  ExecOutcome exec_raw(QpSlot& qp, const engine_detail::ParsedWqe& w, int local_pid, CqeInfo* out);
  void steer_raw(const RawFrame& fr, uint32_t dev, uint8_t port);
  void deliver_raw(const RawFrame& fr, const FlowSlot& flow);
  bool raw_payload(const RawFrame& fr, const RecvRef& q, uint16_t* wqe_index, uint8_t* syndrome);
  void capture_raw(const engine_detail::Sges& local, int local_pid);
  bool ud_payload(const UdPacket& pkt, const RecvRef& q, CqeInfo* rc, uint8_t* syndrome);
  // IBV_EVENT_COMM_EST: the first packet reaching a QP still in RTR (once per connection). Inline:
  // asked per message, and the QP is rarely in RTR.
  void raise_comm_est(QpSlot& r) {
    if (r.qp_state.load(std::memory_order_relaxed) == kQpsRtr) [[unlikely]]
      raise_comm_est_once(r);
  }
  void raise_comm_est_once(QpSlot& r);
  void send_queue_error(QpSlot& qp);
  bool peer_still_there(QpSlot& qp, const QpSlot& r);
  void set_stall(QpSlot& qp, uint32_t kind, uint64_t delay_us);
  void stop_if_owner_died(QpSlot& qp);
  void clear_stall(QpSlot& qp);

  Segment* seg_;
  Header* h_;
  // Every time the engine reads: the run's logical clock inside a scheduled run, else now_.
  uint64_t now() const { return sched::scheduled() ? sched::logical_time_ns() : now_(); }
  // The clock of the transport timers (ACK timeout, RNR timer): now() less the time they were held
  // (Header::timers_held_since/_ns); while held, it stands still.
  uint64_t timer_now() const;
  Clock now_;
  wire::Pcap* pcap_;  // EMU_PCAP's capture, or nullptr
};

inline bool Engine::complete_recv(RecvRef& q, CqSlot& cq, const CqeInfo& rc, const QpSlot* qp) {
  if (rc.staged && rc.cqe_opcode == kCqeRespErr) [[unlikely]]
    return complete_recv_unstaged(q, cq, rc, qp);
  std::atomic<uint64_t>& owed = recv_owed_of(q);
  uint16_t next = q.srq ? srq_next(*q.srq) : 0;
  bool placed = step_write_cqe(cq, rc, qp, &owed);
  if (!placed && rc.staged) release_staged(cq, rc);
  EMU_KILL_POINT(KillPoint::recv_cqe);
  if (q.srq) [[unlikely]]
    srq_consume(*q.srq, next);
  else
    ++q.qp->rq_ci;
  owed.store(0, std::memory_order_release);
  return placed;
}

}  // namespace emu
