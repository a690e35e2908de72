// SPDX-License-Identifier: BSD-2-Clause
/* The seed's question one level up, with UCP: threads sending tagged messages through UCX's
 * protocol layer.
 *
 *   ucp-shared-worker [--mode single|multi|per-thread] [--mt-workers-shared 0|1] [--iters N]
 *
 * --mode single: one worker made UCS_THREAD_MODE_SINGLE, used by two threads at once (each sends
 * on the worker's one endpoint and progresses the worker). --mode multi: the same worker made
 * UCS_THREAD_MODE_MULTI (UCP then takes its own lock). --mode per-thread: each thread its own
 * SINGLE worker and endpoint, on one context made with mt_workers_shared as given (0: the
 * context's resources are not guarded for workers used from several threads; 1: they are). The
 * receiver is one more worker in this process, on its own thread. UCX_TLS picks the transports
 * (for the seed: rc_mlx5 with ud_mlx5 for UCP's wire-up, EMU_PERSONALITY=mlx5).
 *
 * Checked: every message arrives exactly once with its bytes (each thread's messages, tag = the
 * thread and its iteration). Under emu-run the device's race log is read as the threads send: the
 * first event ends the run ("RACE ...", exit 3). Exit 0 and "PASS", 1 with "FAIL ...", 2 when UCP
 * cannot be set up. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "seed_common.h"

enum { kThreads = 2, kBytes = 48 };
enum mode { kSingle, kMulti, kPerThread };

static struct {
  enum mode mode;
  int mt_workers_shared;
  unsigned iters;
  ucp_context_h ctx;
  ucp_worker_h rx_worker;
  ucp_address_t* rx_address;
  ucp_worker_h tx_worker[kThreads]; /* the same one twice unless per-thread */
  ucp_ep_h tx_ep[kThreads];
  unsigned char* seen; /* [thread][iteration] */
  atomic_ulong bad;
  atomic_int senders_done;
  struct seed_races races;
} g;

static unsigned char msg_byte(unsigned t, unsigned i, unsigned k) {
  return (unsigned char)(t * 89 + i * 13 + k * 5 + 3);
}

static void race_check(unsigned t, unsigned i) { seed_race_check(&g.races, t, i); }

/* Progresses w until the request completes (NULL: completed at once). */
static ucs_status_t wait_req(ucp_worker_h w, void* req, unsigned t, unsigned i) {
  if (req == NULL) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
    ucp_worker_progress(w);
    race_check(t, i);
  }
  ucp_request_free(req);
  return st;
}

/* ---- the receiver ---- */

/* Every message the senders sent is at the receiver once each sender's flush completed; then a
 * receive still open after progress found nothing twice is one whose message never came. */
static int receive_one(unsigned char* buf, ucp_tag_t* tag) {
  /* Always a request, even for a message already there: UCX 1.13 leaves recv_info unwritten when
   * it completes a receive at once (an unexpected message over rc_verbs), and a tag read from it
   * was the previous receive's. The request's test gives the tag and length. */
  ucp_tag_recv_info_t info;
  ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
  void* req = ucp_tag_recv_nbx(g.rx_worker, buf, kBytes, 0, 0, &p);
  if (req == NULL || UCS_PTR_IS_ERR(req)) {
    fprintf(stderr, "FAIL receive: %s\n",
            req ? ucs_status_string(UCS_PTR_STATUS(req)) : "no request (NO_IMM_CMPL asked)");
    exit(1);
  }
  int idle = 0;
  ucs_status_t st;
  while ((st = ucp_tag_recv_request_test(req, &info)) == UCS_INPROGRESS) {
    if (ucp_worker_progress(g.rx_worker)) {
      idle = 0;
    } else if (atomic_load(&g.senders_done) == kThreads && ++idle > 1) {
      ucp_request_cancel(g.rx_worker, req);
      ucp_request_free(req);
      return 0;
    } else {
      sched_yield();
    }
  }
  ucp_request_free(req);
  if (st != UCS_OK) {
    fprintf(stderr, "FAIL receive: %s\n", ucs_status_string(st));
    exit(1);
  }
  *tag = info.sender_tag;
  return info.length == kBytes ? 1 : -1;
}

static void* receiver(void* arg) {
  (void)arg;
  unsigned long want = (unsigned long)kThreads * g.iters;
  for (unsigned long n = 0; n < want; ++n) {
    unsigned char buf[kBytes];
    ucp_tag_t tag = 0;
    int got = receive_one(buf, &tag);
    if (got == 0) {
      fprintf(stderr, "FAIL %lu messages received of %lu\n", n, want);
      atomic_fetch_add(&g.bad, 1);
      break;
    }
    unsigned t = (unsigned)(tag >> 32), i = (unsigned)tag;
    int ok = got > 0 && t < kThreads && i < g.iters;
    for (unsigned k = 0; ok && k < kBytes; ++k) ok = buf[k] == msg_byte(t, i, k);
    if (!ok || g.seen[t * g.iters + i]++) {
      if (atomic_fetch_add(&g.bad, 1) < 5)
        fprintf(stderr, "FAIL message %s: thread %u iteration %u\n",
                ok ? "delivered twice" : "corrupt", t, i);
    }
  }
  return NULL;
}

