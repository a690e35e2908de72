// SPDX-License-Identifier: BSD-2-Clause
#include "verbs_fixture.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace vt {

ibv_context* open_emu0() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    ADD_FAILURE() << "ibv_get_device_list failed, errno " << errno;
    return nullptr;
  }
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    if (name && std::string(name) == "emu0") {
      ctx = ibv_open_device(list[i]);
      if (!ctx) ADD_FAILURE() << "ibv_open_device(emu0) failed, errno " << errno;
      break;
    }
  }
  if (!ctx && errno != 0) ADD_FAILURE() << "device emu0 not listed (is libemu_verbs.so preloaded?)";
  ibv_free_device_list(list);
  return ctx;
}

uint16_t port_lid(ibv_context* ctx) {
  ibv_port_attr pa;
  std::memset(&pa, 0, sizeof pa);
  int rc = ibv_query_port(ctx, 1, &pa);
  EXPECT_EQ(rc, 0) << "ibv_query_port(1)";
  return rc ? 0 : pa.lid;
}

ibv_qp* create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const QpCaps& caps,
                     ibv_qp_cap* out_cap) {
  return create_qp_of(pd, IBV_QPT_RC, send_cq, recv_cq, caps, nullptr, out_cap);
}

namespace {

ibv_qp_cap to_cap(const QpCaps& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

}  // namespace

ibv_qp* create_qp_of(ibv_pd* pd, ibv_qp_type type, ibv_cq* send_cq, ibv_cq* recv_cq,
                     const QpCaps& caps, ibv_srq* srq, ibv_qp_cap* out_cap) {
  ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.send_cq = send_cq;
  ia.recv_cq = recv_cq;
  ia.srq = srq;
  ia.qp_type = type;
  ia.sq_sig_all = caps.sq_sig_all;
  ia.cap = to_cap(caps);
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp && out_cap) *out_cap = ia.cap;
  return qp;
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_pd* pd, ibv_qp_type type, ibv_cq* cq, const QpCaps& caps,
                     uint64_t send_ops) {
  ibv_qp_init_attr_ex ia;
  std::memset(&ia, 0, sizeof ia);
  ia.qp_type = type;
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.sq_sig_all = caps.sq_sig_all;
  ia.cap = to_cap(caps);
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.pd = pd;
  ia.send_ops_flags = send_ops;
  return ibv_create_qp_ex(ctx, &ia);
}

ibv_qp_attr init_attr(int access, uint8_t port) {
  ibv_qp_attr a{};  // every field not set below is 0
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  a.qp_access_flags = access;
  return a;
}

ibv_qp_attr rtr_attr(uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint8_t min_rnr_timer) {
  ibv_qp_attr a{};  // every field not set below is 0
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = min_rnr_timer;
  a.ah_attr.dlid = dlid;
  a.ah_attr.port_num = 1;
  return a;
}

ibv_qp_attr rts_attr(uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry) {
  ibv_qp_attr a{};  // every field not set below is 0
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = rnr_retry;
  a.max_rd_atomic = 1;
  return a;
}

