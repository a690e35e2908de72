// SPDX-License-Identifier: BSD-2-Clause
#include "fabric.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace stress {
namespace {

std::string errno_text(const char* what, int e) {
  return std::string(what) + ": " + std::strerror(e);
}

uint8_t* map_zeroed(size_t len) {
  if (len == 0) return nullptr;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

Fabric::~Fabric() {
  // Reverse order of creation.
  for (QpPair& p : pairs_) {
    if (p.initiator) ibv_destroy_qp(p.initiator);
    if (p.target) ibv_destroy_qp(p.target);
    if (p.initiator_cq) ibv_destroy_cq(p.initiator_cq);
    if (p.target_cq) ibv_destroy_cq(p.target_cq);
  }
  if (source_mr_) ibv_dereg_mr(source_mr_);
  if (target_mr_) ibv_dereg_mr(target_mr_);
  if (source_) munmap(source_, source_len_);
  if (target_) munmap(target_, target_len_);
  for (ibv_pd* p : parents_) ibv_dealloc_pd(p);
  for (ibv_td* t : tds_) ibv_dealloc_td(t);
  if (ipd_) ibv_dealloc_pd(ipd_);
  if (tpd_) ibv_dealloc_pd(tpd_);
  if (ictx_) ibv_close_device(ictx_);
  if (tctx_) ibv_close_device(tctx_);
}

bool Fabric::open_contexts(const FabricConfig& cfg, std::string* err) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    *err = errno_text("ibv_get_device_list", errno);
    return false;
  }
  for (int i = 0; i < n && !ictx_; ++i) {
    if (cfg.device != ibv_get_device_name(list[i])) continue;
    ictx_ = ibv_open_device(list[i]);
    tctx_ = ictx_ ? ibv_open_device(list[i]) : nullptr;
  }
  ibv_free_device_list(list);
  if (!ictx_ || !tctx_) {
    *err = "cannot open device " + cfg.device + (n ? "" : " (no devices; run under emu-run?)");
    return false;
  }
  if (ibv_query_port(ictx_, port_, &port_attr_) || ibv_query_gid(ictx_, port_, 0, &gid_)) {
    *err = errno_text("ibv_query_port/gid", errno);
    return false;
  }
  ipd_ = ibv_alloc_pd(ictx_);
  tpd_ = ibv_alloc_pd(tctx_);
  if (!ipd_ || !tpd_) {
    *err = errno_text("ibv_alloc_pd", errno);
    return false;
  }
  return true;
}

bool Fabric::make_thread_domains(const FabricConfig& cfg, std::string* err, bool* td_missing) {
  uint32_t n = cfg.threads < cfg.qps ? cfg.threads : cfg.qps;
  for (uint32_t i = 0; i < n; ++i) {
    ibv_td_init_attr ta{};
    ibv_td* td = ibv_alloc_td(ictx_, &ta);
    if (!td) {
      *td_missing = true;
      *err = errno_text("ibv_alloc_td (thread domains, --td)", errno);
      return false;
    }
    tds_.push_back(td);
    ibv_parent_domain_init_attr pa{};
    pa.pd = ipd_;
    pa.td = td;
    ibv_pd* parent = ibv_alloc_parent_domain(ictx_, &pa);
    if (!parent) {
      *err = errno_text("ibv_alloc_parent_domain", errno);
      return false;
    }
    parents_.push_back(parent);
  }
  return true;
}

