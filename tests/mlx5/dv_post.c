// SPDX-License-Identifier: BSD-2-Clause
// Posting as code written for ConnectX does, from mlx5dv(7), mlx5dv_init_obj(3) and
// mlx5dv_create_cq(3): the QP and CQ made with verbs, their queues taken with mlx5dv_init_obj, WQEs
// built with mlx5dv.h's helpers in the send ring, the doorbell record stored, then the BlueFlame
// register written by plain stores (the 8-byte doorbell, or the whole WQE copied in 8-, 16- or
// 32-byte stores, rep movsq or memcpy), and completions read from the CQ ring by the owner bit,
// the consumer index kept in the CQ's doorbell record. The receiving process posts its receives
// into the receive ring by plain stores too, polls its CQ from memory and arms it through the
// CQ's register for one completion event. WRITE (inline and gathered), READ, SEND (inline,
// gathered, and both in one WQE), fetch-and-add and compare-and-swap, every byte checked; then
// an error CQE as mlx5 writes it (a bad remote key) and the flush that follows. One SEND carries
// an immediate, which the receive's CQE gives back as the WQE carried it.
//
//   dv_post <store> [device]   store: db | bf8 | bf16 | bf32 | rep | memcpy
//   DV_POST_CQE_SIZE=128: both sides' CQs of 128-byte CQEs (mlx5dv_create_cq), 64 by default
//
// Prints "PASS <store>" and exits 0; exits 77 with the reason when the device is not one mlx5dv
// drives (rxe, siw, emu0 in its own personality): the program is the same on every device.
#define _GNU_SOURCE
#include <endian.h>
#include <immintrin.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dv_peer.h"

enum { kRegion = 65536, kSends = 8, kSendLen = 64, kInlineSendLen = 24, kImmSend = 5 };

// The immediate SEND kImmSend carries: bytes that differ, so that an order swapped shows.
static uint32_t immediate_of(uint32_t send) { return 0xfeed0100u | send; }
enum { kDeadlineSeconds = 60 };
// The CQ's doorbell record: the consumer index, then the arm request (mlx5's order).
enum { kCqSetCi = 0, kCqArmDb = 1 };

struct wire {  // what each side tells the other
  uint32_t qpn;
  uint16_t lid;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
};

static const char* g_store;  // how the register is written: the run's name (g_test)

struct side {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_comp_channel* channel;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  uint8_t* mem;
  struct mlx5dv_qp dq;
  struct mlx5dv_cq dc;
  uint32_t sq_pi;  // send ring position in 64-byte blocks
  uint32_t cq_ci;
  uint32_t bf_offset;
  bool roce;
};

// ---- Setting up: verbs objects, then their mlx5dv form.

static struct ibv_cq* create_cq(struct side* s) {
  const char* size = getenv("DV_POST_CQE_SIZE");
  if (!size || !strcmp(size, "64")) return ibv_create_cq(s->ctx, 64, NULL, s->channel, 0);
  struct ibv_cq_init_attr_ex attr = {.cqe = 64, .channel = s->channel};
  struct mlx5dv_cq_init_attr dv = {.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
                                   .cqe_size = (uint32_t)atoi(size)};
  struct ibv_cq_ex* cq = mlx5dv_create_cq(s->ctx, &attr, &dv);
  return cq ? ibv_cq_ex_to_cq(cq) : NULL;
}