int to_init(ibv_qp* qp, int access, uint8_t port) {
  ibv_qp_attr a = init_attr(access, port);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int to_rtr(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t rq_psn, uint8_t min_rnr_timer) {
  ibv_qp_attr a = rtr_attr(dlid, dest_qpn, rq_psn, min_rnr_timer);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int to_rts(ibv_qp* qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry) {
  ibv_qp_attr a = rts_attr(sq_psn, timeout, retry_cnt, rnr_retry);
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

int connect_qp(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t my_psn, uint32_t peer_psn,
               const ConnParams& p) {
  if (int rc = to_init(qp, p.access)) return rc;
  if (int rc = to_rtr(qp, dlid, dest_qpn, peer_psn, p.min_rnr_timer)) return rc;
  return to_rts(qp, my_psn, p.timeout, p.retry_cnt, p.rnr_retry);
}

int ud_to_rts(ibv_qp* qp, uint32_t qkey, uint32_t sq_psn) {
  ibv_qp_attr a{};  // every field not set below is 0
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.pkey_index = 0;
  a.qkey = qkey;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return rc;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return rc;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int connect_uc(ibv_qp* qp, uint16_t dlid, uint32_t dest_qpn, uint32_t my_psn, uint32_t peer_psn,
               int access) {
  if (int rc = to_init(qp, access)) return rc;
  // Only the attributes UC takes are in the masks; the others the builders fill are ignored.
  ibv_qp_attr a = rtr_attr(dlid, dest_qpn, peer_psn, 0);
  if (int rc = ibv_modify_qp(
          qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
    return rc;
  a = rts_attr(my_psn, 0, 0, 0);
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

bool get_async_event(ibv_context* ctx, ibv_async_event* ev, std::chrono::milliseconds deadline) {
  int fl = fcntl(ctx->async_fd, F_GETFL);
  if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0)) {
    ADD_FAILURE() << "fcntl(async_fd), errno " << errno;
    return false;
  }
  auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    // Read first: the event may be there already (and a record of a destroyed object is skipped
    // by ibv_get_async_event, which then finds the pipe empty).
    if (ibv_get_async_event(ctx, ev) == 0) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pf{ctx->async_fd, POLLIN, 0};
    if (poll(&pf, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) {
      ADD_FAILURE() << "poll(async_fd), errno " << errno;
      return false;
    }
  }
}

bool async_event_pending(ibv_context* ctx) {
  pollfd pf{ctx->async_fd, POLLIN, 0};
  return poll(&pf, 1, 0) == 1;
}

::testing::AssertionResult send_through(ibv_qp* from, ibv_cq* from_cq, ibv_sge s, ibv_qp* to,
                                        ibv_cq* to_cq, ibv_sge r, uint64_t id,
                                        ibv_wc_status send_status, ibv_wc_status recv_status) {
  if (int rc = post_recv(to, id, &r, 1)) return ::testing::AssertionFailure() << "post_recv " << rc;
  ibv_send_wr w = send_wr(id + 1, IBV_WR_SEND, &s, 1);
  if (int rc = post_one(from, &w)) return ::testing::AssertionFailure() << "post_send " << rc;
  ::testing::AssertionResult sent = wait_wc(from_cq, send_status, id + 1);
  if (!sent) return sent;
  return wait_wc(to_cq, recv_status, id);
}

::testing::AssertionResult only_async_event(ibv_context* ctx, ibv_event_type want,
                                            ibv_async_event* out) {
  if (!get_async_event(ctx, out))
    return ::testing::AssertionFailure() << "no " << ibv_event_type_str(want);
  ibv_ack_async_event(out);
  if (out->event_type != want)
    return ::testing::AssertionFailure()
           << ibv_event_type_str(out->event_type) << ", not " << ibv_event_type_str(want);
  if (async_event_pending(ctx))
    return ::testing::AssertionFailure()
           << "more than one event after " << ibv_event_type_str(want);
  return ::testing::AssertionSuccess();
}

ibv_qp_state qp_state(ibv_qp* qp) {
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  std::memset(&a, 0, sizeof a);
  int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
  EXPECT_EQ(rc, 0) << "ibv_query_qp";
  return a.qp_state;
}

std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t n, std::chrono::milliseconds deadline) {
  std::vector<ibv_wc> out;
  auto end = std::chrono::steady_clock::now() + deadline;
  ibv_wc wc[16];
  while (out.size() < n) {
    int want = static_cast<int>(std::min<size_t>(16, n - out.size()));
    int got = ibv_poll_cq(cq, want, wc);
    if (got < 0) {
      ADD_FAILURE() << "ibv_poll_cq returned " << got;
      break;
    }
    out.insert(out.end(), wc, wc + got);
    if (got == 0 && std::chrono::steady_clock::now() > end) break;
  }
  return out;
}

std::vector<ibv_wc> drain(ibv_cq* cq, int tries) {
  std::vector<ibv_wc> out;
  ibv_wc wc[16];
  for (int i = 0; i < tries; ++i) {
    int got = ibv_poll_cq(cq, 16, wc);
    if (got < 0) {
      ADD_FAILURE() << "ibv_poll_cq returned " << got;
      break;
    }
    out.insert(out.end(), wc, wc + got);
  }
  return out;
}

::testing::AssertionResult wait_wc(ibv_cq* cq, ibv_wc_status status, uint64_t wr_id, ibv_wc* out) {
  auto v = poll_n(cq, 1);
  if (v.empty()) return ::testing::AssertionFailure() << "no completion within the deadline";
  if (out) *out = v[0];
  if (v[0].status != status)
    return ::testing::AssertionFailure()
           << "status " << ibv_wc_status_str(v[0].status) << " (" << v[0].status << "), expected "
           << ibv_wc_status_str(status) << " (wr_id " << v[0].wr_id << ")";
  if (v[0].wr_id != wr_id)
    return ::testing::AssertionFailure() << "wr_id " << v[0].wr_id << ", expected " << wr_id;
  return ::testing::AssertionSuccess();
}

ibv_send_wr send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, int n, unsigned flags) {
  ibv_send_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sg;
  wr.num_sge = n;
  wr.send_flags = flags;
  return wr;
}

ibv_send_wr rdma_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, int n, uint64_t raddr,
                    uint32_t rkey, unsigned flags) {
  ibv_send_wr wr = send_wr(wr_id, op, sg, n, flags);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

ibv_send_wr atomic_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, uint64_t raddr, uint32_t rkey,
                      uint64_t compare_add, uint64_t swap, unsigned flags) {
  ibv_send_wr wr = send_wr(wr_id, op, sg, 1, flags);
  wr.wr.atomic.remote_addr = raddr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

ibv_send_wr ud_send_wr(uint64_t wr_id, ibv_wr_opcode op, ibv_sge* sg, ibv_ah* ah, uint32_t dqpn,
                       uint32_t qkey, unsigned flags) {
  ibv_send_wr wr = send_wr(wr_id, op, sg, 1, flags);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = dqpn;
  wr.wr.ud.remote_qkey = qkey;
  return wr;
}

ibv_ah_attr lid_ah_attr(uint16_t dlid, uint8_t sl) {
  ibv_ah_attr a;
  std::memset(&a, 0, sizeof a);
  a.dlid = dlid;
  a.sl = sl;
  a.port_num = 1;
  return a;
}

void wr_add_write(ibv_qp_ex* x, uint64_t wr_id, uint32_t rkey, uint64_t raddr, const ibv_sge& local,
                  unsigned flags) {
  wr_next(x, wr_id, flags);
  ibv_wr_rdma_write(x, rkey, raddr);
  ibv_wr_set_sge(x, local.lkey, local.addr, local.length);
}

void wr_add_inline_write(ibv_qp_ex* x, uint64_t wr_id, uint32_t rkey, uint64_t raddr, void* src,
                         size_t len, unsigned flags) {
  wr_next(x, wr_id, flags);
  ibv_wr_rdma_write(x, rkey, raddr);
  ibv_wr_set_inline_data(x, src, len);
}

ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags) {
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  return ibv_open_xrcd(ctx, &a);
}

ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq, uint32_t max_wr) {
  ibv_srq_init_attr_ex a{};
  a.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd;
  a.xrcd = xrcd;
  a.cq = cq;
  a.attr.max_wr = max_wr;
  a.attr.max_sge = 1;
  return ibv_create_srq_ex(ctx, &a);
}

ibv_qp* create_xrc_tgt(ibv_context* ctx, ibv_xrcd* xrcd) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  a.xrcd = xrcd;
  return ibv_create_qp_ex(ctx, &a);
}

