// SPDX-License-Identifier: BSD-2-Clause
// XRC domains and TGT QP lifetimes, kept in the shared segment so that they survive any one
// process (docs/design/xrc.md). Free of verbs types: the provider maps Status to the kernel's
// errnos.
//
// References: an open of a domain and a handle to a TGT QP are XrcHandle records owned by a
// process. A domain's use count is its opens plus its objects (TGT QPs, XRC SRQs); a TGT QP's is
// its handles. What happens when a count reaches 0 follows the domain's XrcPolicy.
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"
#include "emu/status.h"

namespace emu {

struct XrcdKey {
  uint32_t dev;
  uint64_t inode_dev;  // 0 with inode 0: a private domain (fd -1), never found by another open
  uint64_t inode;
};

// ibv_open_xrcd: finds the domain of `key` or (create) makes it with `policy`, and records an open
// by this process. not_found: no such domain and !create (EAGAIN); busy: it exists and excl
// (EINVAL, as the kernel answers O_EXCL). *handle is the open's XrcHandle index.
Status xrcd_open(Segment* seg, const XrcdKey& key, bool create, bool excl, uint32_t policy,
                 uint32_t ctx, uint32_t* xrcd, uint32_t* handle);

// ibv_close_xrcd: drops the open (the caller has checked this process's own objects: EBUSY).
void xrcd_close(Segment* seg, uint32_t handle);

// A TGT QP made in `qp_idx` (a live QpSlot of type kQptXrcRecv) joins domain `xrcd` with one
// handle for its creator. dies_with_xrcd: under kXrcPolicyCreator, the creator's choice.
Status tgt_qp_attach(Segment* seg, uint32_t qp_idx, uint32_t xrcd, bool dies_with_xrcd,
                     uint32_t ctx, uint64_t handle_uid, uint32_t* handle);

// ibv_open_qp: a new handle to the TGT QP `qpn` of domain `xrcd`; not_found (EINVAL) if the domain
// has no such QP.
Status tgt_qp_open(Segment* seg, uint32_t xrcd, uint32_t qpn, uint32_t ctx, uint64_t handle_uid,
                   uint32_t* qp_idx, uint32_t* handle);

// ibv_destroy_qp on a TGT QP handle: the handle goes; the real QP goes when the policy says so
// (kernel: with its last handle; 2a: now, explicitly destroyed). handle_uid: the one given at
// attach/open; a handle already gone with its QP (2a) is left alone, whatever holds its slot now.
void tgt_qp_close(Segment* seg, uint32_t handle, uint64_t handle_uid);

// XRC SRQs count as objects of their domain.
void xrcd_add_object(Segment* seg, uint32_t xrcd);
// An XRC SRQ (dying) leaves its domain, once: its xrcd_ref is cleared with the count dropped, so a
// destroy cut short by its process's death and the sweep after it do not both (or neither) drop.
void xrc_srq_drop(Segment* seg, SrqSlot& srq);

// A dead process's references, as its file close would release them (called by the sweep).
void xrc_release_proc(Segment* seg, uint32_t proc);
// What closing a device context does: this process's references made on it go.
void xrc_release_ctx(Segment* seg, uint32_t ctx);

// Every handle to TGT QP qp_idx, for fanning out its events: calls fn(const XrcHandle&).
template <class Fn>
void for_each_tgt_handle(Segment* seg, uint32_t qp_idx, Fn fn) {
  for (const XrcHandle& x : seg->hdr()->xrc_handles)
    if (x.state.load(std::memory_order_acquire) == kSlotLive && x.kind == kHandleTgtQp &&
        x.object == qp_idx)
      fn(x);
}

}  // namespace emu
