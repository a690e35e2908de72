// SPDX-License-Identifier: BSD-2-Clause
// Memory windows (ibv_alloc_mw, ibv_bind_mw, IBV_WR_BIND_MW / LOCAL_INV / SEND_WITH_INV): a window
// is a key slot of the MR table, bound and invalidated by WQEs the device executes in the send
// queue's order (emu/device/engine_mw.cpp); the engine's key check serves its remote accesses.
#include <cerrno>

#include "emu/objects.h"
#include "provider.h"

namespace emu::prov {

namespace {

struct EmuMw {
  ibv_mw mw;
  uint32_t slot;
};

}  // namespace

ibv_mw* emu_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return fail_null<ibv_mw>(EINVAL);
  auto* mw = new (std::nothrow) EmuMw();
  if (!mw) return fail_null<ibv_mw>(ENOMEM);
  Segment* seg = segment();
  // Unbound: no range and no rights until a bind gives them.
  MrSpec spec{to_pd(pd)->slot, 0, 0, 0, 0};
  if (create_mr(seg, spec, &mw->slot) != Status::ok) {
    delete mw;
    return fail_null<ibv_mw>(ENOMEM);
  }
  MrSlot& ms = mr_slot(seg->hdr(), mw->slot);
  ms.mw_type = type;
  mw->mw.context = pd->context;
  mw->mw.pd = pd;
  mw->mw.rkey = ms.key;
  mw->mw.handle = mw->slot;
  mw->mw.type = type;
  return &mw->mw;
}

int emu_dealloc_mw(ibv_mw* mw) {
  auto* m = reinterpret_cast<EmuMw*>(mw);
  retire_mr(segment(), mr_slot(segment()->hdr(), m->slot));  // no access through it from here on
  delete m;
  return 0;
}

// Type 1: posted as a bind WQE with the next key (mlx5 does the same); the window's key is the new
// one once the post succeeded, its completion (IBV_WC_BIND_MW) says whether the device took it.
int emu_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  int err = emu_post_send(qp, &wr, &bad);
  if (!err) mw->rkey = wr.bind_mw.rkey;
  return err;
}

}  // namespace emu::prov
