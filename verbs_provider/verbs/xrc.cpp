// SPDX-License-Identifier: BSD-2-Clause
// XRC: domains (ibv_open_xrcd / ibv_close_xrcd), TGT QP handles (ibv_create_qp_ex of an
// IBV_QPT_XRC_RECV QP, ibv_open_qp, ibv_destroy_qp of either). The shared state and its lifetime
// rules are in emu/xrc.{h,cpp}; here are the kernel's errnos and this process's handle objects.
#include "emu/xrc.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "emu/device.h"
#include "emu/objects.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// A handle to a TGT QP in this process: an EmuQp whose shared slot is the real QP. It has no
// queues of its own to post to (the TGT QP only receives, into XRC SRQs).
EmuQp* new_tgt_handle(ibv_context* context, EmuXrcd* xrcd, QpSlot& s, void* qp_context) {
  auto* qp = new (std::nothrow) EmuQp();
  if (!qp) return nullptr;
  Segment* seg = segment();
  qp->slot = qp_index(s);
  qp->shm = &s;
  qp->ctx = to_ctx(context);
  qp->dbrec = seg->at<uint32_t>(s.dbrec_off);
  qp->sq = seg->at<uint8_t>(s.sq_off);
  qp->sq_bbs = s.sq_bbs;
  qp->rq = seg->at<uint8_t>(s.rq_off);
  qp->rq_cnt = s.rq_wqe_cnt;
  qp->rq_stride = s.rq_stride;
  qp->max_send_wr = qp->max_recv_wr = 0;
  qp->max_send_sge = qp->max_recv_sge = 0;
  qp->max_inline = 0;
  qp->xrcd = xrcd;
  qp->handle_uid = seg->new_uid();
  qp->incarnation = s.incarnation.load();
  qp->uar_idx = 0;
  qp->lockless = lockless_under(nullptr);  // no queues of its own; the mode for completeness
  qp->sq_lock.init(qp->lockless);
  qp->rq_lock.init(qp->lockless);
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = qp_context;
  q.handle = qp->slot;
  q.qp_num = s.qpn;
  q.state = static_cast<ibv_qp_state>(s.qp_state.load());
  q.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.events_completed = 0;
  return qp;
}

int errno_of(Status st) {
  switch (st) {
    case Status::not_found:
      return EAGAIN;  // no domain for that file and no O_CREAT
    case Status::busy:
      return EINVAL;  // O_EXCL on an existing domain (the kernel's answer)
    case Status::no_memory:
      return ENOMEM;
    default:
      return EINVAL;
  }
}

}  // namespace

