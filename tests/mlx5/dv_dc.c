// SPDX-License-Identifier: BSD-2-Clause
// The dynamically connected transport as code written for ConnectX drives it, from mlx5dv(7) and
// mlx5dv_create_qp(3), between two processes: the target makes a DCT on an SRQ with an access key;
// the requester makes DCIs and posts by plain stores WQEs that each name the DCT in their address
// vector (its number and key), as UCX's dc_mlx5 does. What it shows:
//   - two DCIs, one DCT: SENDs and WRITEs of both, interleaved, all delivered and checked; every
//     receive's completion names the DCT and the DCI that sent it;
//   - a DCI presenting another key reaches nothing: it retries its budget and completes with a
//     retry error (mlx5's syndrome 0x15, IBV_WC_RETRY_EXC_ERR through ibv_poll_cq);
//   - a DCI whose WRITE names a memory key the target never gave gets a remote access error
//     (0x13, IBV_WC_REM_ACCESS_ERR) while the DCT goes on serving: the first DCI's next SEND is
//     delivered.
//
//   dv_dc [device]
//
// Prints "PASS dc" and exits 0; exits 77 with the reason when mlx5dv does not drive the device.
#define _GNU_SOURCE
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dv_peer.h"

enum { kRegion = 65536, kSendLen = 32, kRounds = 4 };
static const int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
static const uint64_t kDcKey = 0x1ee7a330c0ffee01ull;

struct target_wire {  // what the target tells the requester
  uint32_t dctn;
  uint16_t lid;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
};

static struct ibv_qp* create_dc(struct node* n, enum mlx5dv_dc_type type, struct ibv_srq* srq) {
  struct ibv_qp_init_attr_ex attr = {.qp_type = IBV_QPT_DRIVER,
                                     .send_cq = n->cq,
                                     .recv_cq = n->cq,
                                     .srq = srq,
                                     .cap = {.max_send_wr = srq ? 0 : 16, .max_send_sge = 1},
                                     .comp_mask = IBV_QP_INIT_ATTR_PD,
                                     .pd = n->pd};
  struct mlx5dv_qp_init_attr dc = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC,
                                   .dc_init_attr = {.dc_type = type, .dct_access_key = kDcKey}};
  struct ibv_qp* qp = mlx5dv_create_qp(n->ctx, &attr, &dc);
  if (!qp) die("mlx5dv_create_qp of a %s", srq ? "DCT" : "DCI");
  return qp;
}

static void to_init(struct ibv_qp* qp, int access) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (access ? IBV_QP_ACCESS_FLAGS : 0);
  if (ibv_modify_qp(qp, &a, mask)) die("to INIT");
}

// ---- The target: a DCT on an SRQ; receives posted through verbs, completions polled through it.

static void expect_receive(struct node* n, uint32_t dctn, uint32_t from_dci, uint32_t seed) {
  struct ibv_wc wc = await_wc(n, IBV_WC_SUCCESS, "receive");
  if (wc.opcode != IBV_WC_RECV || wc.byte_len != kSendLen)
    die("receive: opcode %d, %u bytes", wc.opcode, wc.byte_len);
  if (wc.qp_num != dctn || wc.src_qp != from_dci)
    die("receive names QP 0x%x from 0x%x, not the DCT 0x%x from DCI 0x%x", wc.qp_num, wc.src_qp,
        dctn, from_dci);
  const uint8_t* got = (const uint8_t*)(uintptr_t)wc.wr_id;
  for (uint32_t b = 0; b < kSendLen; ++b)
    if (got[b] != pattern(seed, b)) die("receive from DCI 0x%x: byte %u", from_dci, b);
}