static void open_side(struct side* s, struct ibv_device* dev) {
  memset(s, 0, sizeof *s);
  s->ctx = ibv_open_device(dev);
  if (!s->ctx) die("ibv_open_device");
  struct ibv_port_attr port;
  if (ibv_query_port(s->ctx, 1, &port)) die("ibv_query_port");
  s->roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
  s->pd = ibv_alloc_pd(s->ctx);
  s->channel = ibv_create_comp_channel(s->ctx);
  s->cq = s->pd && s->channel ? create_cq(s) : NULL;
  if (!s->cq) die("pd/channel/cq");
  if (posix_memalign((void**)&s->mem, 4096, kRegion)) die("memory");
  memset(s->mem, 0, kRegion);
  s->mr = ibv_reg_mr(s->pd, s->mem, kRegion,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
  struct ibv_qp_init_attr qa = {.send_cq = s->cq,
                                .recv_cq = s->cq,
                                .cap = {.max_send_wr = 64,
                                        .max_recv_wr = kSends + 1,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1,
                                        .max_inline_data = 64},
                                .qp_type = IBV_QPT_RC};
  s->qp = s->mr ? ibv_create_qp(s->pd, &qa) : NULL;
  if (!s->qp) die("mr/qp");
  struct mlx5dv_obj obj = {.qp = {.in = s->qp, .out = &s->dq}, .cq = {.in = s->cq, .out = &s->dc}};
  int err = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ);
  if (err) die("mlx5dv_init_obj: %s", strerror(err));
  if (s->dq.sq.stride != 64 || (s->dq.sq.wqe_cnt & (s->dq.sq.wqe_cnt - 1)) ||
      s->dq.rq.stride != 16 ||
      s->dc.cqe_size !=
          (uint32_t)(getenv("DV_POST_CQE_SIZE") ? atoi(getenv("DV_POST_CQE_SIZE")) : 64) ||
      (s->dq.bf.size != 0 && s->dq.bf.size != 256))
    die("queues not as mlx5dv describes them: sq stride %u count %u, rq stride %u, cqe %u, bf %u",
        s->dq.sq.stride, s->dq.sq.wqe_cnt, s->dq.rq.stride, s->dc.cqe_size, s->dq.bf.size);
}

static struct wire wire_of(struct side* s) {
  struct wire w = {.qpn = s->qp->qp_num, .addr = (uintptr_t)s->mem, .rkey = s->mr->rkey};
  port_address(s->ctx, &w.lid, w.gid);
  return w;
}

