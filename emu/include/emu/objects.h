// SPDX-License-Identifier: BSD-2-Clause
// One owner for each shared object's life: every slot kind (context, PD, MR, CQ, SRQ, QP, XRC TGT
// QP) is made and retired here, with the rings it owns. The verbs provider keeps only its
// process-local side (its objects, locks, lists, the errnos); the sweep of dead processes and the
// unit-test rig call the same functions.
//
// Made: the slot is claimed live and owned by this process first (so a death from then on is the
// sweep's to clean up), then its rings are allocated and its fields filled. Retired: dying first
// (unfindable, not handed out), rings freed only once no engine can be inside (wait_for_engines),
// the slot freed last with a release store. Where the provider has work of its own between those
// steps, the steps are separate functions: stop_*, then wait_for_engines (emu/reclaim.h), then
// free_*.
#pragma once
#include <atomic>
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

// A send/receive QP (RC, UC, UD, XRC INI). Ring sizes as the driver computed them from its caps.
struct QpSpec {
  uint32_t dev;
  uint32_t ctx;  // kMaxContexts: none (no async events)
  uint8_t type;  // QpType, not kQptXrcRecv
  uint8_t sq_sig_all;
  uint16_t uar_index;  // the doorbell register its driver rings
  uint32_t pd;
  uint32_t send_cq;
  uint32_t recv_cq;
  uint32_t srq_ref;     // 1 + the SrqSlot index it receives from; 0: its own receive queue
  uint32_t sq_bbs;      // power of two
  uint32_t rq_wqe_cnt;  // power of two
  uint32_t rq_stride;   // bytes per receive WQE
  uint64_t dc_key = 0;  // a DCT's access key
};

// no_memory: no free slot or no room for a ring (nothing is left behind). A QP on an SRQ counts
// in its attached_qps until free_qp.
Status create_qp(Segment* seg, const QpSpec& spec, uint32_t* idx);
// An XRC TGT QP: no PD, CQs or queues of its own (tgt_qp_attach, emu/xrc.h, joins it to its
// domain), but the minimal rings every QP has, so reset and destroy take one path.
Status create_tgt_qp(Segment* seg, uint32_t dev, uint32_t ctx, uint32_t* idx);

// The device stops on the QP (no engine inside its send or receive side when this returns, and
// none enters again) and it becomes dying. Then wait_for_engines, then free_qp.
void stop_qp(Segment* seg, QpSlot& qp);
// Its rings and slot go. Only once no engine can be inside it (after wait_for_engines, or for a
// slot whose creation is being undone before anyone was told its number).
void free_qp(Segment* seg, QpSlot& qp);
// stop_qp, wait_for_engines, free_qp.
void retire_qp(Segment* seg, QpSlot& qp);

// The move to RESET, on the shared side: with the device kept off the QP, the doorbell records
// and the device's indices and stall restart at 0. Returns the new incarnation (completions of
// older ones are dropped at poll). The caller holds its own post locks.
uint32_t reset_qp_device_state(Segment* seg, QpSlot& qp);

// The QP's head WQE no longer waits for a retry: the counts pollers use to find stalled work
// drop with it. The engine calls this per WQE: a load first, an exchange only when stalled.
inline void clear_stall(Header* h, QpSlot& qp) {
  if (qp.stall.load(std::memory_order_relaxed) != kStallNone &&
      qp.stall.exchange(kStallNone) != kStallNone) {
    cq_slot(h, qp.send_cq).stalled_qps.fetch_sub(1);
    h->procs[qp.owner].stalled_qps.fetch_sub(1);
    qp.stall_attempts = 0;
  }
}

