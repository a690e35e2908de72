// SPDX-License-Identifier: BSD-2-Clause
/* UCP's client-server connection (ucp_listener_create / ucp_ep_create with a socket address)
 * through a connection manager, and checked data both ways over the endpoint it made:
 *
 *   ucp_sockaddr server IP PORT      listens on IP:PORT, answers one client
 *   ucp_sockaddr client IP PORT      connects, sends, checks the replies
 *
 * Each side prints its endpoint's configuration (ucp_ep_print_info: the lanes, the CM lane among
 * them) and "PASS" at the end. UCX_SOCKADDR_TLS_PRIORITY picks the connection manager (rdmacm:
 * the RDMA CM of the emulated device). Messages of 8 B, 64 KiB and 1 MiB go each way through UCP's
 * eager and rendezvous protocols; every byte is checked against a pattern of direction, size and
 * offset. Exit 0 on success, 1 with a message otherwise. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

static const size_t kSizes[] = {8, 64 * 1024, 1024 * 1024};
enum { kNumSizes = sizeof kSizes / sizeof kSizes[0], kTagToServer = 1, kTagToClient = 2 };

static unsigned char pattern(int dir, size_t size, size_t i) {
  return (unsigned char)(i * 7 + size + dir * 31);
}

static int die(const char *what, ucs_status_t st) {
  fprintf(stderr, "FAIL %s: %s\n", what, ucs_status_string(st));
  exit(1);
}

/* Progress until the request is done (NULL: done at once). */
static ucs_status_t wait_req(ucp_worker_h w, void *req) {
  ucs_status_t st;
  if (req == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(w);
  ucp_request_free(req);
  return st;
}

static void send_all(ucp_worker_h w, ucp_ep_h ep, int dir, ucp_tag_t tag) {
  ucp_request_param_t p = {0};
  for (int k = 0; k < kNumSizes; ++k) {
    unsigned char *b = malloc(kSizes[k]);
    for (size_t i = 0; i < kSizes[k]; ++i) b[i] = pattern(dir, kSizes[k], i);
    ucs_status_t st = wait_req(w, ucp_tag_send_nbx(ep, b, kSizes[k], tag, &p));
    if (st != UCS_OK) die("send", st);
    free(b);
  }
}

static void recv_all(ucp_worker_h w, int dir, ucp_tag_t tag) {
  ucp_request_param_t p = {0};
  for (int k = 0; k < kNumSizes; ++k) {
    unsigned char *b = calloc(1, kSizes[k]);
    ucs_status_t st = wait_req(w, ucp_tag_recv_nbx(w, b, kSizes[k], tag, (ucp_tag_t)-1, &p));
    if (st != UCS_OK) die("receive", st);
    for (size_t i = 0; i < kSizes[k]; ++i) {
      if (b[i] != pattern(dir, kSizes[k], i)) {
        fprintf(stderr, "FAIL data: message of %zu bytes differs at %zu\n", kSizes[k], i);
        exit(1);
      }
    }
    free(b);
  }
}

static void on_conn(ucp_conn_request_h req, void *arg) { *(ucp_conn_request_h *)arg = req; }

/* The client's end: the server's disconnect after the exchange. */
static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t st) {
  (void)ep, (void)st;
  *(int *)arg = 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s server|client IP PORT\n", argv[0]);
    return 2;
  }
  int server = strcmp(argv[1], "server") == 0;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
  if (inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) return 2;

  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
  ucp_context_h ctx;
  ucp_worker_h w;
  ucs_status_t st = ucp_init(&params, NULL, &ctx);
  if (st != UCS_OK) die("ucp_init", st);
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  if ((st = ucp_worker_create(ctx, &wp, &w)) != UCS_OK) die("ucp_worker_create", st);

  ucp_ep_h ep;
  ucp_listener_h listener = NULL;
  ucp_ep_params_t ep_params = {0};
  if (server) {
    ucp_conn_request_h conn = NULL;
    ucp_listener_params_t lp = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (struct sockaddr *)&sa, .addrlen = sizeof sa},
        .conn_handler = {.cb = on_conn, .arg = &conn}};
    if ((st = ucp_listener_create(w, &lp, &listener)) != UCS_OK) die("ucp_listener_create", st);
    printf("listening on %s:%s\n", argv[2], argv[3]);
    fflush(stdout);
    while (conn == NULL) ucp_worker_progress(w);
    ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep_params.conn_request = conn;
  } else {
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = (struct sockaddr *)&sa;
    ep_params.sockaddr.addrlen = sizeof sa;
  }
  ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  int peer_gone = 0;
  ep_params.err_handler.cb = on_ep_error;
  ep_params.err_handler.arg = &peer_gone;
  if ((st = ucp_ep_create(w, &ep_params, &ep)) != UCS_OK) die("ucp_ep_create", st);

  ucp_request_param_t p = {0};
  char bye = 'b';
  if (server) {
    recv_all(w, 0, kTagToServer);
    send_all(w, ep, 1, kTagToClient);
  } else {
    send_all(w, ep, 0, kTagToServer);
    recv_all(w, 1, kTagToClient);
  }
  ucp_ep_print_info(ep, stdout);
  /* An ordered end: the client says bye once it has everything, the server then flushes and
   * disconnects, and the client, told so by its error handler, closes its side without a flush. */
  ucp_request_param_t cp = {0};
  if (server) {
    if ((st = wait_req(w, ucp_tag_recv_nbx(w, &bye, 1, kTagToServer, (ucp_tag_t)-1, &p))) != UCS_OK)
      die("receive bye", st);
  } else {
    if ((st = wait_req(w, ucp_tag_send_nbx(ep, &bye, 1, kTagToServer, &p))) != UCS_OK)
      die("send bye", st);
    while (!peer_gone) ucp_worker_progress(w);
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  st = wait_req(w, ucp_ep_close_nbx(ep, &cp));
  if (st != UCS_OK && !(st == UCS_ERR_CONNECTION_RESET && !server)) die("ucp_ep_close_nbx", st);
  if (listener) ucp_listener_destroy(listener);
  ucp_worker_destroy(w);
  ucp_cleanup(ctx);
  printf("PASS %s\n", argv[1]);
  return 0;
}
