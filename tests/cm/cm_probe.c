// SPDX-License-Identifier: BSD-2-Clause
/* A librdmacm program for what rdmacm-utils never do on purpose: reject with private data, an
 * address in use, a connection without QPs through disconnect and time-wait, and the event channel
 * driven the ways programs do besides blocking reads.
 *   cm_probe server ADDR PORT: listens (a second bind of the address is EADDRINUSE); an epoll set
 *     waits on its channel; the first request moves to a second channel (rdma_migrate_id) and is
 *     rejected there with private data "no thanks"; the second is accepted without a QP, and the
 *     id sees ESTABLISHED, DISCONNECTED and TIMEWAIT_EXIT.
 *   cm_probe client ADDR PORT: connects with private data "hello" on a non-blocking channel
 *     (poll(), then rdma_get_cm_event until EAGAIN stops) and prints what the REJECTED event says;
 *     then connects again, checks the QP attributes rdma_init_qp_attr gives for RTR and RTS,
 *     completes with rdma_establish, disconnects and waits for time-wait.
 *   cm_probe fail ADDR PORT: what rping -c does up to the first event that is not the one hoped
 *     for (address and route resolved, a QP made on the id, connect), on one thread, and prints it:
 *     the error paths (an address nobody has, nobody listening, a listener that never answers or
 *     dies) without rping, whose CM thread calls exit() while its main thread returns, which a
 *     sanitizer runtime's exit handlers do not survive (docs/design/verbs-provider.md, "Exit").
 * Then the
 *     QP, the id and the channel go.
 * Exit status 0 when every step gave what the kernel's CM gives. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define CHECK(cond, what)                                               \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "cm_probe: %s failed (errno %d)\n", what, errno); \
      return 1;                                                         \
    }                                                                   \
  } while (0)

static struct rdma_cm_event* next_event(struct rdma_event_channel* ch, int nonblock) {
  struct rdma_cm_event* ev;
  for (;;) {
    if (rdma_get_cm_event(ch, &ev) == 0) return ev;
    if (!nonblock || errno != EAGAIN) return NULL;
    struct pollfd p = {ch->fd, POLLIN, 0};
    if (poll(&p, 1, 30000) != 1) return NULL;
  }
}

static int expect(struct rdma_event_channel* ch, enum rdma_cm_event_type type, int nonblock,
                  struct rdma_cm_event** out) {
  struct rdma_cm_event* ev = next_event(ch, nonblock);
  if (!ev) return 0;
  printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
  if (out && ev->event == type) {
    *out = ev;
    return 1;
  }
  int ok = ev->event == type;
  rdma_ack_cm_event(ev);
  return ok;
}

static int server(struct sockaddr_in* sin) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_event_channel* ch2 = rdma_create_event_channel();
  struct rdma_cm_id* listen_id;
  CHECK(ch && ch2, "rdma_create_event_channel");
  CHECK(rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_bind_addr(listen_id, (struct sockaddr*)sin) == 0, "rdma_bind_addr");
  CHECK(rdma_listen(listen_id, 4) == 0, "rdma_listen");
  struct rdma_cm_id* dup;
  CHECK(rdma_create_id(ch, &dup, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_bind_addr(dup, (struct sockaddr*)sin) != 0 && errno == EADDRINUSE, "EADDRINUSE");
  CHECK(rdma_destroy_id(dup) == 0, "rdma_destroy_id dup");
  int ep = epoll_create1(0);
  struct epoll_event e = {.events = EPOLLIN};
  CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &e) == 0, "epoll_ctl");
  CHECK(epoll_wait(ep, &e, 1, 30000) == 1, "epoll_wait");
  struct rdma_cm_event* req;
  CHECK(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &req), "CONNECT_REQUEST");
  printf("request private data: %.5s\n", (const char*)req->param.conn.private_data);
  struct rdma_cm_id* id = req->id;
  rdma_ack_cm_event(req);
  CHECK(rdma_migrate_id(id, ch2) == 0, "rdma_migrate_id");
  CHECK(id->channel == ch2, "migrated channel");
  CHECK(rdma_reject(id, "no thanks", 10) == 0, "rdma_reject");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  CHECK(expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &req), "second CONNECT_REQUEST");
  id = req->id;
  rdma_ack_cm_event(req);
  struct rdma_conn_param accept = {
      .qp_num = 0x123, .responder_resources = 1, .initiator_depth = 1, .rnr_retry_count = 7};
  CHECK(rdma_accept(id, &accept) == 0, "rdma_accept");
  CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, 0, NULL), "ESTABLISHED");
  CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, 0, NULL), "DISCONNECTED");
  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect after DISCONNECTED");
  CHECK(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL), "TIMEWAIT_EXIT");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  CHECK(rdma_destroy_id(listen_id) == 0, "rdma_destroy_id listen");
  rdma_destroy_event_channel(ch2);
  rdma_destroy_event_channel(ch);
  printf("server done\n");
  return 0;
}

static int client(struct sockaddr_in* sin) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id;
  CHECK(ch, "rdma_create_event_channel");
  CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
  struct rdma_cm_event* ev;
  CHECK(rdma_get_cm_event(ch, &ev) != 0 && errno == EAGAIN, "EAGAIN on an empty channel");
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)sin, 2000) == 0, "rdma_resolve_addr");
  CHECK(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1, NULL), "ADDR_RESOLVED");
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
  CHECK(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 1, NULL), "ROUTE_RESOLVED");
  struct rdma_conn_param param = {.private_data = "hello",
                                  .private_data_len = 6,
                                  .responder_resources = 1,
                                  .initiator_depth = 1,
                                  .retry_count = 7,
                                  .rnr_retry_count = 7};
  CHECK(rdma_connect(id, &param) == 0, "rdma_connect");
  CHECK(expect(ch, RDMA_CM_EVENT_REJECTED, 1, &ev), "REJECTED");
  printf("rejected: status %d private data %.9s len %d\n", ev->status,
         (const char*)ev->param.conn.private_data, ev->param.conn.private_data_len);
  rdma_ack_cm_event(ev);
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");

  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_disconnect(id) != 0 && errno == EINVAL, "EINVAL disconnecting an idle id");
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)sin, 2000) == 0, "rdma_resolve_addr");
  CHECK(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1, NULL), "ADDR_RESOLVED");
  CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
  CHECK(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 1, NULL), "ROUTE_RESOLVED");
  param.qp_num = 0x456;
  param.private_data = NULL;
  param.private_data_len = 0;
  CHECK(rdma_connect(id, &param) == 0, "rdma_connect");
  CHECK(expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, 1, &ev), "CONNECT_RESPONSE");
  printf("reply: qp_num 0x%x\n", ev->param.conn.qp_num);
  rdma_ack_cm_event(ev);
  /* The attributes the kernel's CM gives for RTR and RTS: min_rnr_timer 0 (655 ms between RNR
   * retries), and each side retries RNR as long as its peer asked (the server's 7). */
  struct ibv_qp_attr qa;
  int mask;
  qa.qp_state = IBV_QPS_RTR;
  CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0, "rdma_init_qp_attr RTR");
  CHECK((mask & IBV_QP_MIN_RNR_TIMER) && qa.min_rnr_timer == 0, "min_rnr_timer 0 at RTR");
  printf("rtr min_rnr_timer %u\n", qa.min_rnr_timer);
  qa.qp_state = IBV_QPS_RTS;
  CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0, "rdma_init_qp_attr RTS");
  CHECK((mask & IBV_QP_RNR_RETRY) && qa.rnr_retry == 7, "rnr_retry 7 at RTS");
  printf("rts rnr_retry %u\n", qa.rnr_retry);
  CHECK(rdma_establish(id) == 0, "rdma_establish");
  CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");
  CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, 1, NULL), "DISCONNECTED");
  CHECK(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, 1, NULL), "TIMEWAIT_EXIT");
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  rdma_destroy_event_channel(ch);
  printf("client done\n");
  return 0;
}

