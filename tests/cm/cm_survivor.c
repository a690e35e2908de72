// SPDX-License-Identifier: BSD-2-Clause
/* The passive side of a connection whose peer dies while its engine delivers the peer's first
 * SEND here (the test runs rping -c with EMU_KILL_AT at recv_cqe_slot, recv_cqe or event_raise):
 * what a survivor sees, on one thread, so that the order of what it sees is the emulator's and
 * not a race of the program's threads (rping's server has two).
 *   cm_survivor ADDR PORT: accepts one connection on a QP whose CQ has a completion channel and
 *     is armed, with four receives posted; waits (blocking) for ESTABLISHED and DISCONNECTED;
 *     then prints whether a completion event was already waiting (read without blocking), what
 *     the CQ held (received, flushed), and what it held after rdma_disconnect (the QP in ERR).
 * On hardware the NIC placed the message and raised its event long before the dead process's
 * DREQ came: "completion event at the disconnect: yes", and the receive completed once (or,
 * when the dead had not written its CQE, flushed once), the three others flushed at ERR.
 * Exit status 0 when every call worked (the test checks what was printed). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, what)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "cm_survivor: %s failed (errno %d)\n", what, errno); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

enum { kRecvs = 4, kRecvBytes = 64 };

static int expect(struct rdma_event_channel* ch, enum rdma_cm_event_type type,
                  struct rdma_cm_event** out) {
  struct rdma_cm_event* ev;
  if (rdma_get_cm_event(ch, &ev) != 0) return 0;
  printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
  int ok = ev->event == type;
  if (ok && out)
    *out = ev;
  else
    rdma_ack_cm_event(ev);
  return ok;
}

// Drains the CQ: counts successful receives and flushed completions, prints anything else.
static void drain(struct ibv_cq* cq, int* received, int* flushed) {
  struct ibv_wc wc;
  *received = *flushed = 0;
  while (ibv_poll_cq(cq, 1, &wc) == 1) {
    if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV)
      ++*received;
    else if (wc.status == IBV_WC_WR_FLUSH_ERR)
      ++*flushed;
    else
      printf("unexpected completion: wr_id %llu status %s opcode %d\n",
             (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode);
  }
}

static int post_receives(struct ibv_qp* qp, struct ibv_mr* mr, char (*bufs)[kRecvBytes]) {
  for (int i = 0; i < kRecvs; ++i) {
    struct ibv_sge sge = {(uintptr_t)bufs[i], kRecvBytes, mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad) != 0) return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cm_survivor ADDR PORT\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
  if (inet_pton(AF_INET, argv[1], &sin.sin_addr) != 1) return 2;
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* listen_id;
  CHECK(ch, "rdma_create_event_channel");
  CHECK(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_bind_addr(listen_id, (struct sockaddr*)&sin) == 0, "rdma_bind_addr");
  CHECK(rdma_listen(listen_id, 1) == 0, "rdma_listen");
  struct rdma_cm_event* req;
  CHECK(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req), "CONNECT_REQUEST");
  struct rdma_cm_id* id = req->id;
  rdma_ack_cm_event(req);

  struct ibv_comp_channel* cc = ibv_create_comp_channel(id->verbs);
  CHECK(cc, "ibv_create_comp_channel");
  struct ibv_cq* cq = ibv_create_cq(id->verbs, 16, NULL, cc, 0);
  struct ibv_pd* pd = ibv_alloc_pd(id->verbs);
  static char bufs[kRecvs][kRecvBytes];
  struct ibv_mr* mr = pd ? ibv_reg_mr(pd, bufs, sizeof bufs, IBV_ACCESS_LOCAL_WRITE) : NULL;
  CHECK(cq && mr, "ibv_create_cq, ibv_alloc_pd, ibv_reg_mr");
  struct ibv_qp_init_attr qa = {
      .send_cq = cq,
      .recv_cq = cq,
      .cap = {.max_send_wr = 4, .max_recv_wr = kRecvs, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC};
  CHECK(rdma_create_qp(id, pd, &qa) == 0, "rdma_create_qp");
  CHECK(post_receives(id->qp, mr, bufs), "ibv_post_recv");
  CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
  struct rdma_conn_param accept = {
      .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7};
  CHECK(rdma_accept(id, &accept) == 0, "rdma_accept");
  CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL), "ESTABLISHED");
  CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL), "DISCONNECTED");

  // What the peer's death left, as the disconnect finds it.
  CHECK(fcntl(cc->fd, F_SETFL, fcntl(cc->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
  struct ibv_cq* ev_cq;
  void* ev_ctx;
  int waiting = ibv_get_cq_event(cc, &ev_cq, &ev_ctx) == 0;
  printf("completion event at the disconnect: %s\n", waiting ? "yes" : "no");
  if (waiting) ibv_ack_cq_events(cq, 1);
  int received, flushed;
  drain(cq, &received, &flushed);
  printf("at the disconnect: %d received, %d flushed\n", received, flushed);
  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");  // the QP to ERR (IB and RoCE)
  drain(cq, &received, &flushed);
  printf("after rdma_disconnect: %d received, %d flushed\n", received, flushed);

  rdma_destroy_qp(id);
  CHECK(ibv_dereg_mr(mr) == 0 && ibv_destroy_cq(cq) == 0, "ibv_dereg_mr, ibv_destroy_cq");
  CHECK(ibv_dealloc_pd(pd) == 0 && ibv_destroy_comp_channel(cc) == 0,
        "ibv_dealloc_pd, ibv_destroy_comp_channel");
  CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(listen_id) == 0, "rdma_destroy_id");
  rdma_destroy_event_channel(ch);
  printf("survivor done\n");
  return 0;
}