bool Fabric::make_pair(const FabricConfig& cfg, uint32_t i, std::string* err) {
  QpPair& p = pairs_[i];
  // Room for every block of the send queue, so that no completion can overrun the CQ even when
  // racing posters make the device complete more WQEs than were meant.
  p.initiator_cq = ibv_create_cq(ictx_, static_cast<int>(cfg.sq_depth * 16), nullptr, nullptr, 0);
  p.target_cq = ibv_create_cq(tctx_, static_cast<int>(cfg.rq_depth * 2), nullptr, nullptr, 0);
  if (!p.initiator_cq || !p.target_cq) {
    *err = errno_text("ibv_create_cq", errno);
    return false;
  }
  ibv_qp_init_attr a{};
  a.qp_type = IBV_QPT_RC;
  a.send_cq = a.recv_cq = p.initiator_cq;
  a.cap.max_send_wr = cfg.sq_depth;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = cfg.max_inline;
  // A QP under a thread domain: the domain of the thread that owns it (lane i's thread).
  ibv_pd* pd = parents_.empty() ? ipd_ : parents_[i % cfg.threads];
  p.initiator = ibv_create_qp(pd, &a);
  if (!p.initiator) {
    *err = errno_text("ibv_create_qp (initiator)", errno);
    return false;
  }
  return true;
}

bool Fabric::connect(ibv_qp* qp, uint32_t dest_qpn, std::string* err) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port_;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (int rc = ibv_modify_qp(
          qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    *err = errno_text("ibv_modify_qp INIT", rc);
    return false;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = port_attr_.active_mtu;
  a.dest_qp_num = dest_qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;  // 0.01 ms: a receiver that re-posts is back soon
  a.ah_attr.dlid = port_attr_.lid;
  a.ah_attr.port_num = port_;
  if (port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET) {  // RoCE: addressed by GID
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid_;
    a.ah_attr.grh.hop_limit = 1;
  }
  if (int rc =
          ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    *err = errno_text("ibv_modify_qp RTR", rc);
    return false;
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;  // infinite: a receiver behind on re-posting is not an error here
  a.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    *err = errno_text("ibv_modify_qp RTS", rc);
    return false;
  }
  return true;
}

bool Fabric::reconnect(uint32_t i, std::string* err) {
  QpPair& p = pairs_[i];
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  for (ibv_qp* qp : {p.initiator, p.target})
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) {
      *err = errno_text("ibv_modify_qp RESET", rc);
      return false;
    }
  return connect(p.initiator, p.target->qp_num, err) && connect(p.target, p.initiator->qp_num, err);
}

bool Fabric::setup(const FabricConfig& cfg, std::string* err, bool* td_missing) {
  *td_missing = false;
  if (!open_contexts(cfg, err)) return false;
  if (cfg.td && !make_thread_domains(cfg, err, td_missing)) return false;
  source_len_ = cfg.source_bytes;
  target_len_ = cfg.target_bytes;
  source_ = map_zeroed(source_len_);
  target_ = map_zeroed(target_len_);
  if ((source_len_ && !source_) || (target_len_ && !target_)) {
    *err = "out of memory for the buffers";
    return false;
  }
  if (source_) source_mr_ = ibv_reg_mr(ipd_, source_, source_len_, IBV_ACCESS_LOCAL_WRITE);
  if (target_)
    target_mr_ =
        ibv_reg_mr(tpd_, target_, target_len_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if ((source_ && !source_mr_) || (target_ && !target_mr_)) {
    *err = errno_text("ibv_reg_mr", errno);
    return false;
  }
  pairs_.resize(cfg.qps);
  // All initiator QPs first, in order: QP i takes the context's register i % EMU_UARS.
  for (uint32_t i = 0; i < cfg.qps; ++i)
    if (!make_pair(cfg, i, err)) return false;
  for (QpPair& p : pairs_) {
    ibv_qp_init_attr a{};
    a.qp_type = IBV_QPT_RC;
    a.send_cq = a.recv_cq = p.target_cq;
    a.cap.max_send_wr = 1;
    a.cap.max_recv_wr = cfg.rq_depth;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    p.target = ibv_create_qp(tpd_, &a);
    if (!p.target) {
      *err = errno_text("ibv_create_qp (target)", errno);
      return false;
    }
  }
  for (QpPair& p : pairs_)
    if (!connect(p.initiator, p.target->qp_num, err) ||
        !connect(p.target, p.initiator->qp_num, err))
      return false;
  return true;
}

}  // namespace stress
