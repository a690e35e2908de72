// SPDX-License-Identifier: BSD-2-Clause
// Receive-side scaling on raw packet QPs: receive work queues (ibv_create_wq(3)), indirection
// tables of them (ibv_create_rwq_ind_table(3)) and the RSS QP made over one with rx_hash_conf
// (ibv_create_qp_ex(3)). A WQ is a raw packet QP slot used only for its receive queue and CQ, so
// the engine delivers to it as to any raw QP; the RSS QP's slot names an RssSlot (emu/raw.h) with
// the hash and the WQs, where the engine of any process finds them.
#include <cerrno>
#include <cstring>
#include <vector>

#include "emu/raw.h"
#include "verbs/provider.h"

using namespace emu;
using namespace emu::prov;

namespace emu::prov {

struct EmuWq {
  ibv_wq wq;                        // first: the pointer the user holds converts both ways
  EmuQp* rq;                        // the QP slot whose receive queue this is
  std::atomic<uint32_t> tables{0};  // indirection tables naming it (a WQ in one is busy)
};

struct EmuIndTable {
  ibv_rwq_ind_table table;
  std::vector<EmuWq*> wqs;
  std::atomic<uint32_t> qps{0};  // RSS QPs made over it
};

}  // namespace emu::prov

namespace {

EmuWq* to_wq(ibv_wq* wq) { return reinterpret_cast<EmuWq*>(wq); }
EmuIndTable* to_table(ibv_rwq_ind_table* t) { return reinterpret_cast<EmuIndTable*>(t); }
std::atomic<int> g_table_num{0};

int wq_post_recv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return emu_post_recv(&to_wq(wq)->rq->qpx.qp_base, wr, bad);
}

// A raw packet QP slot over `cq` with the given receive capacities and no send queue to speak of.
ibv_qp* raw_slot(ibv_context* context, ibv_pd* pd, ibv_cq* cq, uint32_t max_wr, uint32_t max_sge) {
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.send_cq = qa.recv_cq = cq;
  qa.pd = pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qa.cap = {1, max_wr, 1, max_sge, 0};
  return create_qp_common(context, &qa, nullptr);
}

// What ibv_create_qp_ex(3) refuses of an RSS QP: EINVAL, or EOPNOTSUPP for a hash emu lacks.
int check_rss(ibv_context* context, const ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kNeeded =
      IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  if (attr->qp_type != IBV_QPT_RAW_PACKET || (attr->comp_mask & kNeeded) != kNeeded || !attr->pd ||
      attr->pd->context != context || !attr->rwq_ind_tbl || attr->rwq_ind_tbl->context != context ||
      attr->srq)
    return EINVAL;
  if (!device_has_ethernet(to_ctx(context)->dev)) return EOPNOTSUPP;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) return EOPNOTSUPP;
  const ibv_rx_hash_conf& h = attr->rx_hash_conf;
  if (h.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ) return EOPNOTSUPP;
  if (h.rx_hash_fields_mask & ~kRssFieldsKnown) return EOPNOTSUPP;  // inner, IPsec SPI
  if (!h.rx_hash_key || h.rx_hash_key_len == 0 || h.rx_hash_key_len > kRssKeyMax) return EINVAL;
  return 0;
}

}  // namespace

namespace emu::prov {

ibv_wq* emu_create_wq(ibv_context* context, ibv_wq_init_attr* attr) {
  if (!attr || attr->wq_type != IBV_WQT_RQ || !attr->pd || !attr->cq ||
      attr->pd->context != context || attr->cq->context != context || attr->max_wr == 0)
    return fail_null<ibv_wq>(EINVAL);
  if ((attr->comp_mask & ~IBV_WQ_INIT_ATTR_FLAGS) ||
      ((attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && attr->create_flags))
    return fail_null<ibv_wq>(EOPNOTSUPP);  // CVLAN stripping, scatter FCS, padding: not done
  if (!device_has_ethernet(to_ctx(context)->dev)) return fail_null<ibv_wq>(EOPNOTSUPP);
  ibv_qp* q = raw_slot(context, attr->pd, attr->cq, attr->max_wr, attr->max_sge);
  if (!q) return nullptr;  // errno set (EINVAL past the device's limits)
  auto* w = new (std::nothrow) EmuWq();
  if (!w) {
    ibv_destroy_qp(q);
    return fail_null<ibv_wq>(ENOMEM);
  }
  w->rq = to_qp(q);
  ibv_wq& wq = w->wq;
  wq = ibv_wq{context,    attr->wq_context, attr->pd, attr->cq, q->qp_num, q->handle, IBV_WQS_RESET,
              IBV_WQT_RQ, wq_post_recv,     {},       {},       0,         0};
  pthread_mutex_init(&wq.mutex, nullptr);
  pthread_cond_init(&wq.cond, nullptr);
  attr->max_wr = w->rq->max_recv_wr;
  attr->max_sge = w->rq->max_recv_sge;
  return &wq;
}

int emu_modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
  EmuWq* w = to_wq(wq);
  if (attr->attr_mask & ~(IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS))
    return EINVAL;
  if ((attr->attr_mask & IBV_WQ_ATTR_FLAGS) && attr->flags_mask) return EOPNOTSUPP;
  if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != wq->state) return EINVAL;
  if (!(attr->attr_mask & IBV_WQ_ATTR_STATE)) return 0;
  ibv_qp* q = &w->rq->qpx.qp_base;
  ibv_qp_attr qa{};
  switch (attr->wq_state) {
    case IBV_WQS_RESET:
    case IBV_WQS_ERR: {
      qa.qp_state = attr->wq_state == IBV_WQS_RESET ? IBV_QPS_RESET : IBV_QPS_ERR;
      if (int e = ibv_modify_qp(q, &qa, IBV_QP_STATE)) return e;
      break;
    }
    case IBV_WQS_RDY:
      // Ready to receive: the slot takes frames as a raw QP in RTS does. Not out of ERR (a reset
      // first, as a QP).
      if (wq->state == IBV_WQS_ERR) return EINVAL;
      w->rq->shm->qp_state.store(kQpsRts, std::memory_order_release);
      q->state = IBV_QPS_RTS;
      break;
    default:
      return EINVAL;
  }
  wq->state = attr->wq_state;
  return 0;
}