static void connect_qp(struct side* s, const struct wire* peer) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC};
  if (ibv_modify_qp(s->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = peer->lid;
  if (s->roce) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.hop_limit = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
  }
  if (ibv_modify_qp(s->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
}

// ---- The doorbell register, by plain stores of one width.

static void store8(volatile void* dst, const void* src, size_t n) {
  volatile uint64_t* d = dst;
  const uint64_t* s = src;
  for (size_t i = 0; i < n / 8; ++i) d[i] = s[i];
}

static void store16(void* dst, const void* src, size_t n) {
  for (size_t i = 0; i < n; i += 16)
    _mm_store_si128((__m128i*)((char*)dst + i),
                    _mm_loadu_si128((const __m128i*)((const char*)src + i)));
}

__attribute__((target("avx"))) static void store32(void* dst, const void* src, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    _mm256_store_si256((__m256i*)((char*)dst + i),
                       _mm256_loadu_si256((const __m256i*)((const char*)src + i)));
}

static void store_rep(void* dst, const void* src, size_t n) {
  size_t words = n / 8;
  __asm__ volatile("rep movsq" : "+D"(dst), "+S"(src), "+c"(words) : : "memory");
}

// The WQE of nbbs blocks at ring position pos, copied to the BlueFlame register (a WQE that wraps
// the ring is copied from both ends, as drivers do).
static void blueflame(struct side* s, uint32_t pos, uint32_t nbbs, const char* store) {
  uint8_t wqe[256] __attribute__((aligned(64)));
  for (uint32_t i = 0; i < nbbs; ++i)
    memcpy(wqe + 64 * i, (uint8_t*)s->dq.sq.buf + 64 * ((pos + i) & (s->dq.sq.wqe_cnt - 1)), 64);
  uint8_t* reg = (uint8_t*)s->dq.bf.reg + s->bf_offset;
  size_t n = 64 * nbbs;
  if (!strcmp(store, "bf8"))
    store8(reg, wqe, n);
  else if (!strcmp(store, "bf16"))
    store16(reg, wqe, n);
  else if (!strcmp(store, "bf32"))
    store32(reg, wqe, n);
  else if (!strcmp(store, "rep"))
    store_rep(reg, wqe, n);
  else
    memcpy(reg, wqe, n);
}

// Posts the WQE built in wqe (nbbs blocks): into the ring, the doorbell record, then the register.
static uint16_t post_as(struct side* s, const void* wqe, uint32_t nbbs, const char* store) {
  uint16_t index = (uint16_t)s->sq_pi;
  for (uint32_t i = 0; i < nbbs; ++i)
    memcpy((uint8_t*)s->dq.sq.buf + 64 * ((s->sq_pi + i) & (s->dq.sq.wqe_cnt - 1)),
           (const uint8_t*)wqe + 64 * i, 64);
  uint32_t pos = s->sq_pi;
  s->sq_pi += nbbs;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the WQE, then the record
  s->dq.dbrec[MLX5_SND_DBR] = htobe32(s->sq_pi & 0xffff);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the record, then the register
  if (!strcmp(store, "db") || s->dq.bf.size == 0) {
    uint64_t head;
    memcpy(&head, wqe, 8);
    *(volatile uint64_t*)((uint8_t*)s->dq.bf.reg + s->bf_offset) = head;
  } else {
    blueflame(s, pos, nbbs, store);
  }
  _mm_sfence();
  s->bf_offset ^= s->dq.bf.size ? s->dq.bf.size : 0;
  return index;
}

// ---- Completions, from the CQ ring.

static struct mlx5_cqe64* next_cqe(struct side* s) {
  uint8_t* entry = (uint8_t*)s->dc.buf + (size_t)(s->cq_ci & (s->dc.cqe_cnt - 1)) * s->dc.cqe_size;
  struct mlx5_cqe64* cqe = (struct mlx5_cqe64*)(entry + s->dc.cqe_size - 64);
  for (double until = now_s() + kDeadlineSeconds;;) {
    uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
    bool sw_owned = (op_own & 1) == !!(s->cq_ci & s->dc.cqe_cnt);
    if (sw_owned && (op_own >> 4) != MLX5_CQE_INVALID) break;
    if (now_s() > until) die("no completion at CQ index %u in %d s", s->cq_ci, kDeadlineSeconds);
  }
  return cqe;
}

// Requests one completion event (solicited or not) for a CQE at or past the consumer index,
// as libmlx5's ibv_req_notify_cq does: the arm record, then the CQ's 64-bit doorbell. `sn` is
// the arm's sequence number, one more (mod 4) after each event.
static void arm_cq(struct side* s, uint32_t sn) {
  uint32_t arm = (sn & 3) << 28 | MLX5_CQ_DB_REQ_NOT | (s->cq_ci & 0xffffff);
  s->dc.dbrec[kCqArmDb] = htobe32(arm);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint64_t doorbell = (uint64_t)arm << 32 | s->dc.cqn;
  *(volatile uint64_t*)((uint8_t*)s->dc.cq_uar + MLX5_CQ_DOORBELL) = htobe64(doorbell);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

// The channel's next event (a hang guard as next_cqe's: none within the deadline fails).
static void await_cq_event(struct side* s, const char* what) {
  struct pollfd p = {.fd = s->channel->fd, .events = POLLIN};
  if (poll(&p, 1, kDeadlineSeconds * 1000) != 1)
    die("no completion event for %s in %d s", what, kDeadlineSeconds);
  struct ibv_cq* ev_cq;
  void* ev_ctx;
  if (ibv_get_cq_event(s->channel, &ev_cq, &ev_ctx) || ev_cq != s->cq)
    die("no completion event for %s", what);
  ibv_ack_cq_events(s->cq, 1);
}

static void consumed(struct side* s) {
  ++s->cq_ci;
  s->dc.dbrec[kCqSetCi] = htobe32(s->cq_ci & 0xffffff);
}

static void expect_send_cqe(struct side* s, uint16_t index, const char* what) {
  struct mlx5_cqe64* cqe = next_cqe(s);
  uint8_t opcode = mlx5dv_get_cqe_opcode(cqe);
  if (opcode != MLX5_CQE_REQ) {
    struct mlx5_err_cqe* e = (struct mlx5_err_cqe*)cqe;
    die("%s: CQE opcode %u (syndrome 0x%x vendor 0x%x)", what, opcode, e->syndrome,
        e->vendor_err_synd);
  }
  if (be16toh(cqe->wqe_counter) != index)
    die("%s: wqe_counter %u, posted at %u", what, be16toh(cqe->wqe_counter), index);
  if ((be32toh(cqe->sop_drop_qpn) & 0xffffff) != s->qp->qp_num)
    die("%s: CQE names QP 0x%x", what, be32toh(cqe->sop_drop_qpn) & 0xffffff);
  consumed(s);
}

static void expect_error_cqe(struct side* s, uint16_t index, uint8_t syndrome, const char* what) {
  struct mlx5_cqe64* cqe = next_cqe(s);
  struct mlx5_err_cqe* e = (struct mlx5_err_cqe*)cqe;
  if (mlx5dv_get_cqe_opcode(cqe) != MLX5_CQE_REQ_ERR || e->syndrome != syndrome)
    die("%s: CQE opcode %u syndrome 0x%x, expected %u and 0x%x", what, mlx5dv_get_cqe_opcode(cqe),
        e->syndrome, MLX5_CQE_REQ_ERR, syndrome);
  if (be16toh(e->wqe_counter) != index ||
      (be32toh(e->s_wqe_opcode_qpn) & 0xffffff) != s->qp->qp_num)
    die("%s: error CQE names WQE %u of QP 0x%x", what, be16toh(e->wqe_counter),
        be32toh(e->s_wqe_opcode_qpn) & 0xffffff);
  consumed(s);
}

// ---- WQEs, with mlx5dv.h's helpers.

struct wqe {
  uint8_t b[256] __attribute__((aligned(64)));
  uint32_t ds;   // 16-byte units so far
  uint32_t imm;  // the immediate of a SEND_IMM (host order; the WQE carries it big-endian)
};

static void* seg(struct wqe* w, uint32_t units) {
  void* p = w->b + 16 * w->ds;
  w->ds += units;
  return p;
}

static uint32_t finish(struct side* s, struct wqe* w, uint8_t opcode) {
  mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg*)w->b, (uint16_t)s->sq_pi, opcode, 0, s->qp->qp_num,
                      MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)w->ds, 0, htobe32(w->imm));
  return (w->ds * 16 + 63) / 64;
}

