// SPDX-License-Identifier: BSD-2-Clause
#include "emu/xrc.h"

#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/shm_lock.h"

namespace emu {
namespace {

// Everything here runs under the header's xrc_lock (slow path: opens, closes, exits). Lock order:
// table_lock (object slots, the sweep) before xrc_lock, never the other way.

bool alloc_handle(Header* h, uint32_t owner, uint32_t kind, uint32_t object, uint32_t ctx,
                  uint64_t uid, uint32_t* out) {
  for (uint32_t i = 0; i < kMaxXrcHandles; ++i) {
    XrcHandle& x = h->xrc_handles[i];
    if (x.state.load(std::memory_order_relaxed) != kSlotFree) continue;
    x.owner = owner;
    x.kind = kind;
    x.object = object;
    x.ctx = ctx;
    x.uid = uid;
    x.state.store(kSlotLive, std::memory_order_release);
    *out = i;
    return true;
  }
  return false;
}

void free_xrcd_if_unused(Header* h, uint32_t xi) {
  XrcdSlot& d = h->xrcds[xi];
  if (d.opens.load() == 0 && d.objects.load() == 0)
    d.state.store(kSlotFree, std::memory_order_release);
}

// The real TGT QP goes: no engine may be inside it afterwards; its domain loses an object.
void destroy_tgt_qp(Segment* seg, uint32_t qi) {
  Header* h = seg->hdr();
  QpSlot& q = qp_slot(h, qi);
  uint32_t live = kSlotLive;
  if (!q.state.compare_exchange_strong(live, kSlotDying)) return;
  q.qp_state.store(kQpsReset);
  // Out of its domain first, xrcd_ref cleared with the count: a death from here on leaves a dying
  // slot that xrc_release_proc finishes without dropping the domain's count twice.
  uint32_t xi = q.xrcd_ref - 1;
  q.xrcd_ref = 0;
  h->xrcds[xi].objects.fetch_sub(1);
  free_xrcd_if_unused(h, xi);
  wait_for_engines(seg);
  free_qp(seg, q);
}

// Only a holder of xrc_lock destroys a TGT QP, so a TGT QP seen dying by the next holder belongs
// to a destroy its process died in (the lock was taken over). Called by the sweep (under
// table_lock too, so no sweep's own release_objects is half way through a QP). The rings are left
// (a leak, not a double free: how far the destroy got is unknown).
void finish_interrupted_destroys(Header* h) {
  each_qp(h, [h](QpSlot& q) {
    if (q.state.load() != kSlotDying || q.type != kQptXrcRecv) return;
    if (uint32_t ref = q.xrcd_ref) {
      q.xrcd_ref = 0;
      h->xrcds[ref - 1].objects.fetch_sub(1);
      free_xrcd_if_unused(h, ref - 1);
    }
    q.state.store(kSlotFree, std::memory_order_release);
  });
}

// A domain whose last open went: under 2a (and 2b for QPs that chose it) its TGT QPs go with it.
void xrcd_last_open_gone(Segment* seg, uint32_t xi) {
  Header* h = seg->hdr();
  for (uint32_t qi = 0; qi < table_end(h->qp_dir); ++qi) {
    QpSlot& q = qp_slot(h, qi);
    if (q.state.load() == kSlotLive && q.type == kQptXrcRecv && q.xrcd_ref == xi + 1 &&
        q.dies_with_xrcd) {
      // Its remaining handles (none of them an open of the domain) are gone with it.
      for (XrcHandle& x : h->xrc_handles)
        if (x.state.load() == kSlotLive && x.kind == kHandleTgtQp && x.object == qi)
          x.state.store(kSlotFree);
      q.handles.store(0);
      destroy_tgt_qp(seg, qi);
    }
  }
  free_xrcd_if_unused(h, xi);
}

// Drops one handle. by_exit: the holder's process or context went (not an explicit destroy).
void release_handle(Segment* seg, uint32_t hi, bool by_exit) {
  Header* h = seg->hdr();
  XrcHandle& x = h->xrc_handles[hi];
  if (x.state.load() != kSlotLive) return;
  x.state.store(kSlotFree, std::memory_order_release);
  if (x.kind == kHandleXrcd) {
    if (h->xrcds[x.object].opens.fetch_sub(1) == 1) xrcd_last_open_gone(seg, x.object);
    return;
  }
  QpSlot& q = qp_slot(h, x.object);
  if (q.state.load() != kSlotLive) return;
  uint32_t left = q.handles.fetch_sub(1) - 1;
  if (!by_exit && q.dies_with_xrcd) {
    // 2a: an explicit destroy destroys the real QP, whoever else holds it.
    for (XrcHandle& o : h->xrc_handles)
      if (o.state.load() == kSlotLive && o.kind == kHandleTgtQp && o.object == x.object)
        o.state.store(kSlotFree);
    q.handles.store(0);
    destroy_tgt_qp(seg, x.object);
    return;
  }
  // The kernel's rule: the last handle takes the real QP with it. Under 2a a QP whose handles all
  // went with their processes stays, bound to its domain (what leaks across jobs).
  if (left == 0 && !q.dies_with_xrcd) destroy_tgt_qp(seg, x.object);
}

// A death inside xrcd_open (under xrc_lock, which the sweep took over) can leave a domain's open
// count apart from its open handles (the slot made, the handle or the count not yet): the handles
// are the truth. Only with xrc_lock held, so no open is half way.
void recount_opens(Segment* seg) {
  Header* h = seg->hdr();
  uint32_t opens[kMaxXrcds] = {};
  for (const XrcHandle& x : h->xrc_handles)
    if (x.state.load() == kSlotLive && x.kind == kHandleXrcd && x.object < kMaxXrcds)
      ++opens[x.object];
  for (uint32_t i = 0; i < kMaxXrcds; ++i) {
    XrcdSlot& d = h->xrcds[i];
    if (d.state.load() != kSlotLive) continue;
    d.opens.store(opens[i]);
    if (opens[i] == 0) xrcd_last_open_gone(seg, i);  // frees it if nothing else holds it
  }
}

// The same for TGT QPs: a death inside release_handle or tgt_qp_attach can leave a QP's handle
// count apart from its live handles (the handle freed, the count or the destroy not yet; or the
// handle made and the count not yet), so that no handle of the dead names the QP any more and
// nothing would ever take it. The handles are the truth; a QP the kernel's rule says goes (none
// left, not bound to its domain) goes now. Only with xrc_lock held.
void recount_tgt_handles(Segment* seg) {
  Header* h = seg->hdr();
  for (uint32_t qi = 0; qi < table_end(h->qp_dir); ++qi) {
    QpSlot& q = qp_slot(h, qi);
    if (q.state.load() != kSlotLive || q.type != kQptXrcRecv || q.xrcd_ref == 0) continue;
    uint32_t n = 0;
    for (const XrcHandle& x : h->xrc_handles)
      n += x.state.load() == kSlotLive && x.kind == kHandleTgtQp && x.object == qi;
    q.handles.store(n);
    if (n == 0 && !q.dies_with_xrcd) destroy_tgt_qp(seg, qi);
  }
}

}  // namespace

Status xrcd_open(Segment* seg, const XrcdKey& key, bool create, bool excl, uint32_t policy,
                 uint32_t ctx, uint32_t* xrcd, uint32_t* handle) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  bool shared = key.inode_dev || key.inode;
  uint32_t found = kMaxXrcds, free_slot = kMaxXrcds;
  for (uint32_t i = 0; i < kMaxXrcds; ++i) {
    XrcdSlot& d = h->xrcds[i];
    if (d.state.load() == kSlotFree) {
      if (free_slot == kMaxXrcds) free_slot = i;
      continue;
    }
    if (shared && d.state.load() == kSlotLive && d.dev == key.dev && d.inode_dev == key.inode_dev &&
        d.inode == key.inode)
      found = i;
  }
  if (found != kMaxXrcds && excl) return Status::busy;
  if (found == kMaxXrcds) {
    if (shared && !create) return Status::not_found;
    if (free_slot == kMaxXrcds) return Status::no_memory;
    XrcdSlot& d = h->xrcds[free_slot];
    d.owner = seg->self();
    d.dev = key.dev;
    d.policy = policy;
    d.inode_dev = key.inode_dev;
    d.inode = key.inode;
    d.uid = seg->new_uid();
    d.opens.store(0);
    d.objects.store(0);
    d.state.store(kSlotLive, std::memory_order_release);
    found = free_slot;
  }
  if (!alloc_handle(h, seg->self(), kHandleXrcd, found, ctx, 0, handle)) {
    free_xrcd_if_unused(h, found);
    return Status::no_memory;
  }
  h->xrcds[found].opens.fetch_add(1);
  *xrcd = found;
  return Status::ok;
}

