// SPDX-License-Identifier: BSD-2-Clause
// bench/cpu/empty_poll: ns per empty ibv_poll_cq on emu0, four CQs polled in turn (as UCX's
// rc_verbs + ud_verbs progress does). One process, no peer: the poll path's own CPU cost.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <time.h>
int main(void) {
  int n;
  struct ibv_device** l = ibv_get_device_list(&n);
  struct ibv_context* c = ibv_open_device(l[0]);
  struct ibv_cq* cq[4];
  for (int i = 0; i < 4; ++i) cq[i] = ibv_create_cq(c, 256, 0, 0, 0);
  struct ibv_wc wc[16];
  struct timespec a, b;
  long iters = 5000000, got = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < iters; ++i) got += ibv_poll_cq(cq[i & 3], 16, wc);
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters);
  for (int i = 0; i < 4; ++i) ibv_destroy_cq(cq[i]);
  ibv_close_device(c);
  ibv_free_device_list(l);
  return (int)got;
}
