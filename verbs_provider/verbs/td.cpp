// SPDX-License-Identifier: BSD-2-Clause
// Thread modes: thread domains (ibv_alloc_td), parent domains (ibv_alloc_parent_domain) and the
// ownership checker of the queues that run without locks (a thread domain's, or every queue under
// EMU_SINGLE_THREADED).
//
// As in mlx5: a thread domain is a doorbell register of its own; a parent domain is a PD that
// names a protection domain and optionally a thread domain; a QP or SRQ made with a parent domain
// that has a thread domain takes no internal locks, and a QP rings the domain's register. The
// references are mlx5's: a parent domain holds its PD and its thread domain, and the QPs and CQs
// made with a parent domain hold it; deallocating anything still held is EBUSY.
#include <cerrno>

#include "emu/config.h"
#include "emu/race_log.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace emu::prov {

bool lockless_under(ibv_pd* pd) {
  if (config().single_threaded) return true;
  return pd && to_pd(pd)->td != nullptr;
}

void report_owner_conflict(EmuQp* qp, OwnerQueue q, uint32_t holder, uint32_t me) {
  RaceReport r;
  r.kind = kRaceOwner;
  r.action = kActNone;  // the post goes on without a lock, as it would on hardware
  r.reg = static_cast<uint16_t>(qp->uar_idx);
  r.dev = qp->ctx->dev;
  r.qpn = qp->qpx.qp_base.qp_num;
  r.ctx = qp->ctx->slot;
  // Where the queue stood when the second thread came in (the holder may be moving it).
  uint32_t head = q == kOwnerSend
                      ? std::atomic_ref<uint32_t>(qp->sq_head).load(std::memory_order_relaxed)
                      : std::atomic_ref<uint32_t>(qp->rq_head).load(std::memory_order_relaxed);
  r.slot = head & 0xffff;
  r.writers[0] = holder;
  r.writers[1] = me;
  r.value[0] = q;
  record_race(segment(), r);
}

void report_owner_conflict(EmuSrq* srq, uint32_t holder, uint32_t me) {
  RaceReport r;
  r.kind = kRaceOwner;
  r.action = kActNone;
  r.dev = srq->ctx->dev;
  r.qpn = 0;  // an SRQ: no QP, no register
  r.ctx = srq->ctx->slot;
  r.slot = srq->shm->srqn;
  r.writers[0] = holder;
  r.writers[1] = me;
  r.value[0] = kOwnerSrq;
  record_race(segment(), r);
}

ibv_td* emu_alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
  if (!attr || attr->comp_mask) return fail_null<ibv_td>(EINVAL);
  EmuContext* ctx = to_ctx(context);
  auto* td = new (std::nothrow) EmuTd();
  if (!td) return fail_null<ibv_td>(ENOMEM);
  {
    std::lock_guard<std::mutex> g(ctx->mu);
    uint32_t i = 0;
    while (i < ctx->n_td_uars && ctx->td_uar_used[i]) ++i;
    if (i == ctx->n_td_uars) {
      delete td;
      return fail_null<ibv_td>(ENOMEM);  // every register kept for thread domains has one
    }
    ctx->td_uar_used[i] = true;
    td->uar_idx = ctx->n_uars + i;
  }
  td->td.context = context;
  return &td->td;
}

int emu_dealloc_td(ibv_td* ibtd) {
  EmuTd* td = to_td(ibtd);
  if (td->refs.load()) return fail_errno(EBUSY);  // a parent domain still names it
  EmuContext* ctx = to_ctx(ibtd->context);
  {
    std::lock_guard<std::mutex> g(ctx->mu);
    ctx->td_uar_used[td->uar_idx - ctx->n_uars] = false;
  }
  delete td;
  return 0;
}

ibv_pd* emu_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kKnown =
      IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!attr || !attr->pd || (attr->comp_mask & ~kKnown)) return fail_null<ibv_pd>(EINVAL);
  if (attr->pd->context != context || (attr->td && attr->td->context != context))
    return fail_null<ibv_pd>(EINVAL);
  auto* pd = new (std::nothrow) EmuPd();
  if (!pd) return fail_null<ibv_pd>(ENOMEM);
  EmuPd* prot = to_pd(attr->pd);
  // The allocators (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) are accepted and never called: the
  // queues a device reads live in the shared segment, which is the emulated device's memory.
  pd->slot = prot->slot;
  pd->parent = prot;
  pd->td = attr->td ? to_td(attr->td) : nullptr;
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) pd->pd_context = attr->pd_context;
  prot->refs.fetch_add(1);
  if (pd->td) pd->td->refs.fetch_add(1);
  // As libibverbs' ibv_initialize_parent_domain: interchangeable with the PD it was made on.
  pd->pd.context = context;
  pd->pd.handle = attr->pd->handle;
  return &pd->pd;
}

int dealloc_parent_domain(EmuPd* pd) {
  if (pd->refs.load()) return fail_errno(EBUSY);  // QPs, CQs or parent domains made with it
  pd->parent->refs.fetch_sub(1);
  if (pd->td) pd->td->refs.fetch_sub(1);
  delete pd;
  return 0;
}

}  // namespace emu::prov