static void raddr(struct wqe* w, uint64_t addr, uint32_t rkey) {
  struct mlx5_wqe_raddr_seg* r = seg(w, 1);
  r->raddr = htobe64(addr);
  r->rkey = htobe32(rkey);
  r->reserved = 0;
}

static void gather(struct side* s, struct wqe* w, const void* from, uint32_t len) {
  mlx5dv_set_data_seg(seg(w, 1), len, s->mr->lkey, (uintptr_t)from);
}

static void inline_data(struct wqe* w, const void* data, uint32_t len) {
  struct mlx5_wqe_inl_data_seg* in = (struct mlx5_wqe_inl_data_seg*)(w->b + 16 * w->ds);
  in->byte_count = htobe32(len | MLX5_INLINE_SEG);
  memcpy(in + 1, data, len);
  w->ds += (sizeof *in + len + 15) / 16;
}

static uint16_t post_one(struct side* s, struct wqe* w, uint8_t opcode) {
  return post_as(s, w->b, finish(s, w, opcode), g_store);
}

// ---- Two threads taking turns on one QP (serialised, as a driver's lock makes them): one rings
// the 8-byte doorbell, the other copies by BlueFlame, and each half of the register gets both
// (turns A B B: the halves alternate per post). Legal, so the device must see no torn WQE.

