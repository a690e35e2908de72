// SPDX-License-Identifier: BSD-2-Clause
// bench/cpu/send_stream [ROUNDS]: ns per message of a SEND 8 B stream between two RC QPs of one
// process on emu0 (lists of B = 32, the last signaled; receives re-posted per list): the post /
// engine / poll path's CPU cost without a second core. Built with -DB=1 it is one lone signaled
// SEND round trip per round (the shape of ib_send_lat: BlueFlame rules apply to a lone WQE), which
// bench/cpu_count.sh counts under callgrind. Exits non-zero on any failed completion.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef B
#define B 32
#endif
static struct ibv_qp* mkqp(struct ibv_pd* pd, struct ibv_cq* s, struct ibv_cq* r) {
  struct ibv_qp_init_attr a = {.send_cq = s,
                               .recv_cq = r,
                               .qp_type = IBV_QPT_RC,
                               .cap = {.max_send_wr = 256,
                                       .max_recv_wr = 256,
                                       .max_send_sge = 1,
                                       .max_recv_sge = 1,
                                       .max_inline_data = 64}};
  return ibv_create_qp(pd, &a);
}
static void conn(struct ibv_qp* q, uint32_t dqpn, uint16_t lid) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dqpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  ibv_modify_qp(q, &a,
                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  ibv_modify_qp(q, &a,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}
int main(int argc, char** argv) {
  int n;
  struct ibv_device** l = ibv_get_device_list(&n);
  struct ibv_context* c = ibv_open_device(l[0]);
  struct ibv_pd* pd = ibv_alloc_pd(c);
  static char buf[B * 64];
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_cq* scq = ibv_create_cq(c, 512, 0, 0, 0);
  struct ibv_cq* rcq = ibv_create_cq(c, 512, 0, 0, 0);
  struct ibv_qp* a = mkqp(pd, scq, rcq);
  struct ibv_qp* b = mkqp(pd, scq, rcq);
  struct ibv_port_attr pa;
  ibv_query_port(c, 1, &pa);
  conn(a, b->qp_num, pa.lid);
  conn(b, a->qp_num, pa.lid);
  struct ibv_sge rs[B];
  struct ibv_recv_wr rw[B];
  struct ibv_send_wr sw[B];
  struct ibv_wc wc[B];
  uint64_t v = 0;
  for (int i = 0; i < B; ++i) {
    rs[i] = (struct ibv_sge){(uintptr_t)(buf + i * 64), 64, mr->lkey};
    rw[i] = (struct ibv_recv_wr){
        .wr_id = i, .next = i + 1 < B ? &rw[i + 1] : 0, .sg_list = &rs[i], .num_sge = 1};
    sw[i] =
        (struct ibv_send_wr){.wr_id = i,
                             .next = i + 1 < B ? &sw[i + 1] : 0,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_INLINE | (i == B - 1 ? IBV_SEND_SIGNALED : 0)};
  }
  struct ibv_sge ss = {(uintptr_t)&v, 8, 0};
  for (int i = 0; i < B; ++i) sw[i].sg_list = &ss;
  long rounds = argc > 1 ? atol(argv[1]) : 30000;
  struct timespec t0, t1;
  struct ibv_recv_wr* br;
  struct ibv_send_wr* bs;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long r = 0; r < rounds; ++r) {
    if (ibv_post_recv(b, rw, &br)) return 2;
    if (ibv_post_send(a, sw, &bs)) return 3;
    int got = 0;
    while (got < 1) {
      int k = ibv_poll_cq(scq, 1, wc);
      if (k < 0 || (k && wc[0].status)) return 4;
      got += k;
    }
    got = 0;
    while (got < B) {
      int k = ibv_poll_cq(rcq, B - got, wc);
      if (k < 0 || (k && wc[0].status)) return 5;
      got += k;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (rounds * B));
  return 0;
}
