// SPDX-License-Identifier: BSD-2-Clause
// Queue pair creation (ibv_create_qp, ibv_create_qp_ex, and the DC QPs of mlx5dv_create_qp): the
// attributes checked as ibv_create_qp(3) and mlx5 check them, the rings sized, the QP made in the
// segment, then the provider's side of it and the ibv_qp the program sees. RSS and XRC TGT QPs
// have creators of their own (raw/wq.cpp, xrc.cpp).
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "emu/inject.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// Blocks one WQE of this QP may need: control, then remote address and atomic (RC, UC) or the
// address vector (UD), then data or inline.
uint32_t wqe_bbs_for(ibv_qp_type type, uint32_t max_sge, uint32_t max_inline, bool dci) {
  uint32_t data = max_sge * sizeof(DataSeg);
  uint32_t inl = max_inline ? ((4 + max_inline + 15) & ~15u) : 0;
  uint32_t middle = type == IBV_QPT_UD ? sizeof(AvSeg) : sizeof(RaddrSeg) + sizeof(AtomicSeg);
  if (type == IBV_QPT_XRC_SEND) middle += sizeof(XrcSeg);
  if (dci) middle += sizeof(AvSeg);  // the DCT's address before the rest
  uint32_t bytes = sizeof(CtrlSeg) + middle + (data > inl ? data : inl);
  return (bytes + kSendWqeBB - 1) / kSendWqeBB;
}

// The errno ibv_create_qp gives for these attributes (0: they make a QP of this creator). An XRC
// INI QP without a receive CQ gets its send CQ (it never receives).
int check_init_attr(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) return EINVAL;
  if (attr->qp_type == IBV_QPT_XRC_SEND) {
    if (attr->srq) return EINVAL;
    if (!attr->recv_cq) attr->recv_cq = attr->send_cq;
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd || attr->pd->context != context)
    return EINVAL;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) return EOPNOTSUPP;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
      (attr->send_ops_flags & ~send_ops_of(IBV_QPT_RC)))  // RC carries every operation
    return EOPNOTSUPP;
  // Raw packet QPs need an Ethernet port (the kernel also wants CAP_NET_RAW; emu does not).
  bool raw_ok = attr->qp_type == IBV_QPT_RAW_PACKET && device_has_ethernet(to_ctx(context)->dev);
  if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD &&
      attr->qp_type != IBV_QPT_XRC_SEND && !raw_ok)
    return EOPNOTSUPP;
  if (!attr->send_cq || !attr->recv_cq || attr->send_cq->context != context ||
      attr->recv_cq->context != context)
    return EINVAL;
  if (attr->srq && attr->srq->context != context) return EINVAL;
  // A child of fork() cannot hang a QP of its own on its parent's queues.
  if (inherited(to_cq(attr->send_cq)) || inherited(to_cq(attr->recv_cq)) ||
      (attr->srq && inherited(to_srq(attr->srq))))
    return EPERM;
  // What each transport can send (as mlx5 refuses the rest).
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
      (attr->send_ops_flags & ~send_ops_of(attr->qp_type)))
    return EOPNOTSUPP;
  const ibv_qp_cap& cap = attr->cap;
  if (cap.max_send_wr > Limits::max_qp_wr || cap.max_recv_wr > Limits::max_qp_wr ||
      cap.max_send_sge > Limits::max_sge || cap.max_recv_sge > Limits::max_sge ||
      cap.max_inline_data > Limits::max_inline)
    return EINVAL;
  return 0;
}

// The rings a QP gets for the capacities asked.
struct QpGeometry {
  bool dci;
  uint32_t send_sge;
  uint32_t bbs_per_wqe;
  uint32_t sq_bbs;
  EmuSrq* srq;  // the QP's SRQ (it has no receive queue of its own), or nullptr
  bool no_rq;
  uint32_t rq_cap;  // receive WRs the program may have posted
  uint32_t recv_sge;
  uint32_t rq_stride;
  uint32_t rq_cnt;  // receive ring slots
};