struct turns {
  struct side* s;
  const struct wire* peer;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t next, total;
};

static bool turn_of_b(uint32_t i) { return i % 3 != 0; }

static void* take_turns(void* arg, bool b) {
  struct turns* t = arg;
  const uint8_t text[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (;;) {
    pthread_mutex_lock(&t->mu);
    while (t->next < t->total && turn_of_b(t->next) != b) pthread_cond_wait(&t->cv, &t->mu);
    if (t->next == t->total) {
      pthread_mutex_unlock(&t->mu);
      return NULL;
    }
    struct wqe w = {.ds = 1};
    raddr(&w, t->peer->addr + 12288, t->peer->rkey);
    inline_data(&w, text, sizeof text);
    uint16_t index =
        post_as(t->s, w.b, finish(t->s, &w, MLX5_OPCODE_RDMA_WRITE), b ? "bf16" : "db");
    expect_send_cqe(t->s, index, "a turn");
    ++t->next;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
  }
}
static void* turns_a(void* arg) { return take_turns(arg, false); }
static void* turns_b(void* arg) { return take_turns(arg, true); }

static void two_posters(struct side* s, const struct wire* peer) {
  struct turns t = {.s = s, .peer = peer, .next = 0, .total = 3 * 64};
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  pthread_t a, b;
  if (pthread_create(&a, NULL, turns_a, &t) || pthread_create(&b, NULL, turns_b, &t))
    die("pthread_create");
  pthread_join(a, NULL);
  pthread_join(b, NULL);
}

// ---- The two processes.

// Opens this process's side and connects its QP to the peer's, once each has told the other its
// wire (the target tells first, the requester hears first). Returns the peer's wire.
static struct wire open_connected(struct side* s, struct ibv_device* dev, bool tell_first) {
  open_side(s, dev);
  struct wire me = wire_of(s), peer;
  if (tell_first) tell(&me, sizeof me);
  hear(&peer, sizeof peer);
  if (!tell_first) tell(&me, sizeof me);
  connect_qp(s, &peer);
  return peer;
}

static void run_target(struct ibv_device* dev) {
  struct side s;
  open_connected(&s, dev, true);
  // Receives, by plain stores into the receive ring: one data segment each, at the region's end.
  uint8_t* inbox = s.mem + kRegion - kSends * kSendLen - kSendLen;
  for (uint32_t i = 0; i <= kSends; ++i)
    mlx5dv_set_data_seg((struct mlx5_wqe_data_seg*)((uint8_t*)s.dq.rq.buf + 16 * i), kSendLen,
                        s.mr->lkey, (uintptr_t)(inbox + i * kSendLen));
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  s.dq.dbrec[MLX5_RCV_DBR] = htobe32(kSends);  // the last one waits for the armed CQ below
  uint8_t ready = 1;
  tell(&ready, 1);
  for (uint32_t i = 0; i < kSends; ++i) {
    struct mlx5_cqe64* cqe = next_cqe(&s);
    uint32_t len = i % 2 ? kSendLen : kInlineSendLen;
    uint8_t opcode = i == kImmSend ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND;
    if (mlx5dv_get_cqe_opcode(cqe) != opcode)
      die("receive %u: CQE opcode %u, not %u", i, mlx5dv_get_cqe_opcode(cqe), opcode);
    // The immediate as the WQE carried it (big-endian), where verbs' imm_data reads it.
    if (i == kImmSend && cqe->imm_inval_pkey != htobe32(immediate_of(i)))
      die("receive %u: immediate 0x%x", i, be32toh(cqe->imm_inval_pkey));
    if (be32toh(cqe->byte_cnt) != len) die("receive %u: %u bytes", i, be32toh(cqe->byte_cnt));
    if (be16toh(cqe->wqe_counter) != i)
      die("receive %u: wqe_counter %u", i, be16toh(cqe->wqe_counter));
    for (uint32_t b = 0; b < len; ++b)
      if (inbox[i * kSendLen + b] != pattern(100 + i, b)) die("receive %u byte %u", i, b);
    consumed(&s);
  }
  // Event mode: armed through the CQ's register (the arm record, then the 64-bit doorbell), the
  // next completion comes as an event on the channel.
  arm_cq(&s, 0);
  s.dq.dbrec[MLX5_RCV_DBR] = htobe32(kSends + 1);
  tell(&ready, 1);
  await_cq_event(&s, "the receive after the arm");
  struct mlx5_cqe64* cqe = next_cqe(&s);
  if (mlx5dv_get_cqe_opcode(cqe) != MLX5_CQE_RESP_SEND || be32toh(cqe->byte_cnt) != kSendLen)
    die("the evented receive");
  // Armed again (the next sequence number) at the index of that CQE, still unconsumed: the CQ
  // already holds a completion at or past the armed index, so the event fires at once, as the
  // hardware compares the index it is armed at with what it has written.
  arm_cq(&s, 1);
  await_cq_event(&s, "the arm at an unconsumed CQE");
  consumed(&s);
  uint8_t done;
  hear(&done, 1);  // the requester's WRITEs, READs and atomics are over: check the region
  for (uint32_t b = 0; b < 4096; ++b)
    if (s.mem[8 + b] != pattern(7, b)) die("WRITE byte %u", b);
  for (uint32_t b = 0; b < 40; ++b)
    if (s.mem[8192 + b] != pattern(9, b)) die("inline WRITE byte %u", b);
  uint64_t counter;
  memcpy(&counter, s.mem, 8);
  if (counter != 0x1234567800ull) die("atomics left 0x%llx", (unsigned long long)counter);
  tell(&ready, 1);
  exit(0);
}

// The program's own fault handling beside the registers' trap: a SIGSEGV handler it installs
// after its registers were mapped gets the faults of a guard page it probes, and a program that
// then puts SIGSEGV back to its default action (as UCX's fatal-error path does while other threads
// still post) still has its register stores reach the device.
static sigjmp_buf g_probe;
static volatile sig_atomic_t g_own_faults;
static void own_segv(int sig, siginfo_t* si, void* ctx) {
  (void)sig, (void)si, (void)ctx;
  ++g_own_faults;
  siglongjmp(g_probe, 1);
}

static void write_text(struct side* s, const struct wire* peer, const uint8_t* text,
                       const char* what) {
  struct wqe w = {.ds = 1};
  raddr(&w, peer->addr + 8192, peer->rkey);
  inline_data(&w, text, 40);
  expect_send_cqe(s, post_one(s, &w, MLX5_OPCODE_RDMA_WRITE), what);
}

static void own_handlers(struct side* s, const struct wire* peer, const uint8_t* text) {
  struct sigaction sa = {0}, before;
  sa.sa_sigaction = own_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &before)) die("sigaction");
  volatile uint8_t* guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (guard == MAP_FAILED) die("mmap");
  if (sigsetjmp(g_probe, 1) == 0) guard[0] = 1;
  if (g_own_faults != 1)
    die("the program's SIGSEGV handler got %d faults of its guard page", g_own_faults);
  write_text(s, peer, text, "WRITE under the program's SIGSEGV handler");
  struct sigaction now;
  if (sigaction(SIGSEGV, NULL, &now) || now.sa_sigaction != own_segv)
    die("sigaction reads back another handler than the program set");
  signal(SIGSEGV, SIG_DFL);
  write_text(s, peer, text, "WRITE with SIGSEGV at its default action");
  sigaction(SIGSEGV, &before, NULL);
  munmap((void*)guard, 4096);
}