static void run_target(struct ibv_device* dev) {
  struct node n;
  open_node(&n, dev, kRegion, kAccess);
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4 * kRounds, .max_sge = 1}};
  struct ibv_srq* srq = ibv_create_srq(n.pd, &sa);
  if (!srq) die("ibv_create_srq");
  for (uint32_t i = 0; i < 4 * kRounds; ++i) {  // each receive's wr_id is its buffer
    uint8_t* buf = n.mem + kRegion / 2 + i * kSendLen;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = kSendLen, .lkey = n.mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)buf, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_srq_recv(srq, &wr, &bad)) die("ibv_post_srq_recv");
  }
  struct ibv_qp* dct = create_dc(&n, MLX5DV_DCTYPE_DCT, srq);
  to_init(dct, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  struct target_wire w = {.dctn = dct->qp_num, .addr = (uintptr_t)n.mem, .rkey = n.mr->rkey};
  port_address(n.ctx, &w.lid, w.gid);
  struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = IBV_MTU_1024,
                            .min_rnr_timer = 12,
                            .ah_attr = {.port_num = 1, .dlid = w.lid, .is_global = n.roce}};
  if (ibv_modify_qp(dct, &rtr, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_AV | IBV_QP_PATH_MTU))
    die("DCT to RTR");
  tell(&w, sizeof w);
  uint32_t dcis[2];
  hear(dcis, sizeof dcis);
  for (uint32_t r = 0; r < kRounds; ++r)  // the requester's order: first DCI, then the second
    for (uint32_t d = 0; d < 2; ++d) expect_receive(&n, dct->qp_num, dcis[d], 10 * r + d);
  expect_receive(&n, dct->qp_num, dcis[0], 99);  // after the second DCI's error
  uint8_t done;
  hear(&done, 1);  // the WRITEs completed at the requester: check them
  for (uint32_t r = 0; r < kRounds; ++r)
    for (uint32_t d = 0; d < 2; ++d)
      for (uint32_t b = 0; b < 64; ++b)
        if (n.mem[(2 * r + d) * 64 + b] != pattern(50 + 10 * r + d, b))
          die("WRITE %u of DCI %u: byte %u", r, d, b);
  tell(&done, 1);
  exit(0);
}

// ---- The requester: DCIs, their WQEs built and rung by plain stores.

struct dci {
  struct ibv_qp* qp;
  struct mlx5dv_qp dq;
  uint32_t sq_pi;  // in 64-byte blocks
};

static void open_dci(struct node* n, struct dci* d, uint8_t retry_cnt) {
  d->qp = create_dc(n, MLX5DV_DCTYPE_DCI, NULL);
  d->sq_pi = 0;
  to_init(d->qp, 0);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024};
  if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PATH_MTU)) die("DCI to RTR");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS,
                           .timeout = 8,
                           .retry_cnt = retry_cnt,
                           .rnr_retry = 7,
                           .max_rd_atomic = 1};
  if (ibv_modify_qp(d->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("DCI to RTS");
  struct mlx5dv_obj obj = {.qp = {.in = d->qp, .out = &d->dq}};
  if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP)) die("mlx5dv_init_obj of a DCI");
}

// The address vector every WQE carries: the AH's, as mlx5dv_init_obj gives it, with the DCT's
// number and the DC key in it.
static struct mlx5_wqe_av dc_address(struct node* n, const struct target_wire* t, uint64_t key) {
  struct ibv_ah_attr aa = {.dlid = t->lid, .port_num = 1, .is_global = n->roce};
  if (n->roce) {
    memcpy(aa.grh.dgid.raw, t->gid, 16);
    aa.grh.hop_limit = 1;
  }
  struct ibv_ah* ah = ibv_create_ah(n->pd, &aa);
  struct mlx5dv_ah dah = {0};
  struct mlx5dv_obj obj = {.ah = {.in = ah, .out = &dah}};
  if (!ah || mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH)) die("the DCT's address handle");
  struct mlx5_wqe_av av = *dah.av;
  av.key.dc_key = htobe64(key);
  av.dqp_dct = htobe32(t->dctn | MLX5_EXTENDED_UD_AV);
  return av;
}

// One WQE: control, address vector, then for a WRITE the remote address, then one data segment.
static void post(struct dci* d, struct node* n, const struct mlx5_wqe_av* av, uint8_t opcode,
                 uint64_t raddr, uint32_t rkey, const void* data, uint32_t len) {
  uint8_t wqe[128] __attribute__((aligned(64))) = {0};
  uint32_t ds = 1 + sizeof *av / 16;
  memcpy(wqe + 16, av, sizeof *av);
  if (opcode == MLX5_OPCODE_RDMA_WRITE) {
    struct mlx5_wqe_raddr_seg* r = (struct mlx5_wqe_raddr_seg*)(wqe + 16 * ds++);
    r->raddr = htobe64(raddr);
    r->rkey = htobe32(rkey);
  }
  mlx5dv_set_data_seg((struct mlx5_wqe_data_seg*)(wqe + 16 * ds++), len, n->mr->lkey,
                      (uintptr_t)data);
  mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg*)wqe, (uint16_t)d->sq_pi, opcode, 0, d->qp->qp_num,
                      MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds, 0, 0);
  ring_doorbell(&d->dq, &d->sq_pi, wqe, ds);
}