ibv_qp* create_xrc_ini(ibv_context* ctx, ibv_pd* pd, ibv_cq* send_cq, uint32_t max_send_wr) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_SEND;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  a.send_cq = send_cq;
  a.cap.max_send_wr = max_send_wr;
  a.cap.max_send_sge = 1;
  return ibv_create_qp_ex(ctx, &a);
}

namespace {

// One receive WR posted with `post` (ibv_post_recv or ibv_post_srq_recv, named `what`).
template <typename Queue>
int post_one_recv(int (*post)(Queue*, ibv_recv_wr*, ibv_recv_wr**), const char* what, Queue* q,
                  uint64_t wr_id, ibv_sge* sg, int n) {
  ibv_recv_wr wr;
  std::memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = sg;
  wr.num_sge = n;
  ibv_recv_wr* bad = nullptr;
  int rc = post(q, &wr, &bad);
  if (rc) {
    EXPECT_EQ(bad, &wr) << "bad_wr of a failed " << what;
  }
  return rc;
}

}  // namespace

int post_srq(ibv_srq* srq, uint64_t wr_id, ibv_sge* sg, int n) {
  return post_one_recv(ibv_post_srq_recv, "ibv_post_srq_recv", srq, wr_id, sg, n);
}

int post_recv(ibv_qp* qp, uint64_t wr_id, ibv_sge* sg, int n) {
  return post_one_recv(ibv_post_recv, "ibv_post_recv", qp, wr_id, sg, n);
}

