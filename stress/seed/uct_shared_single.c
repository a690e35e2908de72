// SPDX-License-Identifier: BSD-2-Clause
/* The seed's question, asked with UCX's own code: one UCT interface and endpoint shared by two
 * threads, each posting uct_ep_put_short and uct_ep_am_short on it.
 *
 *   uct-shared-single [--tl rc_mlx5|rc_verbs] [--dev emu0:1] [--mode single|serialized]
 *                     [--iters N]
 *
 * --mode single: the sending worker is made UCS_THREAD_MODE_SINGLE and both threads call into it
 * with no lock (the seed's case). --mode serialized: made UCS_THREAD_MODE_SERIALIZED, every call
 * under the program's own mutex (UCX's recommendation). The receiving interface is a second one
 * in the same process, on its own worker and thread.
 *
 * Checked: every active message arrives exactly once with its payload, and each thread's last
 * put is what its slot of the target buffer holds after a flush. Under emu-run the device's race
 * log is read as the threads post: the first event ends the run ("RACE <kind> ...", exit 3).
 * Exit 0 and "PASS" when everything checked out, 1 with "FAIL ..." otherwise, 2 when the
 * transport cannot be opened. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uct/api/uct.h>
#include <unistd.h>

#include "seed_common.h"

enum { kThreads = 2, kAmId = 7, kAmBytes = 24, kPutBytes = 16, kSlot = 64 };

struct options {
  const char *tl, *dev;
  int serialized;
  unsigned iters;
};

/* One side: a worker, an interface on it, an endpoint to the other side. */
struct side {
  uct_worker_h worker;
  uct_iface_h iface;
  uct_iface_attr_t attr;
  uct_ep_h ep;
};

static struct {
  struct options opt;
  uct_component_h component;
  uct_md_h md;
  ucs_async_context_t *async;
  struct side snd, rcv;
  pthread_mutex_t lock; /* --mode serialized: held around every call on the sending side */
  unsigned char target[kThreads * kSlot]; /* the puts' destination, registered */
  uint64_t target_rkey;
  unsigned char *seen; /* [thread][iteration]: active messages received */
  atomic_ulong received, bad;
  atomic_int stop;
  struct seed_races races;
} g;

static unsigned char am_byte(unsigned t, unsigned i, unsigned k) {
  return (unsigned char)(t * 101 + i * 7 + k);
}
static unsigned char put_byte(unsigned t, unsigned i, unsigned k) {
  return (unsigned char)(t * 53 + i * 3 + k * 11 + 1);
}

/* ---- the receiving side ---- */

static ucs_status_t on_am(void *arg, void *data, size_t length, unsigned flags) {
  (void)arg, (void)flags;
  uint64_t hdr;
  memcpy(&hdr, data, sizeof hdr);
  unsigned t = (unsigned)(hdr >> 32), i = (unsigned)hdr;
  const unsigned char *p = (const unsigned char *)data + sizeof hdr;
  int ok = length == sizeof hdr + kAmBytes && t < kThreads && i < g.opt.iters;
  for (unsigned k = 0; ok && k < kAmBytes; ++k) ok = p[k] == am_byte(t, i, k);
  if (!ok || g.seen[t * g.opt.iters + i]++) {
    if (atomic_fetch_add(&g.bad, 1) < 5)
      fprintf(stderr, "FAIL active message %s: thread %u iteration %u, %zu bytes\n",
              ok ? "delivered twice" : "corrupt", t, i, length);
  }
  atomic_fetch_add(&g.received, 1);
  return UCS_OK;
}

static void *receiver(void *arg) {
  (void)arg;
  while (!atomic_load(&g.stop))
    if (!uct_worker_progress(g.rcv.worker)) sched_yield();
  return NULL;
}

/* ---- the sending threads ---- */

static void race_check(unsigned t, unsigned i) { seed_race_check(&g.races, t, i); }

static void enter(void) {
  if (g.opt.serialized) pthread_mutex_lock(&g.lock);
}
static void leave(void) {
  if (g.opt.serialized) pthread_mutex_unlock(&g.lock);
}

/* One call, retried after progress while the transport has no resources. */
static void post(unsigned t, unsigned i, int put) {
  unsigned char buf[kAmBytes > kPutBytes ? kAmBytes : kPutBytes];
  for (unsigned k = 0; k < sizeof buf; ++k) buf[k] = put ? put_byte(t, i, k) : am_byte(t, i, k);
  for (;;) {
    enter();
    ucs_status_t st = put ? uct_ep_put_short(g.snd.ep, buf, kPutBytes,
                                             (uintptr_t)(g.target + t * kSlot), g.target_rkey)
                          : uct_ep_am_short(g.snd.ep, kAmId, (uint64_t)t << 32 | i, buf, kAmBytes);
    if (st == UCS_ERR_NO_RESOURCE) uct_worker_progress(g.snd.worker);
    leave();
    if (st == UCS_OK) return;
    if (st != UCS_ERR_NO_RESOURCE) {
      fprintf(stderr, "FAIL %s by thread %u at iteration %u: %s\n", put ? "put" : "am", t, i,
              ucs_status_string(st));
      exit(1);
    }
    race_check(t, i);
  }
}

