// The device engine: what a NIC does with what the driver wrote. Its steps are explicit so a
// scheduler can drive them one at a time: fetch the doorbell record, fetch a WQE, execute it,
// complete it. The engine has no thread of its own; whoever runs it (the posting thread, a poller,
// a scheduler) calls these entry points, and it behaves the same in any attached process.
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"
#include "emu/wqe.h"

namespace emu::engine_detail {
struct Sges;
}

namespace emu {

struct CqeInfo {
  uint8_t cqe_opcode;    // CqeOpcode
  uint8_t syndrome;      // for error CQEs
  uint8_t wqe_opcode;    // requester: the WQE's opcode
  uint8_t emu_flags;     // CqeEmuFlags
  uint16_t wqe_counter;
  uint16_t slid;
  uint32_t qpn;
  uint32_t src_qpn;
  uint32_t byte_cnt;
  uint32_t imm_be;       // immediate data as it travels (big-endian)
  uint8_t rnr_timer;     // on an RNR stall: the responder's min_rnr_timer code
  uint32_t srqn;         // XRC: the SRQ that took the receive (the CQE's srqn_uidx)
  bool inline_scatter;   // the payload (byte_cnt <= kCqeInlineMax bytes) travels in the CQE
  uint8_t inline_data[kCqeInlineMax];
};

// What executing the head WQE came to.
enum class ExecOutcome {
  done,        // completed (successfully or with an error CQE)
  stall_rnr,   // responder has no receive posted
  stall_retry, // no answer from the responder (missing, not ready, or dead)
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

  // Moves a QP to ERR and flushes both queues, as a device does after an error.
  void enter_error(QpSlot& qp);

  // Writes one CQE and raises the completion event if the CQ is armed for it.
  void write_cqe(CqSlot& cq, const CqeInfo& info);

  void set_clock(Clock c) { now_ = c; }

  static uint64_t rnr_delay_us(uint8_t min_rnr_timer);
  static uint64_t transport_timeout_us(uint8_t timeout);

 private:
  void run_sq(QpSlot& qp, bool force_retry);
  // What fetching the WQE at a ring position gave: a WQE; a BlueFlame copy that did not parse
  // (already reported as torn); or a slot holding no WQE for that position (stale).
  enum class Fetch { ok, bad_bf, stale };
  Fetch fetch_wqe(QpSlot& qp, uint8_t* buf, uint32_t* bbs);
  Fetch fetch_wqe_at(QpSlot& qp, uint32_t pos, uint8_t* buf, uint32_t* bbs);
  // Executes a run of plain RDMA WRITEs at the head with one DMA call; returns how many (0: the
  // head is not such a run, or something in it needs the one-at-a-time path and its errors).
  uint32_t run_write_batch(QpSlot& qp, uint32_t producer);
  ExecOutcome execute(QpSlot& qp, const uint8_t* wqe, CqeInfo* out);
  bool retry_due(QpSlot& qp);
  // The receive queue a responder takes WQEs from: its own, or its SRQ (engine_recv.cpp).
  struct RecvRef {
    QpSlot* qp;
    SrqSlot* srq;  // nullptr: the QP's own receive queue
  };
  // For an XRC TGT QP the SRQ is the one the packet names (xrc_srqn); nullptr srq and false: no
  // such SRQ in the TGT QP's domain.
  bool recv_of(QpSlot& r, uint32_t xrc_srqn, RecvRef* out);
  RecvRef recv_of(QpSlot& r) {
    RecvRef q;
    recv_of(r, 0, &q);
    return q;
  }
  // The process whose memory the receive buffers are in, and the CQ the completion goes to.
  int recv_pid(const RecvRef& q) const;
  CqSlot& recv_cq(const RecvRef& q);
  void recv_lock(RecvRef& q);
  void recv_unlock(RecvRef& q);
  bool recv_empty(RecvRef& q);
  bool recv_empty_wait(const QpSlot& requester, RecvRef& q);
  // The data segments of the next receive WQE, their size in bytes and the index the CQE names.
  const uint8_t* recv_head(const RecvRef& q, uint32_t* seg_bytes, uint16_t* wqe_index);
  void recv_consume(RecvRef& q);
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
  ExecOutcome execute_ud(QpSlot& qp, const CtrlSeg& ctrl, const AvSeg& av,
                         const engine_detail::Sges& local, int local_pid, CqeInfo* out);
  void deliver_ud(const UdPacket& pkt, QpSlot& r);
  void raise_comm_est(QpSlot& r);
  void send_queue_error(QpSlot& qp);
  bool peer_still_there(QpSlot& qp, const QpSlot& r);
  void set_stall(QpSlot& qp, uint32_t kind, uint64_t delay_us);
  void clear_stall(QpSlot& qp);
  void complete_send(QpSlot& qp, const CqeInfo& info, bool signaled);
  void raise_qp_event(const QpSlot& qp, uint32_t type);

  Segment* seg_;
  Header* h_;
  Clock now_;
};

}  // namespace emu
