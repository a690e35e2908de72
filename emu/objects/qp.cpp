// SPDX-License-Identifier: BSD-2-Clause
// QPs' lives (emu/objects.h): send/receive QPs and XRC TGT QPs, their rings, their reset.
#include "emu/barriers.h"
#include "emu/device.h"  // reset_race_state
#include "emu/kill_point.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/wqe.h"

namespace emu {
namespace {

constexpr uint8_t kMtu1024 = 3;  // ibv_mtu numbering: a new QP's path MTU until modify sets one

struct QpRings {
  uint64_t sq_bytes, rq_bytes, wrec_bytes;  // wrec_bytes 0: no write record
  uint64_t ring_align;
};

// The slot is live (the sweep's if we die) before its rings exist: a death in between leaves
// offsets the sweep frees, 0 for those not yet allocated (free ignores 0).
Status claim_qp(Segment* seg, const QpRings& r, uint32_t* idx) {
  HeapUse use(seg);
  if (seg->alloc_qp(idx) != Status::ok) return Status::no_memory;
  QpSlot& s = qp_slot(seg->hdr(), *idx);
  s.sq_off = seg->alloc(r.sq_bytes, r.ring_align);
  s.rq_off = seg->alloc(r.rq_bytes, r.ring_align);
  s.dbrec_off = seg->alloc(64, 64);
  if (r.wrec_bytes) s.wrec_off = seg->alloc(r.wrec_bytes, 64);
  if (s.sq_off && s.rq_off && s.dbrec_off && (s.wrec_off || !r.wrec_bytes)) return Status::ok;
  free_qp(seg, s);
  return Status::no_memory;
}

// Every QP kind, once its rings are sized: fields other processes read are set before anyone is
// told its number (the creator returns it).
Status make_qp(Segment* seg, const QpSpec& spec, const QpRings& r, uint32_t* idx) {
  if (Status st = claim_qp(seg, r, idx); st != Status::ok) return st;
  QpSlot& s = qp_slot(seg->hdr(), *idx);
  s.dev = spec.dev;
  s.ctx = spec.ctx;
  s.port = 1;
  s.type = spec.type;
  s.dc_key = spec.dc_key;
  s.sq_sig_all = spec.sq_sig_all;
  s.uid = seg->new_uid();
  // What it completes into and receives from.
  s.pd = spec.pd;
  s.send_cq = spec.send_cq;
  s.recv_cq = spec.recv_cq;
  s.srq_ref = spec.srq_ref;
  s.path_mtu = kMtu1024;
  // Its rings (allocated by claim_qp) and the register its driver rings.
  s.sq_bbs = spec.sq_bbs;
  s.rq_wqe_cnt = spec.rq_wqe_cnt;
  s.rq_stride = spec.rq_stride;
  s.uar_index = spec.uar_index;
  s.qp_state.store(kQpsReset);
  s.wrec_tracked.store(0);
  s.resp_off = 0;  // a reused slot's cached responder was its last QP's
  reset_race_state(seg, s);
  // The SRQ's destroy is refused (EBUSY) while this count is not 0.
  if (spec.srq_ref) srq_slot(seg->hdr(), spec.srq_ref - 1).attached_qps.fetch_add(1);
  return Status::ok;
}

}  // namespace

Status create_qp(Segment* seg, const QpSpec& spec, uint32_t* idx) {
  QpRings r{uint64_t(spec.sq_bbs) * kSendWqeBB, uint64_t(spec.rq_wqe_cnt) * spec.rq_stride,
            uint64_t(spec.sq_bbs) * sizeof(WqeWriteRec), 4096};
  return make_qp(seg, spec, r, idx);
}

Status create_tgt_qp(Segment* seg, uint32_t dev, uint32_t ctx, uint32_t* idx) {
  // No PD (its receives are the SRQs', with their PD), no CQs, one-entry rings, no write record.
  QpSpec spec{dev, ctx, kQptXrcRecv, 0, 0, 0xffffffff, 0, 0, 0, 1, 1, sizeof(DataSeg)};
  return make_qp(seg, spec, QpRings{kSendWqeBB, sizeof(DataSeg), 0, 64}, idx);
}

void stop_qp(Segment* seg, QpSlot& s) {
  s.qp_state.store(kQpsReset);
  // Taking both device locks waits out an engine inside either side; once dying, none enters.
  s.sq_engine.lock(seg->self());
  s.rq_lock.lock(seg->self());
  device_settle_rq(s);
  clear_stall(seg->hdr(), s);
  s.state.store(kSlotDying, std::memory_order_release);
  s.rq_lock.unlock();
  s.sq_engine.unlock();
}

void free_qp(Segment* seg, QpSlot& s) {
  if (s.srq_ref) srq_slot(seg->hdr(), s.srq_ref - 1).attached_qps.fetch_sub(1);
  free_rings(seg, s);
  s.state.store(kSlotFree, std::memory_order_release);
}

void retire_qp(Segment* seg, QpSlot& s) {
  stop_qp(seg, s);
  wait_for_engines(seg);
  free_qp(seg, s);
}

void free_rings(Segment* seg, const QpSlot& s) {
  seg->free(s.sq_off);
  EMU_KILL_POINT(KillPoint::slot_destroy);  // dying, one ring freed: the rest the sweep's
  seg->free(s.rq_off);
  seg->free(s.dbrec_off);
  seg->free(s.wrec_off);
}

uint32_t reset_qp_device_state(Segment* seg, QpSlot& s) {
  // No engine (any thread, any process) may be inside this QP meanwhile.
  s.sq_engine.lock(seg->self());
  s.rq_lock.lock(seg->self());
  device_settle_rq(s);
  auto* dbrec = seg->at<uint32_t>(s.dbrec_off);
  dbrec_store32(&dbrec[0], 0);  // the device reads these at any time
  dbrec_store32(&dbrec[1], 0);
  s.sq_ci = 0;
  s.rq_ci = 0;
  s.rq_pi_seen = 0;
  s.resp_off = 0;
  reset_race_state(seg, s);
  s.rnr_waiter.store(0);
  s.comm_est.store(0);
  s.last_wqe.store(0);
  clear_stall(seg->hdr(), s);
  s.stall_attempts = 0;
  uint32_t incarnation = s.incarnation.fetch_add(1) + 1;
  // Again, now that no engine is inside: one that was (the caller's RESET store does not wait for
  // it) may have failed the old incarnation's WQE and stored ERR after that store.
  s.qp_state.store(kQpsReset, std::memory_order_release);
  s.rq_lock.unlock();
  s.sq_engine.unlock();
  return incarnation;
}

}  // namespace emu