void xrcd_close(Segment* seg, uint32_t handle) {
  ShmLockGuard g(seg->hdr()->xrc_lock, seg->self());
  release_handle(seg, handle, false);
}

Status tgt_qp_attach(Segment* seg, uint32_t qp_idx, uint32_t xrcd, bool dies_with_xrcd,
                     uint32_t ctx, uint64_t handle_uid, uint32_t* handle) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  XrcdSlot& d = h->xrcds[xrcd];
  if (d.state.load() != kSlotLive) return Status::invalid;
  QpSlot& q = qp_slot(h, qp_idx);
  if (!alloc_handle(h, seg->self(), kHandleTgtQp, qp_idx, ctx, handle_uid, handle))
    return Status::no_memory;
  q.xrcd_ref = xrcd + 1;
  q.creator_pid = seg->pid();
  q.creator_start = h->procs[seg->self()].start_time;
  q.dies_with_xrcd =
      d.policy == kXrcPolicyXrcd || (d.policy == kXrcPolicyCreator && dies_with_xrcd);
  q.handles.store(1);
  d.objects.fetch_add(1);
  return Status::ok;
}

Status tgt_qp_open(Segment* seg, uint32_t xrcd, uint32_t qpn, uint32_t ctx, uint64_t handle_uid,
                   uint32_t* qp_idx, uint32_t* handle) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  QpSlot* q = seg->find_qp(qpn);
  if (!q || q->type != kQptXrcRecv || q->xrcd_ref != xrcd + 1) return Status::not_found;
  uint32_t qi = qp_index(*q);
  if (!alloc_handle(h, seg->self(), kHandleTgtQp, qi, ctx, handle_uid, handle))
    return Status::no_memory;
  q->handles.fetch_add(1);
  *qp_idx = qi;
  return Status::ok;
}

