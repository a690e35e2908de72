// SPDX-License-Identifier: BSD-2-Clause
/* Verbs after the provider's static destructors ran (exit_hook.c says how): deregistering memory
 * whose pages moved into the registration file moves them back with their bytes, a second
 * registration and device list work, and the objects go. Prints "PASS ..." and exits 0, or says
 * which step failed and exits 1. A crash is the failure this guards against. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { kLen = 16 * 4096 };
static struct ibv_context* g_ctx;
static struct ibv_pd* g_pd;
static struct ibv_mr* g_mr;
static unsigned char* g_buf;

void exit_hook_set(void (*fn)(void)); /* exit_hook.c */

static void fail(const char* what) {
  printf("FAIL %s\n", what);
  fflush(stdout);
  _exit(1);
}

/* Whether p's page lies in the registration file (/proc/self/maps names it rdmaemu-mr-...). */
static int in_registration_file(const void* p) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (unsigned long)p >= lo && (unsigned long)p < hi) {
      found = strstr(line, "rdmaemu-mr") != NULL;
      break;
    }
  }
  if (f) fclose(f);
  return found;
}

static int pattern_intact(void) {
  for (int i = 0; i < kLen; ++i)
    if (g_buf[i] != (unsigned char)(i * 7)) return 0;
  return 1;
}

static void after_provider_destructors(void) {
  if (!in_registration_file(g_buf)) fail("the registered pages in the registration file");
  if (ibv_dereg_mr(g_mr)) fail("ibv_dereg_mr");
  if (in_registration_file(g_buf)) fail("the pages back in private memory after deregistration");
  if (!pattern_intact()) fail("the bytes after deregistration");
  struct ibv_mr* again = ibv_reg_mr(g_pd, g_buf, kLen, IBV_ACCESS_LOCAL_WRITE);
  if (!again) fail("ibv_reg_mr again");
  if (ibv_dereg_mr(again)) fail("ibv_dereg_mr again");
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) fail("ibv_get_device_list");
  ibv_free_device_list(list);
  if (ibv_dealloc_pd(g_pd)) fail("ibv_dealloc_pd");
  if (ibv_close_device(g_ctx)) fail("ibv_close_device");
  printf("PASS verbs after the provider's static destructors\n");
  fflush(stdout);
  _exit(0);
}

int main(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) fail("ibv_get_device_list");
  g_ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!g_ctx) fail("ibv_open_device");
  g_pd = ibv_alloc_pd(g_ctx);
  if (!g_pd) fail("ibv_alloc_pd");
  g_buf = mmap(NULL, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g_buf == MAP_FAILED) fail("mmap");
  for (int i = 0; i < kLen; ++i) g_buf[i] = (unsigned char)(i * 7);
  g_mr = ibv_reg_mr(g_pd, g_buf, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!g_mr) fail("ibv_reg_mr");
  exit_hook_set(after_provider_destructors);
  return 0; /* exit(): the provider's static destructors, then the hook's, which runs the verbs */
}
