// SPDX-License-Identifier: BSD-2-Clause
// Memory windows: binds and invalidations execute in the send queue's order like any WQE, but
// touch only the window's slot (no wire). A bound window is an MrSlot whose addr/length/iova/
// access are the window's, inside an MR named by key; translate_key serves its remote accesses.
#include "device/engine.h"
#include "device/engine_internal.h"

namespace emu {

bool Engine::bind_mw(const QpSlot& qp, const BindSeg& b) {
  uint32_t mw_key = be32(b.mw_key), new_key = be32(b.new_key);
  MrSlot* mw = seg_->find_mr(mw_key);
  // The window: of this QP's PD and process; the new key keeps its index (ibv_inc_rkey).
  if (!mw || !mw->mw_type || mw->pd != qp.pd || mw->owner != qp.owner ||
      (new_key >> 8) != (mw_key >> 8))
    return false;
  // A type 2 window is bound once; LOCAL_INV (or a SEND with invalidate) frees it again.
  if (mw->mw_type == 2 && mw->mw_bound) return false;
  uint64_t addr = be64(b.addr), len = be64(b.length);
  uint32_t access = be32(b.access);
  const MrSlot* mr = nullptr;
  if (len || be32(b.mr_lkey)) {
    mr = seg_->find_mr(be32(b.mr_lkey));
    // An MR (not a window) of the same PD and process that allows binding and holds the range;
    // remote write or atomic rights through a window need local write on the MR (IBTA 10.6.7).
    constexpr uint32_t kNeedsLocalWrite = kAccessRemoteWrite | kAccessRemoteAtomic;
    if (!mr || mr->mw_type || mr->pd != qp.pd || mr->owner != qp.owner ||
        !(mr->access & kAccessMwBind) ||
        ((access & kNeedsLocalWrite) && !(mr->access & kAccessLocalWrite)) || addr < mr->iova ||
        len > mr->length || addr - mr->iova > mr->length - len)
      return false;
  }
  mw->addr = mr ? mr->addr + (addr - mr->iova) : 0;
  mw->length = len;
  mw->iova = (access & kAccessZeroBased) ? 0 : addr;
  mw->access = access & (kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic);
  mw->mw_mr_key = mr ? mr->key : 0;
  mw->mw_qpn = mw->mw_type == 2 ? qp.qpn : 0;
  mw->mw_bound = mr != nullptr;
  mw->key = new_key;  // last: the old key stops working, the new one finds it all set
  return true;
}

bool Engine::invalidate_mw(uint32_t pd, uint32_t key) {
  MrSlot* mw = seg_->find_mr(key);
  if (!mw || mw->mw_type != 2 || mw->pd != pd || !mw->mw_bound) return false;
  mw->access = 0;
  mw->length = 0;
  mw->mw_bound = 0;
  return true;
}

}  // namespace emu