namespace emu::prov {

ibv_xrcd* emu_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  if (attr->comp_mask & ~uint32_t(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail_null<ibv_xrcd>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return fail_null<ibv_xrcd>(EINVAL);
  EmuContext* ctx = to_ctx(context);
  XrcdKey key{ctx->dev, 0, 0};
  if (attr->fd != -1) {
    // The domain is the file's: its inode, as the kernel keys it.
    struct stat st;
    if (fstat(attr->fd, &st) != 0) return fail_null<ibv_xrcd>(EBADF);
    key.inode_dev = static_cast<uint64_t>(st.st_dev) + 1;  // never 0: 0/0 marks a private domain
    key.inode = st.st_ino;
  }
  uint32_t policy = 0;
  if (!xrc_policy_now(&policy)) return fail_null<ibv_xrcd>(EINVAL);  // said on stderr
  auto* x = new (std::nothrow) EmuXrcd();
  if (!x) return fail_null<ibv_xrcd>(ENOMEM);
  Segment* seg = segment();
  seg->sweep_dead();  // a domain held only by the dead is let go before it is looked up
  Status st = xrcd_open(seg, key, (attr->oflags & O_CREAT) != 0, (attr->oflags & O_EXCL) != 0,
                        policy, ctx->slot, &x->slot, &x->handle);
  if (st != Status::ok) {
    delete x;
    return fail_null<ibv_xrcd>(errno_of(st));
  }
  x->ctx = ctx;
  x->xrcd.context = context;
  return &x->xrcd;
}

int emu_close_xrcd(ibv_xrcd* xrcd) {
  EmuXrcd* x = to_xrcd(xrcd);
  // As the kernel: this process's own TGT QP handles and XRC SRQs on the domain must go first.
  if (x->own_objects.load()) return EBUSY;
  xrcd_close(segment(), x->handle);
  delete x;
  return 0;
}

ibv_qp* create_tgt_qp(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !attr->xrcd || attr->xrcd->context != context)
    return fail_null<ibv_qp>(EINVAL);
  EmuXrcd* x = to_xrcd(attr->xrcd);
  bool dies_with_xrcd = false;
  if (!xrc_tgt_dies_with_xrcd_now(&dies_with_xrcd)) return fail_null<ibv_qp>(EINVAL);
  Segment* seg = segment();
  EmuContext* ctx = to_ctx(context);
  uint32_t slot;
  if (emu::create_tgt_qp(seg, ctx->dev, ctx->slot, &slot) != Status::ok)
    return fail_null<ibv_qp>(ENOMEM);
  QpSlot& s = qp_slot(seg->hdr(), slot);
  EmuQp* qp = new_tgt_handle(context, x, s, attr->qp_context);
  uint32_t handle = 0;
  if (!qp || tgt_qp_attach(seg, slot, x->slot, dies_with_xrcd, ctx->slot, qp->handle_uid,
                           &handle) != Status::ok) {
    delete qp;
    free_qp(seg, s);  // no one was told its number
    return fail_null<ibv_qp>(ENOMEM);
  }
  qp->xrc_handle = handle;
  // The PD the program passed, as libibverbs records it for every QP type: a TGT QP uses none, but
  // librdmacm takes the id's PD from it (rdma_create_qp_ex) for the XRC SRQ it makes next.
  qp->qpx.qp_base.pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  x->own_objects.fetch_add(1);
  registry_put(qp->handle_uid, &qp->qpx.qp_base);
  return &qp->qpx.qp_base;
}

ibv_qp* emu_open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (attr->comp_mask & ~uint32_t(kNeeded | IBV_QP_OPEN_ATTR_CONTEXT))
    return fail_null<ibv_qp>(EOPNOTSUPP);
  if ((attr->comp_mask & kNeeded) != kNeeded || !attr->xrcd || attr->xrcd->context != context ||
      attr->qp_type != IBV_QPT_XRC_RECV)
    return fail_null<ibv_qp>(EINVAL);
  EmuXrcd* x = to_xrcd(attr->xrcd);
  Segment* seg = segment();
  seg->sweep_dead();
  EmuContext* ctx = to_ctx(context);
  uint64_t uid = seg->new_uid();
  uint32_t qi = 0, handle = 0;
  Status st = tgt_qp_open(seg, x->slot, attr->qp_num, ctx->slot, uid, &qi, &handle);
  if (st != Status::ok) return fail_null<ibv_qp>(st == Status::no_memory ? ENOMEM : EINVAL);
  void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  EmuQp* qp = new_tgt_handle(context, x, qp_slot(seg->hdr(), qi), qp_context);
  if (!qp) {
    tgt_qp_close(seg, handle, uid);
    return fail_null<ibv_qp>(ENOMEM);
  }
  qp->handle_uid = uid;
  qp->xrc_handle = handle;
  x->own_objects.fetch_add(1);
  registry_put(uid, &qp->qpx.qp_base);
  return &qp->qpx.qp_base;
}

int destroy_tgt_qp_handle(EmuQp* qp) {
  ibv_qp& q = qp->qpx.qp_base;
  registry_del(qp->handle_uid);
  wait_event_acks(&q, qp->async_events_read);
  tgt_qp_close(segment(), qp->xrc_handle, qp->handle_uid);
  qp->xrcd->own_objects.fetch_sub(1);
  delete qp;
  return 0;
}

}  // namespace emu::prov