int emu_destroy_wq(ibv_wq* wq) {
  EmuWq* w = to_wq(wq);
  if (w->tables.load()) return EBUSY;  // an indirection table names it
  if (int e = ibv_destroy_qp(&w->rq->qpx.qp_base)) return e;
  delete w;
  return 0;
}

ibv_rwq_ind_table* emu_create_rwq_ind_table(ibv_context* context,
                                            ibv_rwq_ind_table_init_attr* attr) {
  if (!attr || attr->comp_mask || attr->log_ind_tbl_size > kRssLogTableMax || !attr->ind_tbl)
    return fail_null<ibv_rwq_ind_table>(EINVAL);
  uint32_t n = 1u << attr->log_ind_tbl_size;
  for (uint32_t i = 0; i < n; ++i)
    if (!attr->ind_tbl[i] || attr->ind_tbl[i]->context != context)
      return fail_null<ibv_rwq_ind_table>(EINVAL);
  auto* t = new (std::nothrow) EmuIndTable();
  if (!t) return fail_null<ibv_rwq_ind_table>(ENOMEM);
  for (uint32_t i = 0; i < n; ++i) {
    EmuWq* w = to_wq(attr->ind_tbl[i]);
    w->tables.fetch_add(1);
    t->wqs.push_back(w);
  }
  int num = g_table_num.fetch_add(1);
  t->table = ibv_rwq_ind_table{context, num, num, 0};
  return &t->table;
}

int emu_destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
  EmuIndTable* t = to_table(table);
  if (t->qps.load()) return EBUSY;  // an RSS QP receives through it
  for (EmuWq* w : t->wqs) w->tables.fetch_sub(1);
  delete t;
  return 0;
}

ibv_qp* create_rss_qp(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (int e = check_rss(context, attr)) return fail_null<ibv_qp>(e);
  EmuIndTable* t = to_table(attr->rwq_ind_tbl);
  ibv_qp* q = raw_slot(context, attr->pd, t->wqs[0]->wq.cq, 1, 1);
  if (!q) return nullptr;
  Segment* seg = segment();
  uint32_t idx;
  if (create_rss(seg, &idx) != Status::ok) {
    ibv_destroy_qp(q);
    return fail_null<ibv_qp>(ENOMEM);
  }
  RssSlot& r = seg->hdr()->raw.rss[idx];
  const ibv_rx_hash_conf& h = attr->rx_hash_conf;
  r.fields = h.rx_hash_fields_mask;
  r.key_len = h.rx_hash_key_len;
  std::memcpy(r.key, h.rx_hash_key, h.rx_hash_key_len);
  r.log_size = 0;
  while ((1u << r.log_size) < t->wqs.size()) ++r.log_size;
  for (size_t i = 0; i < t->wqs.size(); ++i) {
    r.wq[i] = t->wqs[i]->rq->slot;
    r.wq_qpn[i] = t->wqs[i]->wq.wq_num;
  }
  EmuQp* qp = to_qp(q);
  qp->shm->rss_ref = idx + 1;
  qp->rss_slot = idx + 1;
  qp->ind_table = t;
  t->qps.fetch_add(1);
  q->qp_context = attr->qp_context;
  return q;
}

void release_rss(EmuQp* qp) {
  Segment* seg = segment();
  free_rss(seg, seg->hdr()->raw.rss[qp->rss_slot - 1]);
  qp->shm->rss_ref = 0;
  qp->rss_slot = 0;
  qp->ind_table->qps.fetch_sub(1);
  qp->ind_table = nullptr;
}

}  // namespace emu::prov
