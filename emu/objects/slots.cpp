// SPDX-License-Identifier: BSD-2-Clause
// The lives of contexts, PDs, MRs, CQs and SRQs (emu/objects.h).
#include <cstring>

#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/staging.h"
#include "emu/wqe.h"
#include "emu/xrc.h"

namespace emu {

Status create_cq(Segment* seg, const CqSpec& spec, uint32_t* idx) {
  HeapUse use(seg);  // until buf_off names the ring (Segment::audit_heap)
  if (seg->alloc_cq(idx) != Status::ok) return Status::no_memory;
  CqSlot& c = cq_slot(seg->hdr(), *idx);
  uint32_t cnt = 1u << spec.log_cqe_cnt;
  const uint32_t log_entry = cq_log_entry(spec.format);
  c.buf_off = seg->alloc(size_t(cnt) << log_entry, 4096);
  if (!c.buf_off) {
    c.state.store(kSlotFree);
    return Status::no_memory;
  }
  c.dev = spec.dev;
  c.ctx = spec.ctx;
  c.cqe_cnt = cnt;
  c.log_cqe_cnt = spec.log_cqe_cnt;
  c.uid = seg->new_uid();
  c.chan_wfd = spec.chan_wfd;
  c.chan_uid = spec.chan_uid;
  c.stamp = spec.stamp ? 1 : 0;
  c.format = spec.format;
  c.ci.store(cq_record_of(spec.format, 0), std::memory_order_relaxed);
  c.arm_record.store(0, std::memory_order_relaxed);
  c.staging_off.store(0, std::memory_order_relaxed);
  auto* ring = seg->at<uint8_t>(c.buf_off);
  for (uint32_t i = 0; i < cnt; ++i)
    cq_entry(ring, i, c.log_cqe_cnt, log_entry).op_own = kCqeInvalid << 4 | 1;
  c.ring.store(cq_ring_word(c.buf_off, c.log_cqe_cnt, c.log_cqe_cnt), std::memory_order_release);
  return Status::ok;
}

void retire_cq(Segment* seg, CqSlot& c) {
  c.state.store(kSlotDying, std::memory_order_release);
  wait_for_engines(seg);  // no engine still writes into the ring
  free_rings(seg, c);
  c.state.store(kSlotFree, std::memory_order_release);
}

// (An owner that dies inside resize_cq leaves the ring it was moving to, which buf_off does not
// name yet, to the segment's end: one ring, and only then.)
void free_rings(Segment* seg, const CqSlot& c) {
  seg->free(c.buf_off);
  if (uint64_t off = c.staging_off.load(std::memory_order_acquire)) seg->free(off);
}

Status attach_staging(Segment* seg, CqSlot& c, uint64_t bytes) {
  if (c.staging_off.load(std::memory_order_relaxed)) return Status::ok;
  HeapUse use(seg);  // until staging_off names the block (Segment::audit_heap)
  uint64_t off = seg->alloc(bytes, 4096);
  if (!off) return Status::no_memory;
  staging_init(seg->at<StagingArea>(off), bytes);
  // Engines stage from here on. (A second poller of an imported CQ may have been first.)
  uint64_t none = 0;
  if (!c.staging_off.compare_exchange_strong(none, off, std::memory_order_release)) seg->free(off);
  return Status::ok;
}

Status create_srq(Segment* seg, const SrqSpec& spec, uint32_t* idx) {
  HeapUse use(seg);
  if (seg->alloc_srq(idx) != Status::ok) return Status::no_memory;
  SrqSlot& s = srq_slot(seg->hdr(), *idx);
  s.buf_off = seg->alloc(size_t(spec.wqe_cnt) * spec.stride, 4096);
  s.dbrec_off = seg->alloc(64, 64);
  s.tm_tags = spec.tm_tags;
  s.tm_off = spec.tm_tags ? seg->alloc(sizeof(TmListHead) + spec.tm_tags * sizeof(TmTag), 64) : 0;
  if (spec.tm_tags && s.tm_off)
    std::memset(seg->at<uint8_t>(s.tm_off), 0,
                sizeof(TmListHead) + spec.tm_tags * sizeof(TmTag));  // every tag free
  if (!s.buf_off || !s.dbrec_off || (spec.tm_tags && !s.tm_off)) {
    free_rings(seg, s);
    s.state.store(kSlotFree);
    return Status::no_memory;
  }
  s.dev = spec.dev;
  s.ctx = spec.ctx;
  s.pd = spec.pd;
  s.wqe_cnt = spec.wqe_cnt;
  s.stride = spec.stride;
  s.uid = seg->new_uid();
  s.cq = spec.cq;
  if (spec.xrcd_ref) {
    s.xrcd_ref = spec.xrcd_ref;
    xrcd_add_object(seg, spec.xrcd_ref - 1);
  }
  return Status::ok;
}

void stop_srq(Segment* seg, SrqSlot& s) {
  s.lock.lock(seg->self());
  s.state.store(kSlotDying, std::memory_order_release);
  s.lock.unlock();
}

void free_srq(Segment* seg, SrqSlot& s) {
  free_rings(seg, s);
  // Out of its domain before the slot is free: a death in between leaves a dying slot whose
  // reference the sweep drops (xrc_srq_drop happens once either way).
  if (s.xrcd_ref) xrc_srq_drop(seg, s);
  s.state.store(kSlotFree, std::memory_order_release);
}

void free_rings(Segment* seg, const SrqSlot& s) {
  seg->free(s.buf_off);
  seg->free(s.dbrec_off);
  if (s.tm_off) seg->free(s.tm_off);
}

Status create_mr(Segment* seg, const MrSpec& spec, uint32_t* idx) {
  if (seg->alloc_mr(idx) != Status::ok) return Status::no_memory;
  MrSlot& m = mr_slot(seg->hdr(), *idx);
  m.pd = spec.pd;
  m.dev = pd_slot(seg->hdr(), spec.pd).dev;  // the device of its PD
  m.access = spec.access;
  m.addr = spec.addr;
  m.length = spec.length;
  m.iova = spec.iova;
  m.mw_type = 0;
  m.mw_mr_key = 0;
  m.mw_qpn = 0;
  m.mw_bound = 0;
  return Status::ok;
}

void retire_mr(Segment* seg, MrSlot& m) {
  m.state.store(kSlotDying, std::memory_order_release);
  wait_for_engines(seg);
  m.state.store(kSlotFree, std::memory_order_release);
}

void rereg_mr(Segment* seg, MrSlot& m, const MrSpec& spec, const MrSlot* share) {
  m.state.store(kSlotDying, std::memory_order_release);
  wait_for_engines(seg);
  if (share) {
    m.share_fd = share->share_fd;
    m.share_va = share->share_va;
    m.share_len = share->share_len;
    m.share_off = share->share_off;
    m.share_uid = share->share_uid;
  } else if (m.addr != spec.addr || m.length != spec.length) {
    m.share_len = 0;  // other pages: the old pages' shared mapping is not the new translation's
  }
  m.pd = spec.pd;
  m.dev = pd_slot(seg->hdr(), spec.pd).dev;
  m.access = spec.access;
  m.addr = spec.addr;
  m.length = spec.length;
  m.iova = spec.iova;
  m.state.store(kSlotLive, std::memory_order_release);
}

Status create_pd(Segment* seg, uint32_t dev, uint32_t ctx, uint32_t* idx) {
  if (seg->alloc_pd(idx) != Status::ok) return Status::no_memory;
  PdSlot& p = pd_slot(seg->hdr(), *idx);
  p.dev = dev;
  p.ctx = ctx;
  return Status::ok;
}

// No engine reaches a PD except through the live MRs and QPs the caller checked are gone.
void retire_pd(PdSlot& p) { p.state.store(kSlotFree); }

Status create_ctx(Segment* seg, const ContextSpec& spec, uint32_t* idx) {
  HeapUse use(seg);
  if (seg->alloc_ctx(idx) != Status::ok) return Status::no_memory;
  ContextSlot& c = seg->hdr()->ctxs[*idx];
  c.dev = spec.dev;
  c.uid = seg->new_uid();
  c.uar_count = spec.uar_count;
  c.uar_off = seg->alloc(sizeof(UarReg) * spec.uar_count, 4096);
  if (!c.uar_off) {
    c.state.store(kSlotFree);
    return Status::no_memory;
  }
  auto* uars = seg->at<UarReg>(c.uar_off);
  for (uint32_t i = 0; i < spec.uar_count; ++i) {
    UarReg& r = uars[i];
    std::memset(static_cast<void*>(&r), 0, sizeof r);
    r.ctx = *idx;
    r.index = static_cast<uint16_t>(i);
    r.dev = static_cast<uint16_t>(spec.dev);
  }
  // Published last: another process delivering a port event finds the pipe through it.
  std::atomic_ref<int32_t>(c.async_wfd).store(spec.async_wfd, std::memory_order_release);
  return Status::ok;
}

void free_rings(Segment* seg, const ContextSlot& c) { seg->free(c.uar_off); }

}  // namespace emu
