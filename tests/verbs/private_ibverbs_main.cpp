// SPDX-License-Identifier: BSD-2-Clause
// accept.private_libibverbs: loads private_ibverbs_module.so (argv[1]) as UCX loads its transport
// modules, with RTLD_LOCAL, and runs its check on emu0. This program is not linked with
// libibverbs, so the only copy in the process is the module's private one.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: private_ibverbs_main MODULE.so\n");
    return 2;
  }
  alarm(20);  // a destroy that waits forever ends the process instead of the test run
  void* mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!mod) {
    std::printf("FAIL dlopen: %s\n", dlerror());
    return 1;
  }
  using Check = int (*)(const char*);
  auto check = reinterpret_cast<Check>(dlsym(mod, "private_ibverbs_last_wqe_ack"));
  if (!check) {
    std::printf("FAIL dlsym: %s\n", dlerror());
    return 1;
  }
  int rc = check("emu0");
  std::fflush(stdout);
  return rc;
}