static void *sender(void *arg) {
  unsigned t = (unsigned)(uintptr_t)arg;
  for (unsigned i = 0; i < g.opt.iters; ++i) {
    post(t, i, 1);
    post(t, i, 0);
    race_check(t, i);
  }
  return NULL;
}

/* ---- set-up ---- */

/* The memory domain that offers tl on dev, opened. */
static void open_md(void) {
  uct_component_h *comps;
  unsigned n;
  ucs_status_t st = uct_query_components(&comps, &n);
  if (st != UCS_OK) seed_fail_setup("uct_query_components", st);
  for (unsigned c = 0; c < n; ++c) {
    uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
    uct_component_query(comps[c], &ca);
    ca.md_resources = calloc(ca.md_resource_count + 1, sizeof *ca.md_resources);
    ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    uct_component_query(comps[c], &ca);
    for (unsigned m = 0; m < ca.md_resource_count; ++m) {
      uct_md_config_t *cfg;
      uct_md_h md;
      if (uct_md_config_read(comps[c], NULL, NULL, &cfg) != UCS_OK) continue;
      st = uct_md_open(comps[c], ca.md_resources[m].md_name, cfg, &md);
      uct_config_release(cfg);
      if (st != UCS_OK) continue;
      uct_tl_resource_desc_t *tls;
      unsigned ntl;
      int found = 0;
      if (uct_md_query_tl_resources(md, &tls, &ntl) == UCS_OK) {
        for (unsigned k = 0; k < ntl; ++k)
          found |= !strcmp(tls[k].tl_name, g.opt.tl) && !strcmp(tls[k].dev_name, g.opt.dev);
        uct_release_tl_resource_list(tls);
      }
      if (found) {
        g.component = comps[c];
        g.md = md;
        free(ca.md_resources);
        uct_release_component_list(comps);
        return;
      }
      uct_md_close(md);
    }
    free(ca.md_resources);
  }
  uct_release_component_list(comps);
  fprintf(stderr, "SETUP no transport %s on device %s\n", g.opt.tl, g.opt.dev);
  exit(2);
}

static void open_side(struct side *s, ucs_thread_mode_t mode) {
  ucs_status_t st = uct_worker_create(g.async, mode, &s->worker);
  if (st != UCS_OK) seed_fail_setup("uct_worker_create", st);
  uct_iface_config_t *cfg;
  st = uct_md_iface_config_read(g.md, g.opt.tl, NULL, NULL, &cfg);
  if (st != UCS_OK) seed_fail_setup("uct_md_iface_config_read", st);
  uct_iface_params_t p = {0};
  p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                 UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_RX_HEADROOM;
  p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
  p.mode.device.tl_name = g.opt.tl;
  p.mode.device.dev_name = g.opt.dev;
  st = uct_iface_open(g.md, s->worker, &p, cfg, &s->iface);
  uct_config_release(cfg);
  if (st != UCS_OK) seed_fail_setup("uct_iface_open", st);
  st = uct_iface_query(s->iface, &s->attr);
  if (st != UCS_OK) seed_fail_setup("uct_iface_query", st);
  if (!(s->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP) ||
      !(s->attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) ||
      !(s->attr.cap.flags & UCT_IFACE_FLAG_AM_SHORT)) {
    fprintf(stderr, "SETUP %s: needs connect-to-ep, put_short and am_short\n", g.opt.tl);
    exit(2);
  }
  uct_ep_params_t ep = {.field_mask = UCT_EP_PARAM_FIELD_IFACE, .iface = s->iface};
  st = uct_ep_create(&ep, &s->ep);
  if (st != UCS_OK) seed_fail_setup("uct_ep_create", st);
  uct_iface_progress_enable(s->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
}

/* Each side's endpoint to the other's. */
static void connect_sides(void) {
  struct side *sides[2] = {&g.snd, &g.rcv};
  void *dev[2], *ep[2];
  for (int k = 0; k < 2; ++k) {
    dev[k] = calloc(1, sides[k]->attr.device_addr_len + 1);
    ep[k] = calloc(1, sides[k]->attr.ep_addr_len + 1);
    ucs_status_t st = uct_iface_get_device_address(sides[k]->iface, dev[k]);
    if (st == UCS_OK) st = uct_ep_get_address(sides[k]->ep, ep[k]);
    if (st != UCS_OK) seed_fail_setup("address", st);
  }
  for (int k = 0; k < 2; ++k) {
    ucs_status_t st = uct_ep_connect_to_ep(sides[k]->ep, dev[1 - k], ep[1 - k]);
    if (st != UCS_OK) seed_fail_setup("uct_ep_connect_to_ep", st);
  }
  for (int k = 0; k < 2; ++k) free(dev[k]), free(ep[k]);
}

static void register_target(void) {
  uct_md_attr_t attr;
  uct_mem_h memh;
  ucs_status_t st = uct_md_query(g.md, &attr);
  if (st == UCS_OK)
    st = uct_md_mem_reg(g.md, g.target, sizeof g.target, UCT_MD_MEM_ACCESS_ALL, &memh);
  if (st != UCS_OK) seed_fail_setup("uct_md_mem_reg", st);
  void *packed = calloc(1, attr.rkey_packed_size + 1);
  uct_rkey_bundle_t rkey;
  st = uct_md_mkey_pack(g.md, memh, packed);
  if (st == UCS_OK) st = uct_rkey_unpack(g.component, packed, &rkey);
  if (st != UCS_OK) seed_fail_setup("rkey", st);
  g.target_rkey = rkey.rkey;
  free(packed);
}

static void parse(int argc, char **argv) {
  g.opt = (struct options){"rc_mlx5", "emu0:1", 0, 2000};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--tl"))
      g.opt.tl = argv[i + 1];
    else if (!strcmp(argv[i], "--dev"))
      g.opt.dev = argv[i + 1];
    else if (!strcmp(argv[i], "--mode"))
      g.opt.serialized = !strcmp(argv[i + 1], "serialized");
    else if (!strcmp(argv[i], "--iters"))
      g.opt.iters = (unsigned)strtoul(argv[i + 1], NULL, 0);
    else
      fprintf(stderr, "unknown option %s\n", argv[i]), exit(2);
  }
}