/* The next event, printed; 1 if it is `hoped` (the caller goes on), 0 if it is another (printed
 * as the outcome), -1 if none came. */
static int step(struct rdma_event_channel* ch, enum rdma_cm_event_type hoped) {
  struct rdma_cm_event* ev = next_event(ch, 0);
  if (!ev) return -1;
  printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
  int got = ev->event == hoped;
  rdma_ack_cm_event(ev);
  return got;
}

static int failing_client(struct sockaddr_in* sin) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id;
  CHECK(ch, "rdma_create_event_channel");
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr*)sin, 2000) == 0, "rdma_resolve_addr");
  int got = step(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  int made_qp = 0;
  if (got == 1) {
    CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
    got = step(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
  }
  if (got == 1) {
    struct ibv_qp_init_attr qa = {
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC};
    CHECK(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp");
    made_qp = 1;
    struct rdma_conn_param param = {
        .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
    CHECK(rdma_connect(id, &param) == 0, "rdma_connect");
    got = step(ch, RDMA_CM_EVENT_ESTABLISHED);
  }
  CHECK(got == 0, "an error event");
  if (made_qp) rdma_destroy_qp(id);
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id");
  rdma_destroy_event_channel(ch);
  printf("probe done\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: cm_probe server|client|fail ADDR PORT\n");
    return 2;
  }
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
  if (inet_pton(AF_INET, argv[2], &sin.sin_addr) != 1) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(argv[1], "fail") == 0) return failing_client(&sin);
  return strcmp(argv[1], "server") == 0 ? server(&sin) : client(&sin);
}