// False when the send ring would be too long for its 16-bit WQE counters to stay unambiguous.
bool size_rings(const ibv_qp_init_attr_ex& attr, const DcKind* dc, QpGeometry* g) {
  const ibv_qp_cap& cap = attr.cap;
  g->dci = dc && dc->type == kQptDci;
  g->send_sge = cap.max_send_sge ? cap.max_send_sge : 1;
  g->bbs_per_wqe = wqe_bbs_for(attr.qp_type, g->send_sge, cap.max_inline_data, g->dci);
  uint32_t send_wr = cap.max_send_wr ? cap.max_send_wr : 1;
  g->sq_bbs = std::bit_ceil(send_wr * g->bbs_per_wqe);
  if (g->sq_bbs > 32768) return false;
  // A QP on an SRQ has no receive queue of its own (its receive capacities are ignored).
  g->srq = attr.srq ? to_srq(attr.srq) : nullptr;
  g->no_rq = g->srq || attr.qp_type == IBV_QPT_XRC_SEND;
  g->rq_cap = g->no_rq ? 0 : std::bit_ceil(cap.max_recv_wr ? cap.max_recv_wr : 1);
  g->recv_sge = g->no_rq ? 1 : std::bit_ceil(cap.max_recv_sge ? cap.max_recv_sge : 1);
  g->rq_stride = g->recv_sge * sizeof(DataSeg);
  // The ring keeps two cache lines more than the queue can hold: a full queue then re-posts into
  // a line the device is not about to read, so the receiver's store and the device's next fetch
  // do not pull one line back and forth per message. Under the mlx5 personality the ring is
  // libmlx5's, no larger than the queue: code posting into it directly sizes its CQs by it (UCX's
  // ud_mlx5 asserts its receive CQ is longer than the ring).
  uint32_t slack = config().personality_mlx5 ? 0 : 2 * std::max<uint32_t>(1, 64 / g->rq_stride);
  g->rq_cnt = g->no_rq ? 1 : std::bit_ceil(g->rq_cap + slack);
  return true;
}

// What the segment is asked to make.
QpSpec spec_of(const ibv_qp_init_attr_ex& attr, const DcKind* dc, const QpGeometry& g,
               const EmuContext& ctx, const EmuPd& pd, uint32_t uar_idx) {
  QpSpec spec{};
  spec.dev = ctx.dev;
  spec.ctx = ctx.slot;
  spec.type = attr.qp_type == IBV_QPT_UD           ? kQptUd
              : attr.qp_type == IBV_QPT_UC         ? kQptUc
              : attr.qp_type == IBV_QPT_XRC_SEND   ? kQptXrcSend
              : attr.qp_type == IBV_QPT_RAW_PACKET ? kQptRaw
                                                   : kQptRc;
  if (dc) {
    spec.type = dc->type;
    spec.dc_key = dc->key;
  }
  spec.sq_sig_all = attr.sq_sig_all ? 1 : 0;
  spec.uar_index = static_cast<uint16_t>(uar_idx);
  spec.pd = pd.slot;
  spec.send_cq = to_cq(attr.send_cq)->slot;
  spec.recv_cq = to_cq(attr.recv_cq)->slot;
  spec.srq_ref = g.srq ? g.srq->slot + 1 : 0;
  spec.sq_bbs = g.sq_bbs;
  spec.rq_wqe_cnt = g.rq_cnt;
  spec.rq_stride = g.rq_stride;
  return spec;
}

// The provider's side of the QP made in slot `slot`: its rings' addresses, shadows, capacities
// and locks.
void init_provider_side(EmuQp* qp, Segment* seg, uint32_t slot, const ibv_qp_init_attr_ex& attr,
                        const QpGeometry& g) {
  QpSlot& s = qp_slot(seg->hdr(), slot);
  qp->slot = slot;
  qp->shm = &s;
  qp->dbrec = seg->at<uint32_t>(s.dbrec_off);
  qp->wrec = seg->at<WqeWriteRec>(s.wrec_off);
  qp->sq = seg->at<uint8_t>(s.sq_off);
  qp->sq_bbs = g.sq_bbs;
  qp->max_send_wr = g.sq_bbs / g.bbs_per_wqe;
  qp->max_send_sge = g.send_sge;
  qp->max_inline = g.bbs_per_wqe * kSendWqeBB - sizeof(CtrlSeg) - 4 - (g.dci ? sizeof(AvSeg) : 0) -
                   (attr.qp_type == IBV_QPT_UD         ? sizeof(AvSeg)
                    : attr.qp_type == IBV_QPT_XRC_SEND ? sizeof(XrcSeg) + sizeof(RaddrSeg)
                                                       : sizeof(RaddrSeg));
  if (qp->max_inline > Limits::max_inline) qp->max_inline = Limits::max_inline;
  qp->sq_wrid.assign(g.sq_bbs, 0);
  qp->sq_seq.assign(g.sq_bbs, 0);
  qp->sq_wqe_bbs.assign(g.sq_bbs, 1);
  qp->rq = seg->at<uint8_t>(s.rq_off);
  qp->rq_cnt = g.rq_cnt;
  qp->rq_stride = g.rq_stride;
  qp->max_recv_wr = g.rq_cap;
  qp->max_recv_sge = g.no_rq ? 0 : g.recv_sge;
  qp->srq = g.srq;
  qp->rq_wrid.assign(g.rq_cnt, 0);
  qp->rq_shadow.assign(size_t(g.rq_cnt) * g.rq_stride, 0);
  qp->sig_all = attr.sq_sig_all != 0;
  qp->lockless = lockless_under(attr.pd);
  qp->sq_lock.init(qp->lockless);
  qp->rq_lock.init(qp->lockless);
  EmuPd* pd = to_pd(attr.pd);
  if (pd->is_parent()) {
    qp->parent_domain = pd;
    pd->refs.fetch_add(1);
  }
}

