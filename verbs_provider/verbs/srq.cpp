// SPDX-License-Identifier: BSD-2-Clause
// Shared receive queues: create, modify (limit arming), query, destroy, post. The ring is mlx5's:
// WQEs linked by their next segments; the driver posts at the free list's head and returns
// completed WQEs to its tail; the device takes them in list order (emu/device/engine_recv.cpp).
#include <bit>
#include <cerrno>
#include <cstring>

#include "emu/barriers.h"
#include "emu/inject.h"
#include "emu/kill_point.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/xrc.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

void set_next(EmuSrq* s, uint32_t idx, uint32_t next) {
  SrqNextSeg n{};
  n.next_wqe_index = be16(static_cast<uint16_t>(next));
  std::memcpy(s->buf + size_t(idx) * s->stride, &n, sizeof n);
}

uint32_t next_of(const EmuSrq* s, uint32_t idx) {
  SrqNextSeg n;
  std::memcpy(&n, s->buf + size_t(idx) * s->stride, sizeof n);
  return be16(n.next_wqe_index);
}

}  // namespace

namespace emu::prov {

// Entering the free list: the SRQ's lock, or for a lockless SRQ its owner word (see queue_enter
// in provider.h). Posts and the completions that give WQEs back both enter: they are what the
// lock serialises, so a poll in one thread beside a post in another is the race it prevents.
bool srq_enter(EmuSrq* s) {
  if (!s->lock.off) {
    s->lock.spin.lock();
    return false;
  }
  uint32_t me = writer_tid(), other = 0;
  if (owner_take(s->owner, me, &other)) return true;
  if (other) report_owner_conflict(s, other, me);
  return false;
}

void srq_leave(EmuSrq* s, bool owned) {
  if (!s->lock.off)
    s->lock.spin.unlock();
  else if (owned)
    owner_give(s->owner);
}

uint64_t srq_complete(EmuSrq* s, uint16_t idx) {
  uint32_t i = idx & (s->wqe_cnt - 1);
  uint64_t wr_id = s->wrid[i];
  bool owned = srq_enter(s);
  // The device has passed this WQE: it becomes the free list's new tail.
  set_next(s, s->tail, i);
  s->tail = i;
  --s->outstanding;
  srq_leave(s, owned);
  return wr_id;
}

const uint8_t* srq_shadow_wqe(EmuSrq* s, uint16_t idx) {
  return s->shadow.data() + size_t(idx & (s->wqe_cnt - 1)) * (s->stride - sizeof(SrqNextSeg));
}

int emu_post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  EmuSrq* s = to_srq(ibsrq);
  if (inherited(s)) {
    *bad = wr;
    return EPERM;
  }
  uint32_t seg_bytes = s->stride - sizeof(SrqNextSeg);
  bool owned = srq_enter(s);
  EMU_KILL_POINT(KillPoint::srq_lock);
  int err = 0;
  uint32_t nreq = 0;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > s->max_sge)
      err = EINVAL;
    else if (s->head == s->tail || s->outstanding >= s->max_wr)
      err = ENOMEM;
    if (err) {
      *bad = wr;
      break;
    }
    uint32_t i = s->head;
    uint8_t* w = s->buf + size_t(i) * s->stride + sizeof(SrqNextSeg);
    uint8_t* shadow = s->shadow.data() + size_t(i) * seg_bytes;
    uint32_t n = 0;
    for (int k = 0; k < wr->num_sge; ++k) {
      if (wr->sg_list[k].length == 0) continue;
      DataSeg d{be32(wr->sg_list[k].length), be32(wr->sg_list[k].lkey), be64(wr->sg_list[k].addr)};
      std::memcpy(w + n * sizeof d, &d, sizeof d);
      std::memcpy(shadow + n++ * sizeof d, &d, sizeof d);
    }
    if (n * sizeof(DataSeg) < seg_bytes) {
      DataSeg term{0, be32(kInvalidLkey), 0};
      std::memcpy(w + n * sizeof term, &term, sizeof term);
      std::memcpy(shadow + n * sizeof term, &term, sizeof term);
    }
    s->wrid[i] = wr->wr_id;
    s->head = next_of(s, i);
    ++s->posted;
    ++s->outstanding;
    ++nreq;
  }
  if (nreq) {
    to_device_barrier();
    dbrec_store32(s->dbrec, be32(s->posted & 0xffff));
  }
  srq_leave(s, owned);
  if (nreq) {
    // Wake a requester parked on the empty SRQ (see Engine::recv_empty_wait).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (s->shm->rnr_waiter.load() != 0) {
      uint32_t waiter = s->shm->rnr_waiter.exchange(0);
      if (!waiter) return err;
      EngineSection in_engine(segment());
      if (QpSlot* q = segment()->find_qp(waiter - 1)) device_kick_sq(*q, true);
    }
  }
  return err;
}

