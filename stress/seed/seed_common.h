// SPDX-License-Identifier: BSD-2-Clause
/* What the seed's programs share: a set-up failure's report, and the device's race log read as
 * the threads post (emudv.h's emudv_races_recorded, found by name: the programs are plain UCX
 * programs and run without the provider too). */
#pragma once
/* RTLD_DEFAULT: the including file defines _GNU_SOURCE before its first include. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucs/type/status.h>
#include <unistd.h>

/* A call the program cannot go on without failed: exit 2 (the transport cannot be opened). */
static inline void seed_fail_setup(const char* what, ucs_status_t st) {
  fprintf(stderr, "SETUP %s: %s\n", what, ucs_status_string(st));
  exit(2);
}

/* The race log's count when the run began, and where to read it (NULL without the provider). */
struct seed_races {
  uint64_t (*recorded)(void);
  uint64_t before;
};

static inline void seed_races_start(struct seed_races* r) {
  r->recorded = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "emudv_races_recorded");
  r->before = r->recorded ? r->recorded() : 0;
}

/* The device saw the threads' stores collide: what it recorded is in its log (EMU_RACE_LOG,
 * emu-ctl races); the UCX state is not to be trusted past this point, so the program stops at
 * once ("RACE found ...", exit 3) without its exit handlers. */
static inline void seed_race_check(const struct seed_races* r, unsigned t, unsigned i) {
  if (!r->recorded || r->recorded() == r->before) return;
  printf("RACE found by thread %u at iteration %u (%lu events)\n", t, i,
         (unsigned long)(r->recorded() - r->before));
  fflush(stdout);
  _exit(3);
}