void tgt_qp_close(Segment* seg, uint32_t handle, uint64_t handle_uid) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  // Under 2a another handle's destroy may have taken this one with its QP, and the slot may have
  // been given to a new reference since: only the handle made with this uid is ours to release.
  const XrcHandle& x = h->xrc_handles[handle];
  if (x.state.load() != kSlotLive || x.kind != kHandleTgtQp || x.uid != handle_uid) return;
  release_handle(seg, handle, false);
}

void xrcd_add_object(Segment* seg, uint32_t xrcd) {
  ShmLockGuard g(seg->hdr()->xrc_lock, seg->self());
  seg->hdr()->xrcds[xrcd].objects.fetch_add(1);
}

void xrc_srq_drop(Segment* seg, SrqSlot& srq) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  uint32_t ref = srq.xrcd_ref;
  if (!ref) return;
  srq.xrcd_ref = 0;
  h->xrcds[ref - 1].objects.fetch_sub(1);
  free_xrcd_if_unused(h, ref - 1);
}

void xrc_release_proc(Segment* seg, uint32_t proc) {
  Header* h = seg->hdr();
  uint32_t word = proc + 1;
  h->xrc_lock.word.compare_exchange_strong(word, 0);  // it may have died holding it
  ShmLockGuard g(h->xrc_lock, seg->self());
  finish_interrupted_destroys(h);
  // TGT QP handles first: under the kernel's rule a QP held only by the dead goes, while the
  // domain (still open) stays for the next step to decide.
  for (uint32_t i = 0; i < kMaxXrcHandles; ++i) {
    const XrcHandle& x = h->xrc_handles[i];
    if (x.state.load() == kSlotLive && x.owner == proc && x.kind == kHandleTgtQp)
      release_handle(seg, i, true);
  }
  for (uint32_t i = 0; i < kMaxXrcHandles; ++i) {
    const XrcHandle& x = h->xrc_handles[i];
    if (x.state.load() == kSlotLive && x.owner == proc && x.kind == kHandleXrcd)
      release_handle(seg, i, true);
  }
  recount_tgt_handles(seg);
  recount_opens(seg);
}

void xrc_release_ctx(Segment* seg, uint32_t ctx) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->xrc_lock, seg->self());
  for (int kind : {kHandleTgtQp, kHandleXrcd})
    for (uint32_t i = 0; i < kMaxXrcHandles; ++i) {
      const XrcHandle& x = h->xrc_handles[i];
      if (x.state.load() == kSlotLive && x.owner == seg->self() && x.ctx == ctx &&
          x.kind == static_cast<uint32_t>(kind))
        release_handle(seg, i, true);
    }
}

}  // namespace emu