EmuSrq* g_srq_table[kMaxSrqs];  // this process's SRQs by slot (XRC completions name them)

EmuSrq* srq_by_num(uint32_t srqn) {
  EmuSrq* s = g_srq_table[srqn & (kMaxSrqs - 1)];
  return s && s->shm->srqn == srqn ? s : nullptr;
}

// xrcd and cq: an XRC SRQ's domain and the CQ its completions go to (nullptr for a basic SRQ);
// tm_tags: a TM SRQ's tag list size (its CQ takes the list operations' completions).
EmuSrq* create_srq_common(ibv_pd* pd, ibv_srq_attr& a, void* srq_context, EmuXrcd* xrcd = nullptr,
                          EmuCq* cq = nullptr, uint32_t tm_tags = 0) {
  if (a.max_wr == 0 || a.max_wr > Limits::max_srq_wr || a.max_sge > Limits::max_srq_sge)
    return fail_null<EmuSrq>(EINVAL);
  uint32_t sge = std::bit_ceil(a.max_sge ? a.max_sge : 1);
  uint32_t stride = std::bit_ceil(sizeof(SrqNextSeg) + sge * sizeof(DataSeg));
  uint32_t cnt = std::bit_ceil(a.max_wr + 1);  // one WQE always stays free as the tail
  EmuContext* ctx = to_ctx(pd->context);
  if (int err = inject_verb_check(segment(), kVerbCreateSrq)) return fail_null<EmuSrq>(err);
  auto* s = new (std::nothrow) EmuSrq();
  if (!s) return fail_null<EmuSrq>(ENOMEM);
  Segment* seg = segment();
  uint32_t slot;
  SrqSpec spec{
      ctx->dev,          ctx->slot, to_pd(pd)->slot, cnt, stride, xrcd ? xrcd->slot + 1 : 0,
      cq ? cq->slot : 0, tm_tags};
  if (create_srq(seg, spec, &slot) != Status::ok) {
    delete s;
    return fail_null<EmuSrq>(ENOMEM);
  }
  SrqSlot& ss = srq_slot(seg->hdr(), slot);
  s->slot = slot;
  s->shm = &ss;
  s->xrcd = xrcd;
  s->ctx = ctx;
  s->buf = seg->at<uint8_t>(ss.buf_off);
  s->dbrec = seg->at<uint32_t>(ss.dbrec_off);
  s->wqe_cnt = cnt;
  s->stride = stride;
  s->max_wr = cnt - 1;
  s->max_sge = (stride - sizeof(SrqNextSeg)) / sizeof(DataSeg);
  if (s->max_sge > Limits::max_srq_sge) s->max_sge = Limits::max_srq_sge;
  for (uint32_t i = 0; i < cnt; ++i) set_next(s, i, (i + 1) & (cnt - 1));
  s->tail = cnt - 1;
  s->wrid.assign(cnt, 0);
  s->shadow.assign(size_t(cnt) * (stride - sizeof(SrqNextSeg)), 0);
  s->lock.init(lockless_under(pd));  // a thread domain's SRQ takes no lock, as mlx5's
  ibv_srq& q = s->srq;
  q.context = pd->context;
  q.srq_context = srq_context;
  q.pd = pd;
  q.handle = slot;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.events_completed = 0;
  a.max_wr = s->max_wr;  // what was really made, as ibv_create_srq(3) asks
  a.max_sge = s->max_sge;
  registry_put(ss.uid, &q);
  g_srq_table[slot] = s;
  return s;
}

