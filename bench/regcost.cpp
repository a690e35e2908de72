// SPDX-License-Identifier: BSD-2-Clause
// Benchmark (not a test): what ibv_reg_mr and ibv_dereg_mr cost on emu0 for one buffer size, the
// buffer's pages resident (written before the first registration). bench/regcost.sh runs it with
// and without EMU_SHARED_MR, alternating, for the cost of moving pages into the registration file
// and back (docs/perf.md).
// Usage: regcost [-s BYTES] [-n PAIRS]   (defaults 65536, 200)
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu/cli.h"

int main(int argc, char** argv) {
  size_t size = 65536;
  int pairs = 200;
  CLI::App app("what ibv_reg_mr and ibv_dereg_mr cost on emu0 for one buffer size", "regcost");
  app.add_option("-s", size, "the buffer's bytes")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  app.add_option("-n", pairs, "registrations (each with its deregistration)")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  const int status = emu::cli::parse(app, argc, argv);
  if (status >= 0) return status;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_device* dev = nullptr;
  for (int i = 0; i < n; ++i)
    if (!std::strcmp(ibv_get_device_name(list[i]), "emu0")) dev = list[i];
  ibv_context* ctx = dev ? ibv_open_device(dev) : nullptr;
  ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : nullptr;
  void* buf = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!pd || buf == MAP_FAILED) {
    std::fprintf(stderr, "regcost: no emu0, PD or buffer\n");
    return 1;
  }
  std::memset(buf, 1, size);
  using clk = std::chrono::steady_clock;
  double reg_us = 0, dereg_us = 0;
  for (int i = 0; i < pairs; ++i) {
    auto t0 = clk::now();
    ibv_mr* mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    auto t1 = clk::now();
    if (!mr || ibv_dereg_mr(mr)) {
      std::fprintf(stderr, "regcost: reg/dereg failed\n");
      return 1;
    }
    auto t2 = clk::now();
    reg_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    dereg_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
  }
  std::printf("regcost %zu B: reg %.2f us, dereg %.2f us (average of %d)\n", size, reg_us / pairs,
              dereg_us / pairs, pairs);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