/* ---- the senders ---- */

static void* sender(void* arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  ucp_worker_h w = g.tx_worker[t];
  ucp_request_param_t p = {0};
  unsigned char buf[kBytes];
  for (unsigned i = 0; i < g.iters; ++i) {
    for (unsigned k = 0; k < kBytes; ++k) buf[k] = msg_byte(t, i, k);
    void* req = ucp_tag_send_nbx(g.tx_ep[t], buf, kBytes, (ucp_tag_t)t << 32 | i, &p);
    ucs_status_t st = wait_req(w, req, t, i);
    if (st != UCS_OK) {
      fprintf(stderr, "FAIL send by thread %u at iteration %u: %s\n", t, i, ucs_status_string(st));
      exit(1);
    }
    race_check(t, i);
  }
  ucs_status_t st = wait_req(w, ucp_ep_flush_nbx(g.tx_ep[t], &p), t, g.iters);
  if (st != UCS_OK) {
    fprintf(stderr, "FAIL flush by thread %u: %s\n", t, ucs_status_string(st));
    exit(1);
  }
  atomic_fetch_add(&g.senders_done, 1);
  return NULL;
}

/* ---- set-up ---- */

static ucp_worker_h make_worker(ucs_thread_mode_t mode) {
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = mode};
  ucp_worker_h w;
  ucs_status_t st = ucp_worker_create(g.ctx, &wp, &w);
  if (st != UCS_OK) seed_fail_setup("ucp_worker_create", st);
  ucp_worker_attr_t attr = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
  st = ucp_worker_query(w, &attr);
  if (st != UCS_OK) seed_fail_setup("ucp_worker_query", st);
  if (attr.thread_mode != mode) {
    fprintf(stderr, "SETUP the worker runs in thread mode %d, not %d\n", attr.thread_mode, mode);
    exit(2);
  }
  return w;
}

static ucp_ep_h connect_to_receiver(ucp_worker_h w) {
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = g.rx_address};
  ucp_ep_h h;
  ucs_status_t st = ucp_ep_create(w, &ep, &h);
  if (st != UCS_OK) seed_fail_setup("ucp_ep_create", st);
  return h;
}

static void set_up(void) {
  ucp_config_t* cfg;
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st != UCS_OK) seed_fail_setup("ucp_config_read", st);
  ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                    .features = UCP_FEATURE_TAG,
                    .mt_workers_shared = g.mt_workers_shared};
  st = ucp_init(&p, cfg, &g.ctx);
  ucp_config_release(cfg);
  if (st != UCS_OK) seed_fail_setup("ucp_init", st);
  g.rx_worker = make_worker(UCS_THREAD_MODE_SINGLE);
  size_t len;
  st = ucp_worker_get_address(g.rx_worker, &g.rx_address, &len);
  if (st != UCS_OK) seed_fail_setup("ucp_worker_get_address", st);
  for (unsigned t = 0; t < kThreads; ++t) {
    if (t == 0 || g.mode == kPerThread)
      g.tx_worker[t] =
          make_worker(g.mode == kMulti ? UCS_THREAD_MODE_MULTI : UCS_THREAD_MODE_SINGLE);
    else
      g.tx_worker[t] = g.tx_worker[0];
    g.tx_ep[t] = t == 0 || g.mode == kPerThread ? connect_to_receiver(g.tx_worker[t]) : g.tx_ep[0];
  }
}

static void parse(int argc, char** argv) {
  g.mode = kSingle;
  g.iters = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mode")) {
      const char* m = argv[i + 1];
      g.mode = !strcmp(m, "multi") ? kMulti : !strcmp(m, "per-thread") ? kPerThread : kSingle;
    } else if (!strcmp(argv[i], "--mt-workers-shared")) {
      g.mt_workers_shared = atoi(argv[i + 1]);
    } else if (!strcmp(argv[i], "--iters")) {
      g.iters = (unsigned)strtoul(argv[i + 1], NULL, 0);
    } else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      exit(2);
    }
  }
}

int main(int argc, char** argv) {
  parse(argc, argv);
  g.seen = calloc((size_t)kThreads * g.iters, 1);
  set_up();
  static const char* names[] = {"one SINGLE worker shared", "one MULTI worker shared",
                                "a SINGLE worker each"};
  printf("ucp-shared-worker: %s by %d threads, mt_workers_shared=%d, %u messages each\n",
         names[g.mode], kThreads, g.mt_workers_shared, g.iters);
  fflush(stdout);
  seed_races_start(&g.races);
  pthread_t rx, tx[kThreads];
  pthread_create(&rx, NULL, receiver, NULL);
  for (unsigned t = 0; t < kThreads; ++t) pthread_create(&tx[t], NULL, sender, (void*)(uintptr_t)t);
  for (unsigned t = 0; t < kThreads; ++t) pthread_join(tx[t], NULL);
  pthread_join(rx, NULL);
  race_check(kThreads, g.iters);
  if (atomic_load(&g.bad)) return 1;
  printf("PASS %lu messages checked, each once, no race recorded\n",
         (unsigned long)kThreads * g.iters);
  return 0;
}
