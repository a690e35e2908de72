// SPDX-License-Identifier: BSD-2-Clause
#include "objects.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace player {

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

int err_or(int fallback) { return errno ? errno : fallback; }

uint64_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

ibv_qp_type type_of(const std::string& t, bool* ok) {
  *ok = true;
  if (t == "rc") return IBV_QPT_RC;
  if (t == "uc") return IBV_QPT_UC;
  if (t == "ud") return IBV_QPT_UD;
  if (t == "xrc_send") return IBV_QPT_XRC_SEND;
  if (t == "xrc_recv") return IBV_QPT_XRC_RECV;
  *ok = false;
  return IBV_QPT_RC;
}

// On a RoCE port the address vector must carry a GRH. Players of one comparison run share one
// device (rxe0 in the soft-RoCE VM, emu0 here), so the peer's GID is this port's first RoCE v2
// GID, which the peer, on the same netdev, has too.
int set_roce_path(ibv_qp* qp, ibv_ah_attr* ah) {
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(qp->context, 1, &pa)) return rc;
  if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) return 0;
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(qp->context, 1, i, &e, 0) || e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
    ah->is_global = 1;
    ah->grh.sgid_index = i;
    ah->grh.hop_limit = 64;
    memcpy(&ah->grh.dgid, e.gid.raw, sizeof e.gid.raw);
    return 0;
  }
  return ENODEV;
}

// RESET -> INIT of a connected QP: port 1, every access.
int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = kAccess;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// The QP's state as ibv_query_qp reports it in qp_state (which rxe keeps true; its cur_qp_state
// is not: docs/guides/comparison.md).
int state_of(ibv_qp* qp, ibv_qp_state* state) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &init)) return rc;
  *state = a.qp_state;
  return 0;
}

// (RESET ->) INIT -> RTR -> RTS of a connected QP; each attribute set the type needs.
int connect(ibv_qp* qp, uint16_t lid, uint32_t qpn, uint8_t timeout, uint8_t retry) {
  const bool rc_like = qp->qp_type != IBV_QPT_UC;
  ibv_qp_state now = IBV_QPS_RESET;
  if (int rc = state_of(qp, &now)) return rc;
  if (now != IBV_QPS_INIT)  // a probe may have moved it to INIT already
    if (int rc = to_init(qp)) return rc;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = qpn;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  if (int rc = set_roce_path(qp, &a.ah_attr)) return rc;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (rc_like) {
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  if (int rc = ibv_modify_qp(qp, &a, mask)) return rc;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (rc_like) {
    a.timeout = timeout;
    a.retry_cnt = retry;
    a.rnr_retry = retry;
    a.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  return ibv_modify_qp(qp, &a, mask);
}

int ud_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return rc;
  a.qp_state = IBV_QPS_RTS;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// `count` receives of 64 bytes each, from the start of mr, wr_id their index, through `post`.
template <class Post>
int post_receives(ibv_mr* mr, int count, Post post) {
  for (int i = 0; i < count; ++i) {
    ibv_sge sg{reinterpret_cast<uintptr_t>(mr->addr) + 64u * i, 64, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = i;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = post(&wr, &bad)) return rc;
  }
  return 0;
}

}  // namespace

int Objects::add(Kind k, void* p, Values* out, void* buf) {
  int h = next_++;
  objs_[h] = {k, p, buf};
  out->push_back({"handle", h});
  return 0;
}

int Objects::open(const std::string& dev, Values* out) {
  if (ctx_) return EEXIST;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return err_or(ENODEV);
  for (int i = 0; i < n && !ctx_; ++i)
    if (dev == ibv_get_device_name(list[i])) ctx_ = ibv_open_device(list[i]);
  int e = ctx_ ? 0 : err_or(ENODEV);
  ibv_free_device_list(list);
  if (e) return e;
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(ctx_, 1, &pa)) return rc;
  out->push_back({"lid", pa.lid});
  return 0;
}

