// SPDX-License-Identifier: BSD-2-Clause
// The device as a driver reaches it: the entry points a doorbell, a receive post, a QP state change
// or a poll have into the NIC. The NIC itself (emu/device/: the engine and its steps) is private
// to emu/; these calls run its steps on this process's engine, in this thread or on the device
// thread (EMU_ENGINE).
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"

namespace emu {

// A doorbell write reached the device: the 8-byte doorbell value, or the first 8 bytes of a
// BlueFlame copy (the head of a control segment). The device runs the QP it names: now, in this
// thread (EMU_ENGINE=inline), or on the process's device thread.
void device_doorbell(uint64_t ctrl_head);

// A CQ doorbell written to a register page of context ctx in mlx5's layout (the mlx5 personality):
// the 8 bytes at offset 0x20 as stored (big-endian: arm sequence << 60 | command << 56 | consumer
// index << 32 | CQ number). Arms the CQ it names, if it is one of that context's.
void device_cq_doorbell(uint32_t ctx, uint64_t stored);

// Runs qp's send queue until it is empty or stalled. force_retry: try a stalled head WQE now (the
// responder just posted the receive it waited for).
void device_kick_sq(QpSlot& qp, bool force_retry = false);

// Flushes the receive queue of a QP in ERR (WR_FLUSH_ERR for every posted receive).
void device_flush_rq(QpSlot& qp);

// Moves a QP to ERR and flushes both queues, as a device does after an error.
void device_enter_error(QpSlot& qp);

// With qp's receive lock held: finishes the receive completion a holder that died was placing
// (a QP being reset or destroyed leaves no hole in its CQ).
void device_settle_rq(QpSlot& qp);

// A process died: what its engine left half done on qp's queues is finished now, as a NIC, which
// does not die with a process, would have finished it before anyone saw the death: the receive
// completion it was placing (consumed, or flushed if its CQE was not written) and the completion
// events it had taken the arm of qp's CQs for. The CM calls it before it reports a peer gone, so
// that a message the dead delivered is signalled before its disconnect.
void device_finish_for_the_dead(QpSlot& qp);

// The completion event a process that died had taken cq's arm for: written now (true); false if
// no dead process owes one.
bool device_raise_lost_event(CqSlot& cq);

// This process's mappings of the registered memory of processes that have died (they would keep
// those pages alive) are unmapped. Called outside any EngineSection (it waits for the engines):
// the provider does so when it registers memory or creates a QP.
void reap_dead_windows(Segment* seg);

// What decides where a connected QP's packets go changed: a QP's path or destination attributes
// (ibv_modify_qp) or a port's state. Called once per change, after it: every requester's cached
// responder (QpSlot::resp_off) is then looked up anew at its next message. (A responder that was
// destroyed, reset, left a receiving state or lost its process is seen per message without it.)
inline void device_routes_changed(Header* h) {
  h->route_gen.fetch_add(1, std::memory_order_seq_cst);  // after the change's stores
}

// EMU_ENGINE=thread: doorbells are queued to the device thread and not yet taken (a poller that
// finds its CQ empty then yields to it).
bool device_thread_busy();

// One operation on a tag matching SRQ's tag list (ibv_post_srq_ops(3)), as the driver hands it
// to the device. The driver owns the tag indexes (it keeps the free ones, as mlx5's does).
struct TmListOp {
  uint8_t op;           // kTmOpAppend, kTmOpRemove or kTmOpNoop (emu/wqe.h)
  bool signaled;        // a completion on the SRQ's CQ
  bool sync;            // IBV_OPS_TM_SYNC: unexpected is software's count of handled messages
  uint32_t index;       // the tag (ADD, DEL)
  uint32_t unexpected;  // software's count when the operation was posted
  uint64_t tag;
  uint64_t mask;
  uint64_t addr;  // ADD: the tagged buffer
  uint32_t length;
  uint32_t lkey;
};

// Executes a tag list operation now (under the SRQ's lock, in this thread); its completion, if
// signaled, is in the SRQ's CQ when this returns. false: a DEL found no posted tag (a consumed
// one): its completion says IBV_WC_TM_ERR.
bool device_tm_op(SrqSlot& srq, const TmListOp& op);

// The QP went to RESET: the device forgets what it saw of its rings and doorbells (driver
// counters restart at 0).
void reset_race_state(Segment* seg, QpSlot& qp);

}  // namespace emu