// ibv_create_srq_ex beyond the basic mask (libibverbs sends the basic one to ibv_create_srq):
// XRC SRQs, which take an XRC domain and the CQ their completions go to, and tag matching SRQs,
// which take a CQ and the sizes of their tag list and operation queue.
ibv_srq* emu_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                              IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (attr->comp_mask & ~kKnown) return fail_null<ibv_srq>(EOPNOTSUPP);
  bool typed = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE;
  bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  bool tm = typed && attr->srq_type == IBV_SRQT_TM;
  if (typed && attr->srq_type != IBV_SRQT_BASIC && !xrc && !tm)
    return fail_null<ibv_srq>(EOPNOTSUPP);
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context)
    return fail_null<ibv_srq>(EINVAL);
  EmuXrcd* xrcd = nullptr;
  EmuCq* cq = nullptr;
  if (tm) {
    const ibv_tm_cap& c = attr->tm_cap;
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
        !attr->cq || attr->cq->context != context || c.max_num_tags == 0 ||
        c.max_num_tags > Limits::max_tm_tags || c.max_ops == 0 || c.max_ops > Limits::max_tm_ops)
      return fail_null<ibv_srq>(EINVAL);
    EmuTm* t = tm_create(c.max_num_tags, c.max_ops);
    if (!t) return fail_null<ibv_srq>(ENOMEM);
    EmuSrq* s = create_srq_common(attr->pd, attr->attr, attr->srq_context, nullptr, to_cq(attr->cq),
                                  c.max_num_tags);
    if (!s) {
      delete t;
      return nullptr;
    }
    s->tm = t;
    return &s->srq;
  }
  if (xrc) {
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
        !attr->xrcd || !attr->cq || attr->xrcd->context != context || attr->cq->context != context)
      return fail_null<ibv_srq>(EINVAL);
    xrcd = to_xrcd(attr->xrcd);
    cq = to_cq(attr->cq);
  }
  EmuSrq* s = create_srq_common(attr->pd, attr->attr, attr->srq_context, xrcd, cq);
  if (!s) return nullptr;
  if (xrcd) xrcd->own_objects.fetch_add(1);
  return &s->srq;
}

int emu_get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  *srq_num = to_srq(srq)->shm->srqn;
  return 0;
}

}  // namespace emu::prov

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_create_srq, "IBVERBS_1.1");
    return fn ? fn(pd, attr) : fail_null<ibv_srq>(EINVAL);
  }
  EmuSrq* s = create_srq_common(pd, attr->attr, attr->srq_context);
  return s ? &s->srq : nullptr;
}

int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (!is_emu(srq->context)) {
    auto fn = REAL(ibv_modify_srq, "IBVERBS_1.1");
    return fn ? fn(srq, attr, mask) : EINVAL;
  }
  EmuSrq* s = to_srq(srq);
  if (inherited(s)) return EPERM;
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  // Resizing is not supported (emu0 does not advertise IBV_DEVICE_SRQ_RESIZE): EINVAL, which is
  // also mlx5's answer.
  if (mask & IBV_SRQ_MAX_WR) return EINVAL;
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > s->max_wr) return EINVAL;
    s->shm->limit.store(attr->srq_limit, std::memory_order_release);  // 0 disarms
  }
  return 0;
}

int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  if (!is_emu(srq->context)) {
    auto fn = REAL(ibv_query_srq, "IBVERBS_1.1");
    return fn ? fn(srq, attr) : EINVAL;
  }
  EmuSrq* s = to_srq(srq);
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->shm->limit.load();
  return 0;
}

int ibv_destroy_srq(ibv_srq* srq) {
  if (!is_emu(srq->context)) {
    auto fn = REAL(ibv_destroy_srq, "IBVERBS_1.1");
    return fn ? fn(srq) : EINVAL;
  }
  EmuSrq* s = to_srq(srq);
  if (inherited(s)) return EPERM;
  SrqSlot& ss = *s->shm;
  if (ss.attached_qps.load()) return EBUSY;  // as the kernel: QPs still receive from it
  Segment* seg = segment();
  stop_srq(seg, ss);
  registry_del(ss.uid);
  wait_event_acks(srq, s->async_events_read);
  wait_for_engines(seg);
  g_srq_table[s->slot] = nullptr;
  free_srq(seg, ss);  // rings, its domain's count (XRC), the slot
  if (s->xrcd) s->xrcd->own_objects.fetch_sub(1);
  delete s->tm;
  delete s;
  return 0;
}

}  // extern "C"
