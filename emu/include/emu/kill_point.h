// SPDX-License-Identifier: BSD-2-Clause
// Process death at a chosen point (EMU_KILL_AT, docs/design/reliability.md "Process death"): the
// process SIGKILLs itself the Nth time it passes a named point, so that a sweep can kill it where
// the emulator's shared state is half changed — a lock held, a heap block half taken, a BlueFlame
// copy half made, a CM connection half set up — and check that the survivors do not hang and
// that nothing of the dead is left.
#pragma once
#include <cstdint>

namespace emu {

enum class KillPoint : uint8_t {
  doorbell,        // after the Nth doorbell of the process (8-byte or BlueFlame)
  qp_lock,         // inside ibv_post_send, holding the QP's send lock (a locked thread mode)
  cq_lock,         // inside ibv_poll_cq, holding the CQ's lock
  srq_lock,        // inside ibv_post_srq_recv, holding the SRQ's shared lock
  bf_copy,         // between the 8-byte stores of a BlueFlame copy
  heap_alloc,      // inside a segment heap allocation: block taken, its order byte not written
  heap_grow,       // inside the heap's growth: its new end stored, its new blocks not yet free
  slot_create,     // inside a table slot's creation: slot live, table lock held
  slot_destroy,    // inside an object's destroy: slot dying, its rings half freed
  engine_lock,     // inside the engine, holding a QP's shared send-engine lock
  recv_lock,       // inside the engine executing a SEND, holding the responder's receive lock
  cm_req_sent,     // RDMA CM: after the connection request went to the peer
  cm_established,  // RDMA CM: before the ESTABLISHED event is handed to the program
  recv_cqe_slot,   // a receive's CQE slot taken by a peer's engine, the CQE not yet written
  recv_cqe,        // a receive's CQE written by a peer's engine, its WQE not yet consumed
  event_raise,     // a completion event's arm taken by an engine, the event not yet written
  count,
};

const char* kill_point_name(KillPoint p);

// Set once, before main, from EMU_KILL_AT: the one flag every point tests.
extern bool g_kill_armed;

// Counts a pass of `p`; SIGKILLs the process at the chosen pass.
void kill_point_hit(KillPoint p);

// What EMU_KILL_AT says: `point[:N]` (N >= 1, default 1) or `random:SEED[:MAXN]` (a point
// and an N in [1, MAXN], default 64, drawn from SEED). false: not a valid setting.
struct KillTarget {
  KillPoint point = KillPoint::count;  // count: none
  uint64_t nth = 0;
};
bool parse_kill_at(const char* text, KillTarget* out);

}  // namespace emu

// One predictable branch on a flag that does not change after load.
#define EMU_KILL_POINT(p)                                                   \
  do {                                                                      \
    if (__builtin_expect(::emu::g_kill_armed, 0)) ::emu::kill_point_hit(p); \
  } while (0)
