// SPDX-License-Identifier: BSD-2-Clause
// UD sends posted by plain stores with both forms of mlx5's address vector, between two
// processes: the extended one (48 bytes, MLX5_EXTENDED_UD_AV in dqp_dct, as libmlx5 writes it)
// and, where the AH's vector from mlx5dv_init_obj leaves that bit clear (the device takes compact
// vectors, as UCX's ud_mlx5 checks), the compact one (its first 16 bytes only, no GRH: IB). The
// target receives through verbs and checks each message's bytes, length and source QP.
//
//   dv_ud [device]
//
// Prints "PASS ud (extended, compact)" (or "PASS ud (extended)" where only that form applies)
// and exits 0; exits 77 with the reason when mlx5dv does not drive the device.
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

enum { kRegion = 16384, kMsgLen = 48, kGrh = 40, kMsgs = 4 };
static const uint32_t kQkey = 0x11111111;

struct ud_wire {
  uint32_t qpn;
  uint16_t lid;
  uint8_t gid[16];
};

// This process's objects and its UD QP, moved to RTS.
static void open_ud(struct node* n, struct ibv_qp** qp, struct ibv_device* dev) {
  open_node(n, dev, kRegion, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr qa = {
      .send_cq = n->cq,
      .recv_cq = n->cq,
      .cap = {.max_send_wr = 16, .max_recv_wr = 2 * kMsgs, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_UD};
  *qp = ibv_create_qp(n->pd, &qa);
  if (!*qp) die("ibv_create_qp");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = kQkey};
  if (ibv_modify_qp(*qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    die("INIT");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
  if (ibv_modify_qp(*qp, &a, IBV_QP_STATE)) die("RTR");
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS};
  if (ibv_modify_qp(*qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) die("RTS");
}

static struct ud_wire wire_of(struct node* n, struct ibv_qp* qp) {
  struct ud_wire w = {.qpn = qp->qp_num};
  port_address(n->ctx, &w.lid, w.gid);
  return w;
}

static void run_target(struct ibv_device* dev) {
  struct node n;
  struct ibv_qp* qp;
  open_ud(&n, &qp, dev);
  for (uint32_t i = 0; i < 2 * kMsgs; ++i) {  // each receive's wr_id is its buffer (GRH first)
    uint8_t* buf = n.mem + i * 128;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = kGrh + kMsgLen, .lkey = n.mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)buf, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv");
  }
  struct ud_wire me = wire_of(&n, qp), peer;
  tell(&me, sizeof me);
  hear(&peer, sizeof peer);
  uint32_t count;
  hear(&count, sizeof count);
  for (uint32_t i = 0; i < count; ++i) {
    struct ibv_wc wc = await_wc(&n, IBV_WC_SUCCESS, "receive");
    if (wc.opcode != IBV_WC_RECV || wc.byte_len != kGrh + kMsgLen || wc.src_qp != peer.qpn)
      die("receive %u: opcode %d, %u bytes from QP 0x%x", i, wc.opcode, wc.byte_len, wc.src_qp);
    const uint8_t* got = (const uint8_t*)(uintptr_t)wc.wr_id + kGrh;
    for (uint32_t b = 0; b < kMsgLen; ++b)
      if (got[b] != pattern(i, b)) die("receive %u: byte %u", i, b);
  }
  tell(&count, sizeof count);
  exit(0);
}

struct sender {
  struct ibv_qp* qp;
  struct mlx5dv_qp dq;
  uint32_t sq_pi;
};

// One SEND: control, the address vector (its first `av_size` bytes), one data segment.
static void post_send(struct node* n, struct sender* s, const struct mlx5_wqe_av* av,
                      size_t av_size, const void* data) {
  uint8_t wqe[128] __attribute__((aligned(64))) = {0};
  memcpy(wqe + 16, av, av_size);
  uint32_t ds = 1 + (uint32_t)(av_size / 16);
  mlx5dv_set_data_seg((struct mlx5_wqe_data_seg*)(wqe + 16 * ds++), kMsgLen, n->mr->lkey,
                      (uintptr_t)data);
  mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg*)wqe, (uint16_t)s->sq_pi, MLX5_OPCODE_SEND, 0,
                      s->qp->qp_num, MLX5_WQE_CTRL_CQ_UPDATE, (uint8_t)ds, 0, 0);
  ring_doorbell(&s->dq, &s->sq_pi, wqe, ds);
  await_wc(n, IBV_WC_SUCCESS, "SEND");
}

static void run_requester(struct ibv_device* dev) {
  struct node n;
  struct sender s = {.sq_pi = 0};
  open_ud(&n, &s.qp, dev);
  struct ud_wire peer, me = wire_of(&n, s.qp);
  hear(&peer, sizeof peer);
  tell(&me, sizeof me);
  struct ibv_ah_attr aa = {.dlid = peer.lid, .port_num = 1, .is_global = n.roce};
  if (n.roce) {
    memcpy(aa.grh.dgid.raw, peer.gid, 16);
    aa.grh.hop_limit = 1;
  }
  struct ibv_ah* ah = ibv_create_ah(n.pd, &aa);
  struct mlx5dv_ah dah = {0};
  struct mlx5dv_obj obj = {.ah = {.in = ah, .out = &dah}, .qp = {.in = s.qp, .out = &s.dq}};
  if (!ah || mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH | MLX5DV_OBJ_QP)) die("AH/QP in mlx5 form");
  // Compact vectors where the device takes them (the AH's vector says so) and no GRH is needed.
  const bool compact = !(be32toh(dah.av->dqp_dct) & MLX5_EXTENDED_UD_AV) && !n.roce;
  struct mlx5_wqe_av av = *dah.av;
  av.key.qkey.qkey = htobe32(kQkey);
  uint32_t count = compact ? 2 * kMsgs : kMsgs;
  tell(&count, sizeof count);
  for (uint32_t i = 0; i < count; ++i) {
    bool extended = i < kMsgs;
    av.dqp_dct = htobe32(peer.qpn | (extended ? MLX5_EXTENDED_UD_AV : 0));
    uint8_t* out = n.mem + 8192 + 64 * i;
    for (uint32_t b = 0; b < kMsgLen; ++b) out[b] = pattern(i, b);
    post_send(&n, &s, &av, extended ? sizeof av : 16, out);
  }
  hear(&count, sizeof count);
  int status;
  wait(&status);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) die("target failed");
  printf("PASS ud (extended%s)\n", compact ? ", compact" : "");
}

int main(int argc, char** argv) {
  g_test = "ud";
  struct ibv_device* dev = pick_device(argc > 1 ? argv[1] : NULL);
  if (is_target("DV_UD_TARGET")) run_target(dev);
  if (!mlx5dv_is_supported(dev)) {
    printf("SKIP ud: %s is not a device mlx5dv drives (mlx5dv_is_supported: no)\n",
           ibv_get_device_name(dev));
    return 77;
  }
  start_target(argv, "DV_UD_TARGET");
  run_requester(dev);
  return 0;
}
