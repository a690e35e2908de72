// SPDX-License-Identifier: BSD-2-Clause
// What the two-process mlx5dv programs (dv_post.c, dv_dc.c, dv_ud.c) share: the socket to the
// other process, the line a failure prints (which test, which side), a clock for hang guards, the
// byte pattern every payload carries, starting the other side as this same program, and for the
// programs polling through verbs a process's objects, its port's address, a WQE rung by the
// 8-byte doorbell and a completion awaited.
#pragma once
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char* g_test;                // the run's name: first word of a FAIL line
static const char* g_role = "requester";  // or "target"
static int g_peer_fd = -1;                // the socket to the other process

__attribute__((noreturn, format(printf, 1, 2))) static inline void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL %s (%s): ", g_test, g_role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static inline void tell(const void* p, size_t n) {
  if (write(g_peer_fd, p, n) != (ssize_t)n) die("write to peer");
}

static inline void hear(void* p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(g_peer_fd, (char*)p + got, n - got);
    if (r <= 0) die("peer went away");
    got += (size_t)r;
  }
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static inline uint8_t pattern(uint32_t seed, uint32_t i) {
  return (uint8_t)(seed * 31 + i * 7 + 3);
}

static inline struct ibv_device* pick_device(const char* name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) return list[i];
  die("no device %s", name ? name : "at all");
}

// Runs this program again as the target, its socket's number in the environment variable `env`
// (the target finds it there: target_fd); this process keeps the other end as the requester.
static inline void start_target(char** argv, const char* env) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair");
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    setenv(env, fd, 1);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  if (pid < 0) die("fork");
  close(sv[1]);  // the target's end: its exit is then the end of this one's stream
  g_peer_fd = sv[0];
}

// In the target: true, with g_peer_fd set, when start_target started this process.
static inline int is_target(const char* env) {
  if (!getenv(env)) return 0;
  g_peer_fd = atoi(getenv(env));
  g_role = "target";
  return 1;
}

// ---- One process's verbs objects, completions polled through verbs.

enum { kPeerDeadlineSeconds = 60 };

struct node {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  uint8_t* mem;  // `region` bytes, registered with `access`
  bool roce;
};

static inline void open_node(struct node* n, struct ibv_device* dev, size_t region, int access) {
  memset(n, 0, sizeof *n);
  n->ctx = ibv_open_device(dev);
  struct ibv_port_attr port;
  if (!n->ctx || ibv_query_port(n->ctx, 1, &port)) die("ibv_open_device/ibv_query_port");
  n->roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
  n->pd = ibv_alloc_pd(n->ctx);
  n->cq = n->pd ? ibv_create_cq(n->ctx, 64, NULL, NULL, 0) : NULL;
  if (!n->cq || posix_memalign((void**)&n->mem, 4096, region)) die("pd/cq/memory");
  memset(n->mem, 0, region);
  n->mr = ibv_reg_mr(n->pd, n->mem, region, access);
  if (!n->mr) die("ibv_reg_mr");
}

// Port 1's LID and GID 0: what the other side addresses this one by.
static inline void port_address(struct ibv_context* ctx, uint16_t* lid, uint8_t gid[16]) {
  struct ibv_port_attr port;
  union ibv_gid g;
  if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &g)) die("port/gid");
  *lid = port.lid;
  memcpy(gid, g.raw, 16);
}

// The next completion of n's CQ, which must have `status`.
static inline struct ibv_wc await_wc(struct node* n, enum ibv_wc_status status, const char* what) {
  struct ibv_wc wc;
  for (double until = now_s() + kPeerDeadlineSeconds; ibv_poll_cq(n->cq, 1, &wc) == 0;)
    if (now_s() > until) die("%s: no completion in %d s", what, kPeerDeadlineSeconds);
  if (wc.status != status)
    die("%s: %s, expected %s", what, ibv_wc_status_str(wc.status), ibv_wc_status_str(status));
  return wc;
}

// A built WQE of `ds` 16-byte units (its control segment's counter at *sq_pi) copied into the
// send ring, the ring's record stored, then the 8-byte doorbell rung, each store after the last.
static inline void ring_doorbell(struct mlx5dv_qp* dq, uint32_t* sq_pi, const uint8_t* wqe,
                                 uint32_t ds) {
  uint32_t blocks = (ds * 16 + 63) / 64;
  for (uint32_t b = 0; b < blocks; ++b)
    memcpy((uint8_t*)dq->sq.buf + 64 * ((*sq_pi + b) & (dq->sq.wqe_cnt - 1)), wqe + 64 * b, 64);
  *sq_pi += blocks;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the WQE, then the record
  dq->dbrec[MLX5_SND_DBR] = htobe32(*sq_pi & 0xffff);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the record, then the doorbell
  uint64_t head;
  memcpy(&head, wqe, 8);
  *(volatile uint64_t*)dq->bf.reg = head;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