struct CqSpec {
  uint32_t dev;
  uint32_t ctx;
  uint32_t log_cqe_cnt;  // the ring holds 1 << log_cqe_cnt CQEs
  int32_t chan_wfd;      // completion channel's write end in the owner, -1 if none
  uint64_t chan_uid;
  bool stamp = false;   // CQEs carry a timestamp
  uint32_t format = 0;  // CqFormat
};
// The ring starts with every CQE invalid and owned by software for the first pass.
Status create_cq(Segment* seg, const CqSpec& spec, uint32_t* idx);
void retire_cq(Segment* seg, CqSlot& cq);
// Moves a CQ to a ring of 1 << log_cqe_cnt CQEs while engines in any process complete into it
// (cq_resize.cpp; docs/design/engine.md "Resizing a CQ"). The caller is the CQ's consumer, whose
// index is ci, and polls nothing until it returns; *ring_off is then the ring to poll. invalid:
// more completions are outstanding than the new ring holds; no_memory: no room for it.
Status resize_cq(Segment* seg, CqSlot& cq, uint32_t log_cqe_cnt, uint32_t ci, uint64_t* ring_off);
// Gives the CQ a receive staging area of `bytes` (staging_area_bytes) if it has none; its poller
// calls this when a CQE asks for one. no_memory: no room (the CQ goes without).
Status attach_staging(Segment* seg, CqSlot& cq, uint64_t bytes);

struct SrqSpec {
  uint32_t dev;
  uint32_t ctx;
  uint32_t pd;
  uint32_t wqe_cnt;       // power of two
  uint32_t stride;        // bytes per WQE, power of two
  uint32_t xrcd_ref = 0;  // XRC SRQs: 1 + the XrcdSlot index (it counts as one of the domain's
                          // objects); 0 for a basic SRQ
  uint32_t cq = 0;        // XRC and TM SRQs: the CqSlot its completions go to
  uint32_t tm_tags = 0;   // TM SRQs: entries of the tag list (0: not a TM SRQ)
};
// The WQEs' next segments are the driver's to link (its free list).
Status create_srq(Segment* seg, const SrqSpec& spec, uint32_t* idx);
// Dying under the SRQ's device lock (no engine half way through taking a WQE). Then
// wait_for_engines, then free_srq.
void stop_srq(Segment* seg, SrqSlot& srq);
// Its rings go, an XRC SRQ leaves its domain (once: xrc_srq_drop), the slot goes.
void free_srq(Segment* seg, SrqSlot& srq);

struct MrSpec {
  uint32_t pd;      // a live PdSlot (the MR is on its device)
  uint32_t access;  // ibv_access_flags
  uint64_t addr;
  uint64_t length;
  uint64_t iova;
};
// The key (lkey == rkey) is the slot's: MrSlot::key. The EMU_SHARED_MR fields are the caller's
// to fill after.
Status create_mr(Segment* seg, const MrSpec& spec, uint32_t* idx);
// Once this returns no engine touches the registered memory any more (as ibv_dereg_mr promises).
void retire_mr(Segment* seg, MrSlot& mr);
// ibv_rereg_mr: the MR takes spec's PD, rights and translation under its key. Engines are kept
// off it meanwhile (as retire_mr), so none sees half of the old and half of the new. `share`, if
// given, carries the shared window (share_*) the MR takes; else other pages drop the old one.
void rereg_mr(Segment* seg, MrSlot& mr, const MrSpec& spec, const MrSlot* share = nullptr);

Status create_pd(Segment* seg, uint32_t dev, uint32_t ctx, uint32_t* idx);
// The caller has checked that nothing of its own uses it (EBUSY at the verbs edge).
void retire_pd(PdSlot& pd);

struct ContextSpec {
  uint32_t dev;
  uint32_t uar_count;  // doorbell registers (shared, then thread-domain ones)
  int32_t async_wfd;   // write end of the async-event pipe in the owner
};
// The registers are laid out (which context, index, device each is) before the pipe is published:
// async_wfd is stored last, with release, as another process delivering a port event reads it.
Status create_ctx(Segment* seg, const ContextSpec& spec, uint32_t* idx);

// The rings a retired slot owns, freed: one list per slot kind, used by the free_* and retire_*
// functions and by the sweep of dead processes. The offsets are left as they were.
void free_rings(Segment* seg, const QpSlot& qp);
void free_rings(Segment* seg, const SrqSlot& srq);
void free_rings(Segment* seg, const CqSlot& cq);
void free_rings(Segment* seg, const ContextSlot& ctx);
inline void free_rings(Segment*, const MrSlot&) {}
inline void free_rings(Segment*, const PdSlot&) {}

}  // namespace emu