static void write_laps(struct side* s, const struct wire* peer, const uint8_t* text, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    struct wqe w = {.ds = 1};
    raddr(&w, peer->addr + 8192, peer->rkey);
    inline_data(&w, text, 40);
    expect_send_cqe(s, post_one(s, &w, MLX5_OPCODE_RDMA_WRITE), "WRITE around the ring");
  }
}

static void resize_cq_with_unpolled(struct side* s, const struct wire* peer, const uint8_t* text) {
  uint16_t index[2];
  for (int i = 0; i < 2; ++i) {
    struct wqe w = {.ds = 1};
    raddr(&w, peer->addr + 8192, peer->rkey);
    inline_data(&w, text, 40);
    index[i] = post_one(s, &w, MLX5_OPCODE_RDMA_WRITE);
    next_cqe(s);  // there, not consumed
  }
  const uint32_t before = s->dc.cqe_cnt;
  if (ibv_resize_cq(s->cq, (int)(4 * before - 1))) die("ibv_resize_cq");
  struct mlx5dv_obj obj = {.cq = {.in = s->cq, .out = &s->dc}};
  if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ)) die("mlx5dv_init_obj after the resize");
  if (s->dc.cqe_cnt < 4 * before) die("resized to %u CQEs, asked %u", s->dc.cqe_cnt, 4 * before);
  for (int i = 0; i < 2; ++i) expect_send_cqe(s, index[i], "a WRITE completed before the resize");
}