// The ibv_qp the program holds, in RESET.
void init_program_side(EmuQp* qp, ibv_context* context, const ibv_qp_init_attr_ex& attr,
                       const DcKind* dc) {
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = attr.qp_context;
  q.pd = attr.pd;
  q.send_cq = attr.send_cq;
  q.recv_cq = attr.recv_cq;
  q.srq = attr.srq;
  q.handle = qp->slot;
  q.qp_num = qp->shm->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = dc ? IBV_QPT_DRIVER : attr.qp_type;  // as libmlx5 leaves a DC QP
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.events_completed = 0;
  if (attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    qp->send_ops_flags = static_cast<uint32_t>(attr.send_ops_flags);
    install_wr_ops(qp);
  }
}

// Report what was really made, as ibv_create_qp(3) asks.
void report_caps(const EmuQp& qp, ibv_qp_cap* cap) {
  cap->max_send_wr = qp.max_send_wr;
  cap->max_recv_wr = qp.max_recv_wr;
  cap->max_send_sge = qp.max_send_sge;
  cap->max_recv_sge = qp.max_recv_sge;
  cap->max_inline_data = qp.max_inline;
}

// Where the provider finds the QP: by number (completions), by uid (events), from its CQs (their
// flushes and resizes) and its context (close).
void publish(EmuQp* qp, const ibv_qp_init_attr_ex& attr) {
  ibv_qp& q = qp->qpx.qp_base;
  qp_table_set(q.qp_num, qp);
  registry_put(qp->shm->uid, &q);
  for (ibv_cq* c : {attr.send_cq, attr.recv_cq}) {
    EmuCq* cq = to_cq(c);
    std::lock_guard<std::mutex> g(cq->qps_mu);
    cq->qps.push_back(qp);
    if (attr.send_cq == attr.recv_cq) break;
  }
  std::lock_guard<std::mutex> g(qp->ctx->mu);
  qp->ctx->qps.push_back(qp);
}

}  // namespace

namespace emu::prov {

ibv_qp* create_qp_common(ibv_context* context, ibv_qp_init_attr_ex* attr, const DcKind* dc) {
  constexpr uint32_t kRss = IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  constexpr uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                                  IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_XRCD | kRss;
  if (attr->comp_mask & ~kKnownMask) return fail_null<ibv_qp>(EOPNOTSUPP);
  // An RSS QP receives on the WQs of its indirection table (raw/wq.cpp).
  if (attr->comp_mask & kRss) return create_rss_qp(context, attr);
  // An XRC TGT QP has no PD, CQs or queues: a handle to a QP of the domain (xrc.cpp).
  if (attr->qp_type == IBV_QPT_XRC_RECV) return create_tgt_qp(context, attr);
  if (int err = check_init_attr(context, attr)) return fail_null<ibv_qp>(err);
  QpGeometry g;
  if (!size_rings(*attr, dc, &g)) return fail_null<ibv_qp>(EINVAL);

  EmuContext* ctx = to_ctx(context);
  EmuPd* pd = to_pd(attr->pd);
  if (int err = inject_verb_check(segment(), kVerbCreateQp)) return fail_null<ibv_qp>(err);
  auto* qp = new (std::nothrow) EmuQp();
  if (!qp) return fail_null<ibv_qp>(ENOMEM);
  qp->ctx = ctx;
  // A thread domain's QPs ring its own register; the others share the context's round-robin.
  qp->uar_idx = pd->td ? pd->td->uar_idx : ctx->next_uar.fetch_add(1) % ctx->n_uars;
  Segment* seg = segment();
  reap_dead_windows(seg);  // a new peer, perhaps in place of one that died
  uint32_t slot;
  if (create_qp(seg, spec_of(*attr, dc, g, *ctx, *pd, qp->uar_idx), &slot) != Status::ok) {
    delete qp;
    return fail_null<ibv_qp>(ENOMEM);
  }
  init_provider_side(qp, seg, slot, *attr, g);
  init_program_side(qp, context, *attr, dc);
  report_caps(*qp, &attr->cap);
  publish(qp, *attr);
  return &qp->qpx.qp_base;
}

ibv_qp* emu_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  return create_qp_common(context, attr, nullptr);
}

}  // namespace emu::prov

extern "C" {

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!is_emu(pd->context)) {
    auto fn = REAL(ibv_create_qp, "IBVERBS_1.1");
    return fn ? fn(pd, attr) : fail_null<ibv_qp>(EINVAL);
  }
  ibv_qp_init_attr_ex ex;
  std::memset(&ex, 0, sizeof ex);
  std::memcpy(&ex, attr, sizeof *attr);
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = create_qp_common(pd->context, &ex, nullptr);
  if (qp) attr->cap = ex.cap;
  return qp;
}

}  // extern "C"