int Objects::alloc_pd(Values* out) {
  if (!ctx_) return ENODEV;
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  return pd ? add(Kind::kPd, pd, out) : err_or(ENOMEM);
}

int Objects::reg_mr(int pd_h, size_t len, Values* out) {
  ibv_pd* pd = get<ibv_pd>(pd_h, Kind::kPd);
  if (!pd) return EBADF;
  void* buf = std::calloc(1, len);
  ibv_mr* mr = buf ? ibv_reg_mr(pd, buf, len, kAccess) : nullptr;
  if (!mr) {
    int e = err_or(ENOMEM);
    std::free(buf);
    return e;
  }
  add(Kind::kMr, mr, out, buf);
  out->push_back({"lkey", mr->lkey});
  out->push_back({"rkey", mr->rkey});
  return 0;
}

int Objects::create_cq(int depth, Values* out) {
  if (!ctx_) return ENODEV;
  ibv_cq* cq = ibv_create_cq(ctx_, depth, nullptr, nullptr, 0);
  return cq ? add(Kind::kCq, cq, out) : err_or(ENOMEM);
}

int Objects::create_srq(int pd_h, int depth, Values* out) {
  ibv_pd* pd = get<ibv_pd>(pd_h, Kind::kPd);
  if (!pd) return EBADF;
  ibv_srq_init_attr a{};
  a.attr.max_wr = depth;
  a.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &a);
  return srq ? add(Kind::kSrq, srq, out) : err_or(ENOMEM);
}

int Objects::create_xrc_srq(int xrcd_h, int pd_h, int cq_h, int mr_h, int recvs, Values* out) {
  auto* xrcd = get<ibv_xrcd>(xrcd_h, Kind::kXrcd);
  auto* pd = get<ibv_pd>(pd_h, Kind::kPd);
  auto* cq = get<ibv_cq>(cq_h, Kind::kCq);
  auto* mr = get<ibv_mr>(mr_h, Kind::kMr);
  if (!xrcd || !pd || !cq || !mr) return EBADF;
  ibv_srq_init_attr_ex a{};
  a.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd;
  a.xrcd = xrcd;
  a.cq = cq;
  a.attr.max_wr = recvs > 0 ? recvs : 1;
  a.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq_ex(ctx_, &a);
  if (!srq) return err_or(ENOMEM);
  add(Kind::kSrq, srq, out);
  if (int rc = post_receives(mr, recvs, [srq](ibv_recv_wr* wr, ibv_recv_wr** bad) {
        return ibv_post_srq_recv(srq, wr, bad);
      }))
    return rc;
  uint32_t srqn = 0;
  if (int rc = ibv_get_srq_num(srq, &srqn)) return rc;
  out->push_back({"srqn", srqn});
  return 0;
}

int Objects::create_qp(const std::string& type, int owner, int send_cq, int recv_cq, int srq_h,
                       Values* out) {
  bool ok;
  ibv_qp_init_attr_ex a{};
  a.qp_type = type_of(type, &ok);
  if (!ok) return EINVAL;
  if (a.qp_type == IBV_QPT_XRC_RECV) {
    a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    a.xrcd = get<ibv_xrcd>(owner, Kind::kXrcd);
    if (!a.xrcd) return EBADF;
  } else {
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = get<ibv_pd>(owner, Kind::kPd);
    a.send_cq = get<ibv_cq>(send_cq, Kind::kCq);
    a.recv_cq = a.qp_type == IBV_QPT_XRC_SEND ? nullptr : get<ibv_cq>(recv_cq, Kind::kCq);
    a.srq = srq_h < 0 ? nullptr : get<ibv_srq>(srq_h, Kind::kSrq);
    if (!a.pd || !a.send_cq || (a.qp_type != IBV_QPT_XRC_SEND && !a.recv_cq)) return EBADF;
    a.cap.max_send_wr = 16;
    a.cap.max_send_sge = 1;
    if (a.qp_type != IBV_QPT_XRC_SEND && !a.srq) {
      a.cap.max_recv_wr = 16;
      a.cap.max_recv_sge = 1;
    }
  }
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  if (!qp) return err_or(ENOMEM);
  add(Kind::kQp, qp, out);
  out->push_back({"qpn", qp->qp_num});
  return 0;
}