std::string run_command(const std::string& command) {
  std::string cmd = command + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "FAILED: " + command + ": popen";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) out += buf;
  if (pclose(f) != 0) out = "FAILED: " + command + ": " + out;
  return out;
}

void fill_pattern(uint8_t* d, size_t n, uint8_t seed, uint8_t step) {
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(seed + i * step);
}

bool has_pattern(const uint8_t* d, size_t n, uint8_t seed, uint8_t step) {
  for (size_t i = 0; i < n; ++i)
    if (d[i] != static_cast<uint8_t>(seed + i * step)) return false;
  return true;
}

int post_one(ibv_qp* qp, ibv_send_wr* wr) {
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp, wr, &bad);
  if (rc) {
    EXPECT_EQ(bad, wr) << "bad_wr of a failed ibv_post_send";
  }
  return rc;
}

void VerbsTest::SetUp() {
  ctx = open_emu0();
  ASSERT_NE(ctx, nullptr);
  pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr) << "ibv_alloc_pd, errno " << errno;
  lid = port_lid(ctx);
  ASSERT_NE(lid, 0) << "port 1 has no LID";
  SetUpObjects();
}

void VerbsTest::TearDown() {
  for (auto it = qps.rbegin(); it != qps.rend(); ++it) EXPECT_EQ(ibv_destroy_qp(*it), 0);
  for (auto* ah : ahs) EXPECT_EQ(ibv_destroy_ah(ah), 0);
  for (auto it = srqs.rbegin(); it != srqs.rend(); ++it) EXPECT_EQ(ibv_destroy_srq(*it), 0);
  for (auto it = cqs.rbegin(); it != cqs.rend(); ++it) EXPECT_EQ(ibv_destroy_cq(*it), 0);
  for (auto* ch : channels) EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  for (auto& b : bufs) {
    if (b.mr) {
      EXPECT_EQ(ibv_dereg_mr(b.mr), 0);
    }
    munmap(b.p, b.len);
  }
  if (pd) {
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  }
  if (ctx) {
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
}

ibv_cq* VerbsTest::make_cq(int cqe, ibv_comp_channel* ch) {
  ibv_cq* cq = ibv_create_cq(ctx, cqe, nullptr, ch, 0);
  EXPECT_NE(cq, nullptr) << "ibv_create_cq, errno " << errno;
  if (cq) cqs.push_back(cq);
  return cq;
}

ibv_qp* VerbsTest::make_qp(ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps, ibv_qp_cap* out) {
  ibv_qp* qp = create_rc_qp(pd, scq, rcq, caps, out);
  EXPECT_NE(qp, nullptr) << "ibv_create_qp, errno " << errno;
  if (qp) qps.push_back(qp);
  return qp;
}

ibv_qp* VerbsTest::make_qp_of(ibv_qp_type type, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps,
                              ibv_srq* srq, ibv_qp_cap* out) {
  ibv_qp* qp = create_qp_of(pd, type, scq, rcq, caps, srq, out);
  EXPECT_NE(qp, nullptr) << "ibv_create_qp, errno " << errno;
  if (qp) qps.push_back(qp);
  return qp;
}

ibv_qp* VerbsTest::make_qp_ex(ibv_qp_type type, ibv_cq* cq, const QpCaps& caps, uint64_t send_ops) {
  ibv_qp* qp = create_qp_ex(ctx, pd, type, cq, caps, send_ops);
  int err = errno;  // the caller may check why it was refused
  if (qp) qps.push_back(qp);
  errno = err;
  return qp;
}

void VerbsTest::expect_qp_ex_unsupported(ibv_qp_type type, ibv_cq* cq, uint64_t send_ops,
                                         std::initializer_list<uint64_t> ops) {
  for (uint64_t op : ops) {
    errno = 0;
    EXPECT_EQ(make_qp_ex(type, cq, {16, 16, 1, 1, 0}, send_ops | op), nullptr)
        << "send_ops_flags " << op;
    EXPECT_EQ(errno, EOPNOTSUPP);
  }
}

ibv_srq* VerbsTest::make_srq(uint32_t max_wr, uint32_t max_sge, ibv_srq_attr* out) {
  ibv_srq_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.attr.max_wr = max_wr;
  ia.attr.max_sge = max_sge;
  ibv_srq* srq = ibv_create_srq(pd, &ia);
  EXPECT_NE(srq, nullptr) << "ibv_create_srq, errno " << errno;
  if (srq) srqs.push_back(srq);
  if (out) *out = ia.attr;
  return srq;
}

ibv_ah* VerbsTest::make_ah(ibv_ah_attr attr) {
  ibv_ah* ah = ibv_create_ah(pd, &attr);
  EXPECT_NE(ah, nullptr) << "ibv_create_ah, errno " << errno;
  if (ah) ahs.push_back(ah);
  return ah;
}

uint8_t* map_private_file(size_t len) {
  size_t maplen = (len + 4095) & ~size_t(4095);
  int fd = memfd_create("vt-private-file", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = ftruncate(fd, static_cast<off_t>(maplen)) == 0
                ? mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)
                : MAP_FAILED;
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

Buf VerbsTest::make_private_file_buf(size_t len, int access, uint8_t fill) {
  return make_buf_in(map_private_file(len), len, access, fill);
}

Buf VerbsTest::make_buf(size_t len, int access, uint8_t fill) {
  size_t maplen = (len + 4095) & ~size_t(4095);
  void* p = mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return make_buf_in(p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p), len, access, fill);
}

Buf VerbsTest::make_buf_in(uint8_t* p, size_t len, int access, uint8_t fill) {
  Buf b;
  size_t maplen = (len + 4095) & ~size_t(4095);
  if (!p) {
    ADD_FAILURE() << "mmap";
    return b;
  }
  b.p = p;
  b.len = maplen;
  std::memset(b.p, fill, maplen);
  b.mr = ibv_reg_mr(pd, b.p, len, access);
  EXPECT_NE(b.mr, nullptr) << "ibv_reg_mr, errno " << errno;
  bufs.push_back(b);
  return b;
}

VerbsTest::Pair VerbsTest::make_qps(ibv_qp_type type, const QpCaps& caps) {
  Pair p;
  p.cqa = make_cq();
  p.cqb = make_cq();
  if (!p.cqa || !p.cqb) return p;
  p.a = make_qp_of(type, p.cqa, p.cqa, caps);
  p.b = make_qp_of(type, p.cqb, p.cqb, caps);
  return p;
}

VerbsTest::Pair VerbsTest::make_pair(const QpCaps& caps, const ConnParams& pa,
                                     const ConnParams& pb) {
  Pair p = make_qps(IBV_QPT_RC, caps);
  if (!p.a || !p.b) return p;
  EXPECT_EQ(connect_qp(p.a, lid, p.b->qp_num, 0x100, 0x200, pa), 0);
  EXPECT_EQ(connect_qp(p.b, lid, p.a->qp_num, 0x200, 0x100, pb), 0);
  return p;
}

void VerbsTest::forget(ibv_qp* qp) {
  qps.erase(std::remove(qps.begin(), qps.end(), qp), qps.end());
}
void VerbsTest::forget(ibv_cq* cq) {
  cqs.erase(std::remove(cqs.begin(), cqs.end(), cq), cqs.end());
}
void VerbsTest::forget(ibv_srq* srq) {
  srqs.erase(std::remove(srqs.begin(), srqs.end(), srq), srqs.end());
}

}  // namespace vt