/* ---- the run ---- */

/* After the threads: everything they posted completes, and the receiver takes all of it (the
 * flush's completion means the responder acknowledged every message, so its completions are all
 * written: progress until a pass finds nothing). */
static void drain(void) {
  ucs_status_t st;
  while ((st = uct_ep_flush(g.snd.ep, 0, NULL)) != UCS_OK) {
    if (st != UCS_INPROGRESS && st != UCS_ERR_NO_RESOURCE) seed_fail_setup("uct_ep_flush", st);
    uct_worker_progress(g.snd.worker);
  }
  while (uct_worker_progress(g.rcv.worker) || uct_worker_progress(g.snd.worker)) {
  }
}

static int check(void) {
  int bad = (int)atomic_load(&g.bad);
  unsigned long want = (unsigned long)kThreads * g.opt.iters;
  if (atomic_load(&g.received) != want) {
    fprintf(stderr, "FAIL %lu active messages received of %lu\n", atomic_load(&g.received), want);
    ++bad;
  }
  for (unsigned t = 0; t < kThreads; ++t)
    for (unsigned k = 0; k < kPutBytes; ++k)
      if (g.target[t * kSlot + k] != put_byte(t, g.opt.iters - 1, k)) {
        fprintf(stderr, "FAIL thread %u's last put: byte %u differs\n", t, k);
        ++bad;
        break;
      }
  return bad;
}

int main(int argc, char **argv) {
  parse(argc, argv);
  pthread_mutex_init(&g.lock, NULL);
  g.seen = calloc((size_t)kThreads * g.opt.iters, 1);
  ucs_status_t st = ucs_async_context_create(UCS_ASYNC_MODE_POLL, &g.async);
  if (st != UCS_OK) seed_fail_setup("ucs_async_context_create", st);
  open_md();
  open_side(&g.snd, g.opt.serialized ? UCS_THREAD_MODE_SERIALIZED : UCS_THREAD_MODE_SINGLE);
  open_side(&g.rcv, UCS_THREAD_MODE_SINGLE);
  st = uct_iface_set_am_handler(g.rcv.iface, kAmId, on_am, NULL, 0);
  if (st != UCS_OK) seed_fail_setup("uct_iface_set_am_handler", st);
  connect_sides();
  register_target();
  printf("uct-shared-single: %s on %s, %s worker shared by %d threads, %u iterations each\n",
         g.opt.tl, g.opt.dev, g.opt.serialized ? "SERIALIZED (own lock)" : "SINGLE", kThreads,
         g.opt.iters);
  fflush(stdout);
  seed_races_start(&g.races);
  pthread_t rx, tx[kThreads];
  pthread_create(&rx, NULL, receiver, NULL);
  for (unsigned t = 0; t < kThreads; ++t)
    pthread_create(&tx[t], NULL, sender, (void *)(uintptr_t)t);
  for (unsigned t = 0; t < kThreads; ++t) pthread_join(tx[t], NULL);
  atomic_store(&g.stop, 1);
  pthread_join(rx, NULL);
  drain();
  race_check(kThreads, g.opt.iters);
  if (check()) return 1;
  printf("PASS %lu active messages and %u puts per thread checked, no race recorded\n",
         atomic_load(&g.received), g.opt.iters);
  return 0;
}