int Objects::open_xrcd(const std::string& path, int oflags, Values* out) {
  if (!ctx_) return ENODEV;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  ibv_xrcd* x = ibv_open_xrcd(ctx_, &a);
  if (!x) {
    int e = err_or(EINVAL);
    ::close(fd);
    return e;
  }
  files_.push_back(fd);
  return add(Kind::kXrcd, x, out);
}

int Objects::open_qp(int xrcd_h, uint32_t qpn, Values* out) {
  ibv_qp_open_attr a{};
  a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  a.qp_num = qpn;
  a.xrcd = get<ibv_xrcd>(xrcd_h, Kind::kXrcd);
  a.qp_type = IBV_QPT_XRC_RECV;
  if (!a.xrcd) return EBADF;
  ibv_qp* qp = ibv_open_qp(ctx_, &a);
  if (!qp) return err_or(EINVAL);
  add(Kind::kQp, qp, out);
  out->push_back({"qpn", qp->qp_num});
  return 0;
}

int Objects::to_rts(int qp_h, uint16_t lid, uint32_t qpn, uint8_t timeout, uint8_t retry) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  if (!qp) return EBADF;
  return qp->qp_type == IBV_QPT_UD ? ud_to_rts(qp) : connect(qp, lid, qpn, timeout, retry);
}

int Objects::modify_state(int qp_h, const std::string& state) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  if (!qp) return EBADF;
  if (state == "init") return to_init(qp);
  ibv_qp_attr a{};
  if (state == "err")
    a.qp_state = IBV_QPS_ERR;
  else if (state == "reset")
    a.qp_state = IBV_QPS_RESET;
  else
    return EINVAL;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

namespace {

// One signalled work request of one gather entry, `len` bytes from the start of mr.
int post_one(ibv_qp* qp, ibv_send_wr* wr, ibv_mr* mr, uint32_t len, uint32_t lkey_delta) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(mr->addr), len, mr->lkey + lkey_delta};
  wr->send_flags = IBV_SEND_SIGNALED;
  wr->sg_list = &sg;
  wr->num_sge = 1;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, wr, &bad);
}

}  // namespace

int Objects::post_send(int qp_h, int mr_h, uint32_t srqn, uint32_t tag, uint32_t len,
                       uint32_t lkey_delta) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  auto* mr = get<ibv_mr>(mr_h, Kind::kMr);
  if (!qp || !mr) return EBADF;
  if (qp->qp_type == IBV_QPT_UD) return EOPNOTSUPP;
  ibv_send_wr wr{};
  wr.wr_id = tag;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(tag);
  wr.qp_type.xrc.remote_srqn = srqn;
  return post_one(qp, &wr, mr, len, lkey_delta);
}

int Objects::post_write(int qp_h, int mr_h, uint32_t rkey_delta) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  auto* mr = get<ibv_mr>(mr_h, Kind::kMr);
  if (!qp || !mr) return EBADF;
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mr->addr);
  wr.wr.rdma.rkey = mr->rkey + rkey_delta;
  return post_one(qp, &wr, mr, 16, 0);
}

int Objects::async_events(Values* out) {
  if (!ctx_) return ENODEV;
  // Non-blocking from the first read on: ibv_get_async_event then fails with EAGAIN when none is
  // pending, which ends the step (the fd is the context's own, read by nothing else here).
  int flags = fcntl(ctx_->async_fd, F_GETFL);
  if (flags < 0 || fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  long n = 0;
  ibv_async_event ev{};
  while (ibv_get_async_event(ctx_, &ev) == 0) {
    out->push_back({"event" + std::to_string(n++), ev.event_type});
    ibv_ack_async_event(&ev);
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
  out->insert(out->begin(), {"n", n});
  return 0;
}

int Objects::query_qp(int qp_h, Values* out) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  if (!qp) return EBADF;
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  if (int rc = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_CAP, &init)) return rc;
  out->push_back({"state", a.qp_state});
  out->push_back({"cur_state", a.cur_qp_state});
  out->push_back({"cap_send_wr", a.cap.max_send_wr});
  out->push_back({"cap_recv_wr", a.cap.max_recv_wr});
  return 0;
}

