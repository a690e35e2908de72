// SPDX-License-Identifier: BSD-2-Clause
// Queue pairs: create, modify (the IBTA state machine with ibv_modify_qp(3)'s attribute rules),
// query, destroy.
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "av.h"
#include "emu/barriers.h"
#include "emu/device.h"
#include "emu/inject.h"
#include "emu/notify.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

EmuQp* emu::prov::g_qp_table[kMaxQps];

namespace {

// Attribute rules for RC transitions: what must be given and what may be.
struct Rule {
  int required;
  int optional;
};

constexpr int kQpAttrAll =
    IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
    IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
    IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
    IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN;

bool rc_rule(uint32_t cur, uint32_t next, Rule* r) {
  *r = {0, 0};
  if (next == kQpsReset) return true;            // from any state, no attributes
  if (next == kQpsErr) return cur != kQpsReset;  // any but RESET (the kernel's table)
  switch (cur) {
    case kQpsReset:
      if (next == kQpsInit) {
        *r = {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
        return true;
      }
      return false;
    case kQpsInit:
      if (next == kQpsInit) {
        *r = {0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
        return true;
      }
      if (next == kQpsRtr) {
        *r = {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
              IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
        return true;
      }
      return false;
    case kQpsRtr:
      if (next == kQpsRts) {
        *r = {IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                  IBV_QP_MAX_QP_RD_ATOMIC,
              IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                  IBV_QP_PATH_MIG_STATE};
        return true;
      }
      return false;
    case kQpsRts:
      if (next == kQpsRts) {
        *r = {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                     IBV_QP_MIN_RNR_TIMER};
        return true;
      }
      if (next == kQpsSqd) {
        *r = {0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
        return true;
      }
      return false;
    case kQpsSqd:
      if (next == kQpsRts) {
        *r = {0, IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                     IBV_QP_PATH_MIG_STATE};
        return true;
      }
      if (next == kQpsSqd) {
        *r = {0, IBV_QP_PORT | IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
                     IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE |
                     IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC};
        return true;
      }
      return false;
    case kQpsSqe:  // an RC QP never enters SQE; the kernel's RC row has no attributes here
      if (next == kQpsRts) return true;
      return false;
    case kQpsErr:
      return false;
  }
  return false;
}

// Attributes only a reliable connection has.
constexpr int kRcOnly = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

// UC: the RC table without the reliability attributes; from SQE (which UC can enter) back to RTS.
bool uc_rule(uint32_t cur, uint32_t next, Rule* r) {
  if (cur == kQpsSqe && next == kQpsRts) {
    *r = {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS};
    return true;
  }
  if (!rc_rule(cur, next, r)) return false;
  r->required &= ~kRcOnly;
  r->optional &= ~kRcOnly;
  return true;
}

// UD: the Q_Key instead of the path; no path, PSN only for the send side.
bool ud_rule(uint32_t cur, uint32_t next, Rule* r) {
  *r = {0, 0};
  if (next == kQpsReset) return true;
  if (next == kQpsErr) return cur != kQpsReset;
  switch (cur) {
    case kQpsReset:
      *r = {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0};
      return next == kQpsInit;
    case kQpsInit:
      if (next == kQpsInit)
        *r = {0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY};
      else if (next == kQpsRtr)
        *r = {0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      return next == kQpsInit || next == kQpsRtr;
    case kQpsRtr:
      *r = {IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      return next == kQpsRts;
    case kQpsRts:
      if (next == kQpsRts)
        *r = {0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      else if (next == kQpsSqd)
        *r = {0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
      return next == kQpsRts || next == kQpsSqd;
    case kQpsSqd:
      if (next == kQpsRts)
        *r = {0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      else if (next == kQpsSqd)
        *r = {0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY};
      return next == kQpsRts || next == kQpsSqd;
    case kQpsSqe:
      *r = {0, IBV_QP_CUR_STATE | IBV_QP_QKEY};
      return next == kQpsRts;
  }
  return false;
}

// XRC INI QPs: the RC table without the receive side at RTR (the kernel's XRC_INI column).
bool xrc_ini_rule(uint32_t cur, uint32_t next, Rule* r) {
  if (!rc_rule(cur, next, r)) return false;
  if (cur == kQpsInit && next == kQpsRtr) {
    r->required &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    r->optional |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  return true;
}

// XRC TGT QPs: the RC table without the send side at RTS (the kernel's XRC_TGT column: timeout and
// SQ PSN only).
bool xrc_tgt_rule(uint32_t cur, uint32_t next, Rule* r) {
  if (!rc_rule(cur, next, r)) return false;
  if (cur == kQpsRtr && next == kQpsRts) {
    r->required = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    r->optional |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return true;
}

// Raw packet: no addresses or keys, only the port (the kernel's RAW_PACKET column).
bool raw_rule(uint32_t cur, uint32_t next, Rule* r) {
  *r = {0, 0};
  if (next == kQpsReset) return true;
  if (next == kQpsErr) return cur != kQpsReset;
  if (cur == kQpsReset && next == kQpsInit) *r = {IBV_QP_PORT, 0};
  if (cur == kQpsInit && next == kQpsInit) *r = {0, IBV_QP_PORT};
  return (cur == kQpsReset && next == kQpsInit) || (cur == kQpsInit && next == kQpsInit) ||
         (cur == kQpsInit && next == kQpsRtr) || (cur == kQpsRtr && next == kQpsRts) ||
         (cur == kQpsRts && next == kQpsRts);
}

// DCI (mlx5's dynamically connected initiator): RC's table without a destination (each WQE
// names its DCT) or a receive side: RTR takes the path MTU, and the path's port and rates (AV)
// if given.
bool dci_rule(uint32_t cur, uint32_t next, Rule* r) {
  if (!rc_rule(cur, next, r)) return false;
  if (cur == kQpsReset && next == kQpsInit) *r = {IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0};
  if (cur == kQpsInit && next == kQpsRtr)
    *r = {IBV_QP_PATH_MTU, IBV_QP_AV | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER};
  return true;
}

// DCT (mlx5's dynamically connected target): reaches RTR and stays there; no send side, no
// destination (it answers any DCI holding its key).
bool dct_rule(uint32_t cur, uint32_t next, Rule* r) {
  *r = {0, 0};
  if (next == kQpsReset) return true;
  if (next == kQpsErr) return cur != kQpsReset;
  if (cur == kQpsReset && next == kQpsInit) {
    *r = {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
    return true;
  }
  if (cur == kQpsInit && next == kQpsRtr) {
    *r = {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER,
          IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
    return true;
  }
  return false;
}

bool transition_rule(ibv_qp_type type, uint32_t cur, uint32_t next, Rule* r) {
  if (type == IBV_QPT_UD) return ud_rule(cur, next, r);
  if (type == IBV_QPT_RAW_PACKET) return raw_rule(cur, next, r);
  if (type == IBV_QPT_XRC_SEND) return xrc_ini_rule(cur, next, r);
  if (type == IBV_QPT_XRC_RECV) return xrc_tgt_rule(cur, next, r);
  if (type == IBV_QPT_UC) return uc_rule(cur, next, r);
  return rc_rule(cur, next, r);
}

// The remote rights are what a QP's access flags mean; local write and on-demand paging are MR
// rights that programs pass here too (rdma-core's ODP tests do) and the kernel lets through.
constexpr unsigned kQpAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                    IBV_ACCESS_ON_DEMAND;

int check_values(EmuQp* qp, const ibv_qp_attr* a, int mask) {
  Header* h = segment()->hdr();
  uint32_t nports = h->devices[qp->ctx->dev].num_ports;
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > nports)) return EINVAL;
  // A raw packet QP carries Ethernet frames: only an Ethernet port takes it (EINVAL, as mlx5).
  if ((mask & IBV_QP_PORT) && qp->qpx.qp_base.qp_type == IBV_QPT_RAW_PACKET &&
      !port_is_ethernet(qp->ctx->dev, a->port_num))
    return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~kQpAccessKnown)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
    return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > Limits::max_rd_atom) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > Limits::max_rd_atom)
    return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return EINVAL;
  if ((mask & (IBV_QP_RQ_PSN)) && a->rq_psn > 0xffffff) return EINVAL;
  if ((mask & (IBV_QP_SQ_PSN)) && a->sq_psn > 0xffffff) return EINVAL;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = a->ah_attr;
    if (ah.port_num && ah.port_num > nports) return EINVAL;
    uint8_t port = ah.port_num ? ah.port_num : (mask & IBV_QP_PORT) ? a->port_num : qp->shm->port;
    if (!av_valid_for_port(qp->ctx->dev, port, ah)) return EINVAL;
  }
  if (mask & IBV_QP_CAP) return EINVAL;  // resizing queues by modify is not supported
  return 0;
}

void reset_queues(EmuQp* qp) {
  qp->sq_lock.lock();  // (a lockless QP: its user promises no post meanwhile)
  qp->rq_lock.lock();
  qp->sq_head = 0;
  qp->sq_tail.store(0);
  qp->sq_posted = 0;
  qp->sq_retired.store(0);
  qp->rq_head = qp->rq_tail = 0;
  // Completions of the old incarnation still in the CQs are dropped at poll (mlx5 cleans them out).
  qp->incarnation = reset_qp_device_state(segment(), *qp->shm);
  qp->rq_lock.unlock();
  qp->sq_lock.unlock();
}

}  // namespace

namespace emu::prov {

void qp_table_set(uint32_t qpn, EmuQp* qp) { g_qp_table[qpn & (kMaxQps - 1)] = qp; }

void qp_progress(EmuQp* qp) { device_kick_sq(*qp->shm); }

}  // namespace emu::prov

extern "C" {

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (!is_emu(qp->context)) {
    auto fn = REAL(ibv_qp_to_qp_ex, "IBVERBS_1.6");
    return fn ? fn(qp) : nullptr;
  }
  EmuQp* q = to_qp(qp);
  return q->send_ops_flags ? &q->qpx : nullptr;
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  if (!is_emu(ibqp->context)) {
    auto fn = REAL(ibv_modify_qp, "IBVERBS_1.1");
    return fn ? fn(ibqp, attr, mask) : EINVAL;
  }
  EmuQp* qp = to_qp(ibqp);
  if (inherited(qp)) return EPERM;
  QpSlot& s = *qp->shm;
  if (mask & ~kQpAttrAll) return EINVAL;
  std::lock_guard<std::mutex> one_transition(qp->modify_mu);
  uint32_t cur = s.qp_state.load();
  if (mask & IBV_QP_CUR_STATE) {
    // As the kernel does: a stated current state must be one of these, and the rules are those of
    // the transition from it.
    uint32_t c = attr->cur_qp_state;
    if (c != kQpsRtr && c != kQpsRts && c != kQpsSqd && c != kQpsSqe) return EINVAL;
    cur = c;
  }
  uint32_t next = (mask & IBV_QP_STATE) ? static_cast<uint32_t>(attr->qp_state) : cur;
  if (next > kQpsErr) return EINVAL;
  Rule rule;
  uint8_t kind = s.type;
  bool known = kind == kQptDci   ? dci_rule(cur, next, &rule)
               : kind == kQptDct ? dct_rule(cur, next, &rule)
                                 : transition_rule(ibqp->qp_type, cur, next, &rule);
  if (!known) return EINVAL;
  int given = mask & ~IBV_QP_STATE;
  if ((given & rule.required) != rule.required) return EINVAL;
  if (given & ~(rule.required | rule.optional)) return EINVAL;
  if (int e = check_values(qp, attr, mask)) return e;

  if (mask & IBV_QP_PORT) s.port = attr->port_num;
  if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_ACCESS_FLAGS) s.access = attr->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) s.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) s.dest_qpn = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) s.rq_psn = attr->rq_psn;
  if (mask & IBV_QP_SQ_PSN) s.sq_psn = attr->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = attr->max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) s.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_QKEY) s.qkey = attr->qkey;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = attr->ah_attr;
    s.dlid = ah.dlid;
    s.sl = ah.sl;
    s.is_global = ah.is_global;
    s.sgid_index = ah.grh.sgid_index;
    std::memcpy(s.dgid, ah.grh.dgid.raw, 16);
    if (ah.port_num) s.port = ah.port_num;
  }
  device_routes_changed(segment()->hdr());  // engines look their responders up anew
  if (next == kQpsReset) {
    s.qp_state.store(kQpsReset);
    reset_queues(qp);
  } else if (next == kQpsErr) {
    device_enter_error(s);
  } else {
    s.qp_state.store(next, std::memory_order_release);
    if (next == kQpsRts) device_kick_sq(s);
    // Nothing is in flight once the engine has returned: the drain is complete at once.
    if (next == kQpsSqd && cur == kQpsRts && (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) &&
        attr->en_sqd_async_notify)
      notify_async(segment()->hdr()->ctxs[qp->ctx->slot], s.uid, IBV_EVENT_SQ_DRAINED);
  }
  ibqp->state = static_cast<ibv_qp_state>(next);
  return 0;
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  if (!is_emu(ibqp->context)) {
    auto fn = REAL(ibv_query_qp, "IBVERBS_1.1");
    return fn ? fn(ibqp, attr, mask, init) : EINVAL;
  }
  EmuQp* qp = to_qp(ibqp);
  const QpSlot& s = *qp->shm;
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = static_cast<ibv_qp_state>(s.qp_state.load());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = static_cast<ibv_mtu>(s.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = s.qkey;
  attr->rq_psn = s.rq_psn;
  attr->sq_psn = s.sq_psn;
  attr->dest_qp_num = s.dest_qpn;
  attr->qp_access_flags = static_cast<int>(s.access);
  attr->cap.max_send_wr = qp->max_send_wr;
  attr->cap.max_recv_wr = qp->max_recv_wr;
  attr->cap.max_send_sge = qp->max_send_sge;
  attr->cap.max_recv_sge = qp->max_recv_sge;
  attr->cap.max_inline_data = qp->max_inline;
  attr->ah_attr.dlid = s.dlid;
  attr->ah_attr.sl = s.sl;
  attr->ah_attr.is_global = s.is_global;
  attr->ah_attr.grh.sgid_index = s.sgid_index;
  std::memcpy(attr->ah_attr.grh.dgid.raw, s.dgid, 16);
  attr->ah_attr.port_num = s.port;
  attr->pkey_index = s.pkey_index;
  attr->sq_draining = 0;
  attr->max_rd_atomic = s.max_rd_atomic;
  attr->max_dest_rd_atomic = s.max_dest_rd_atomic;
  attr->min_rnr_timer = s.min_rnr_timer;
  attr->port_num = s.port;
  attr->timeout = s.timeout;
  attr->retry_cnt = s.retry_cnt;
  attr->rnr_retry = s.rnr_retry;
  if (init) {
    std::memset(init, 0, sizeof *init);
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = attr->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = qp->sig_all;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  if (!is_emu(ibqp->context)) {
    auto fn = REAL(ibv_destroy_qp, "IBVERBS_1.1");
    return fn ? fn(ibqp) : EINVAL;
  }
  if (inherited(to_qp(ibqp))) return EPERM;
  if (ibqp->qp_type == IBV_QPT_XRC_RECV) return destroy_tgt_qp_handle(to_qp(ibqp));
  EmuQp* qp = to_qp(ibqp);
  if (qp->flows.load()) return EBUSY;  // flow rules steer to it (the kernel's use count)
  if (qp->rss_slot) release_rss(qp);
  QpSlot& s = *qp->shm;
  Segment* seg = segment();
  stop_qp(seg, s);  // the device stops on it before its rings go
  for (ibv_cq* c : {ibqp->send_cq, ibqp->recv_cq}) {
    EmuCq* cq = to_cq(c);
    std::lock_guard<std::mutex> g(cq->qps_mu);
    auto& v = cq->qps;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == qp) {
        v.erase(v.begin() + static_cast<long>(i));
        break;
      }
  }
  {
    std::lock_guard<std::mutex> g(qp->ctx->mu);
    auto& v = qp->ctx->qps;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == qp) {
        v.erase(v.begin() + static_cast<long>(i));
        break;
      }
  }
  registry_del(s.uid);
  wait_event_acks(ibqp, qp->async_events_read);
  wait_for_engines(seg);  // a peer's engine may still be inside our rings
  {
    // Pollers of the CQs may be looking this QP up right now: unlink it under their locks. No
    // engine writes completions for it any more: the SRQ WQEs its unpolled receive completions
    // took go back to the SRQ (polls drop those completions from now on).
    EmuCq* a = to_cq(ibqp->send_cq);
    EmuCq* b = to_cq(ibqp->recv_cq);
    if (a > b) std::swap(a, b);
    a->lock.lock();
    if (b != a) b->lock.lock();
    if (qp->srq) srq_reclaim_cqes(qp);
    qp_table_set(ibqp->qp_num, nullptr);
    if (b != a) b->lock.unlock();
    a->lock.unlock();
  }
  if (qp->parent_domain) qp->parent_domain->refs.fetch_sub(1);
  free_qp(seg, s);
  delete qp;
  return 0;
}

}  // extern "C"