static void run_requester(struct ibv_device* dev) {
  struct side s;
  struct wire peer = open_connected(&s, dev, false);
  uint8_t ready;
  hear(&ready, 1);
  uint8_t* src = s.mem;
  uint8_t* back = s.mem + 16384;
  uint64_t* fetched = (uint64_t*)(s.mem + 32768);
  // The region's first word for the atomics, then a WRITE of 4 KiB gathered from src.
  struct wqe w = {.ds = 1};
  uint64_t start = 0x1000;
  raddr(&w, peer.addr, peer.rkey);
  inline_data(&w, &start, 8);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_WRITE), "inline WRITE of the counter");
  for (uint32_t b = 0; b < 4096; ++b) src[b] = pattern(7, b);
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr + 8, peer.rkey);
  gather(&s, &w, src, 4096);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_WRITE), "WRITE");
  uint8_t text[40];
  for (uint32_t b = 0; b < sizeof text; ++b) text[b] = pattern(9, b);
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr + 8192, peer.rkey);
  inline_data(&w, text, sizeof text);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_WRITE), "inline WRITE");
  // READ it back.
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr + 8, peer.rkey);
  gather(&s, &w, back, 4096);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_READ), "READ");
  if (memcmp(back, src, 4096) != 0) die("READ brought back other bytes");
  // Fetch-and-add 0x1234566800, then compare-and-swap from 0x1234567800 to itself (succeeds,
  // fetches it); each fetched value lands in the local buffer as the remote word held it.
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr, peer.rkey);
  struct mlx5_wqe_atomic_seg* at = seg(&w, 1);
  at->swap_add = htobe64(0x1234566800ull);
  at->compare = 0;
  gather(&s, &w, &fetched[0], 8);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_ATOMIC_FA), "fetch-and-add");
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr, peer.rkey);
  at = seg(&w, 1);
  at->swap_add = htobe64(0x1234567800ull);
  at->compare = htobe64(0x1234567800ull);
  gather(&s, &w, &fetched[1], 8);
  expect_send_cqe(&s, post_one(&s, &w, MLX5_OPCODE_ATOMIC_CS), "compare-and-swap");
  if (fetched[0] != 0x1000 || fetched[1] != 0x1234567800ull)
    die("atomics fetched 0x%llx, 0x%llx", (unsigned long long)fetched[0],
        (unsigned long long)fetched[1]);
  // SENDs: inline ones and gathered ones by turns, then one more for the armed CQ.
  uint8_t* out = s.mem + 49152;
  for (uint32_t i = 0; i <= kSends; ++i) {
    if (i == kSends) hear(&ready, 1);  // the target armed its CQ
    uint32_t len = i % 2 || i == kSends ? kSendLen : kInlineSendLen;
    for (uint32_t b = 0; b < len; ++b) out[i * kSendLen + b] = pattern(100 + i, b);
    w = (struct wqe){.ds = 1};
    if (len == kInlineSendLen) {
      inline_data(&w, out + i * kSendLen, len);
    } else if (i ==
               kSends - 1) {  // a header inline, the rest by pointer (as UCX's active messages)
      inline_data(&w, out + i * kSendLen, 8);
      gather(&s, &w, out + i * kSendLen + 8, len - 8);
    } else {
      gather(&s, &w, out + i * kSendLen, len);
    }
    w.imm = i == kImmSend ? immediate_of(i) : 0;
    expect_send_cqe(&s, post_one(&s, &w, i == kImmSend ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND),
                    "SEND");
  }
  // Laps of the send ring, so that WQEs wrap its end (by BlueFlame, copied from both ends).
  write_laps(&s, &peer, text, 3 * s.dq.sq.wqe_cnt / 2);
  // The CQ resized with two completions unpolled, then taken again with mlx5dv_init_obj (its ring
  // moved, as code polling from memory must expect): the two are found in the new ring at the
  // consumer index, and laps of the CQ's new ring follow.
  resize_cq_with_unpolled(&s, &peer, text);
  write_laps(&s, &peer, text, 2 * s.dc.cqe_cnt + 3);
  if (s.dq.bf.size) two_posters(&s, &peer);
  own_handlers(&s, &peer, text);
  // Errors as mlx5 reports them: a WRITE with a key the target never gave is a requester error
  // CQE (opcode 13) with the remote access syndrome 0x13 and the WQE's index; the QP is then in
  // error, and the next WQE completes flushed (syndrome 0x05), in order.
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr, peer.rkey ^ 0x5a5a00);
  inline_data(&w, text, 8);
  expect_error_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_WRITE), 0x13, "WRITE with a bad key");
  w = (struct wqe){.ds = 1};
  raddr(&w, peer.addr + 8192, peer.rkey);
  inline_data(&w, text, 8);
  expect_error_cqe(&s, post_one(&s, &w, MLX5_OPCODE_RDMA_WRITE), 0x05, "WRITE after the error");
  uint8_t done = 1;
  tell(&done, 1);
  hear(&ready, 1);
  int status;
  wait(&status);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) die("target failed");
  printf("PASS %s\n", g_store);
}

int main(int argc, char** argv) {
  g_store = g_test = argc > 1 ? argv[1] : "db";
  const char* known[] = {"db", "bf8", "bf16", "bf32", "rep", "memcpy"};
  bool ok = false;
  for (size_t i = 0; i < sizeof known / sizeof *known; ++i) ok |= !strcmp(g_store, known[i]);
  if (!ok) die("usage: dv_post db|bf8|bf16|bf32|rep|memcpy [device]");
  struct ibv_device* dev = pick_device(argc > 2 ? argv[2] : NULL);
  if (is_target("DV_POST_TARGET")) run_target(dev);
  if (!mlx5dv_is_supported(dev)) {
    printf("SKIP %s: %s is not a device mlx5dv drives (mlx5dv_is_supported: no)\n", g_store,
           ibv_get_device_name(dev));
    return 77;
  }
  if (!strcmp(g_store, "bf32") && !__builtin_cpu_supports("avx"))
    die("32-byte stores need AVX, which this CPU does not have");
  start_target(argv, "DV_POST_TARGET");
  run_requester(dev);
  return 0;
}