// The DCI's completion with the status libmlx5 reads from mlx5's syndrome (0x13 remote access,
// 0x15 transport retries exceeded).
static void expect_completion(struct node* n, struct dci* d, enum ibv_wc_status status,
                              const char* what) {
  struct ibv_wc wc = await_wc(n, status, what);
  if (wc.qp_num != d->qp->qp_num)
    die("%s: completion on QP 0x%x, not DCI 0x%x", what, wc.qp_num, d->qp->qp_num);
}

static void send_from(struct node* n, struct dci* d, const struct mlx5_wqe_av* av, uint32_t seed,
                      uint8_t* buf) {
  for (uint32_t b = 0; b < kSendLen; ++b) buf[b] = pattern(seed, b);
  post(d, n, av, MLX5_OPCODE_SEND, 0, 0, buf, kSendLen);
  expect_completion(n, d, IBV_WC_SUCCESS, "SEND");
}

static void run_requester(struct ibv_device* dev) {
  struct node n;
  open_node(&n, dev, kRegion, kAccess);
  struct target_wire t;
  hear(&t, sizeof t);
  struct dci d[3];
  for (int i = 0; i < 2; ++i) open_dci(&n, &d[i], 7);
  open_dci(&n, &d[2], 1);  // the one with the wrong key: a short retry budget
  uint32_t dcis[2] = {d[0].qp->qp_num, d[1].qp->qp_num};
  tell(dcis, sizeof dcis);
  const struct mlx5_wqe_av av = dc_address(&n, &t, kDcKey);
  const struct mlx5_wqe_av wrong = dc_address(&n, &t, kDcKey ^ 1);
  for (uint32_t r = 0; r < kRounds; ++r) {
    for (uint32_t i = 0; i < 2; ++i) {
      send_from(&n, &d[i], &av, 10 * r + i, n.mem + 1024 * (2 * r + i));
      uint8_t* out = n.mem + kRegion / 2 + 64 * (2 * r + i);
      for (uint32_t b = 0; b < 64; ++b) out[b] = pattern(50 + 10 * r + i, b);
      post(&d[i], &n, &av, MLX5_OPCODE_RDMA_WRITE, t.addr + 64 * (2 * r + i), t.rkey, out, 64);
      expect_completion(&n, &d[i], IBV_WC_SUCCESS, "WRITE");
    }
  }
  // Another key: no DCT answers; the retries run out (syndrome 0x15, transport retry exceeded).
  post(&d[2], &n, &wrong, MLX5_OPCODE_SEND, 0, 0, n.mem, kSendLen);
  expect_completion(&n, &d[2], IBV_WC_RETRY_EXC_ERR, "SEND with a wrong DC key");
  // A memory key the target never gave: the second DCI's remote access error (0x13) ...
  post(&d[1], &n, &av, MLX5_OPCODE_RDMA_WRITE, t.addr, t.rkey ^ 0x5a5a00, n.mem, 8);
  expect_completion(&n, &d[1], IBV_WC_REM_ACCESS_ERR, "WRITE with a bad rkey");
  // ... and the DCT still serves the first.
  send_from(&n, &d[0], &av, 99, n.mem + 60000);
  uint8_t done = 1;
  tell(&done, 1);
  hear(&done, 1);
  int status;
  wait(&status);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) die("target failed");
  printf("PASS dc\n");
}

int main(int argc, char** argv) {
  g_test = "dc";
  struct ibv_device* dev = pick_device(argc > 1 ? argv[1] : NULL);
  if (is_target("DV_DC_TARGET")) run_target(dev);
  if (!mlx5dv_is_supported(dev)) {
    printf("SKIP dc: %s is not a device mlx5dv drives (mlx5dv_is_supported: no)\n",
           ibv_get_device_name(dev));
    return 77;
  }
  start_target(argv, "DV_DC_TARGET");
  run_requester(dev);
  return 0;
}