int Objects::post_recv(int qp_h, int mr_h, int count) {
  ibv_qp* qp = get<ibv_qp>(qp_h, Kind::kQp);
  auto* mr = get<ibv_mr>(mr_h, Kind::kMr);
  if (!qp || !mr) return EBADF;
  return post_receives(
      mr, count, [qp](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); });
}

namespace {

// Completions into `got` until there are max or `more` says stop (called when the CQ is empty).
template <class More>
int poll_until(ibv_cq* cq, size_t max, std::vector<ibv_wc>* got, More more) {
  while (got->size() < max) {
    ibv_wc wc{};
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return EIO;
    if (n == 1)
      got->push_back(wc);
    else if (!more())
      break;
  }
  return 0;
}

void report(const std::vector<ibv_wc>& got, Values* out) {
  out->push_back({"n", static_cast<long>(got.size())});
  for (size_t i = 0; i < got.size(); ++i) {
    out->push_back({"status" + std::to_string(i), got[i].status});
    // An error completion's fields other than wr_id, status, qp_num and vendor_err are undefined
    // (ibv_poll_cq(3)): devices differ there (emu0 and mlx5 keep WITH_IMM, rxe clears it), so no
    // immediate is reported for one.
    const bool has_imm = got[i].status == IBV_WC_SUCCESS && (got[i].wc_flags & IBV_WC_WITH_IMM);
    long imm = has_imm ? long(ntohl(got[i].imm_data)) : -1L;
    out->push_back({"imm" + std::to_string(i), imm});
  }
}

}  // namespace

int Objects::poll(int cq_h, int max, int ms, Values* out) {
  auto* cq = get<ibv_cq>(cq_h, Kind::kCq);
  if (!cq) return EBADF;
  std::vector<ibv_wc> got;
  const uint64_t deadline = now_ms() + ms;
  // Polling is what drives the emulated device's timers (retry, RNR), so this loop is the wait.
  int rc = poll_until(cq, max, &got, [deadline] {
    if (now_ms() >= deadline) return false;
    sched_yield();
    return true;
  });
  if (rc == 0) report(got, out);
  return rc;
}

int Objects::poll_tries(int cq_h, int max, int tries, Values* out) {
  auto* cq = get<ibv_cq>(cq_h, Kind::kCq);
  if (!cq) return EBADF;
  std::vector<ibv_wc> got;
  int rc = poll_until(cq, max, &got, [&tries] { return --tries > 0; });
  if (rc == 0) report(got, out);
  return rc;
}

// The verb that releases an object of each kind, by Kind.
template <class T, int (*Verb)(T*)>
int release_as(void* p) {
  return Verb(static_cast<T*>(p));
}
constexpr int (*kRelease[])(void*) = {
    release_as<ibv_pd, ibv_dealloc_pd>, release_as<ibv_mr, ibv_dereg_mr>,
    release_as<ibv_cq, ibv_destroy_cq>, release_as<ibv_srq, ibv_destroy_srq>,
    release_as<ibv_qp, ibv_destroy_qp>, release_as<ibv_xrcd, ibv_close_xrcd>};

int Objects::destroy(int h) {
  auto it = objs_.find(h);
  if (it == objs_.end()) return EBADF;
  if (int rc = kRelease[static_cast<int>(it->second.kind)](it->second.ptr)) return rc;
  std::free(it->second.buf);
  objs_.erase(it);
  return 0;
}

}  // namespace player
