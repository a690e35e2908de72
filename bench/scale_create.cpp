// SPDX-License-Identifier: BSD-2-Clause
// Create+destroy cost per object with many objects live (issue 18 item 3): for each live count
// (argv, e.g. 100 1000 10000), that many RC QPs are made on one shared CQ, then `cycles`
// create+destroy pairs of a QP, of a CQ and of an MR are timed; one line per count and kind:
// "<kind> live=<n> ns_per_create_destroy=<t>". A count the device refuses prints "refused".
// Only libibverbs: bench/scale_create.sh compiles it and runs it under each build's emu-run.
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kCycles = 200;

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap = {1, 1, 1, 1, 0};
  return ibv_create_qp(pd, &ia);
}

template <class Fn>
double ns_per(Fn fn) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCycles; ++i)
    if (!fn()) return -1;
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / kCycles;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && !ctx; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), "emu0") == 0) ctx = ibv_open_device(list[i]);
  if (!ctx) return std::fprintf(stderr, "no emu0\n"), 2;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  static char page[4096];
  for (int a = 1; a < argc; ++a) {
    int live = std::atoi(argv[a]);
    std::vector<ibv_qp*> qps;
    for (int i = 0; i < live; ++i) {
      ibv_qp* qp = make_qp(pd, cq);
      if (!qp) break;
      qps.push_back(qp);
    }
    if (static_cast<int>(qps.size()) < live) {
      std::printf("qp live=%d refused\n", live);
    } else {
      double qp_ns = ns_per([&] {
        ibv_qp* qp = make_qp(pd, cq);
        return qp && ibv_destroy_qp(qp) == 0;
      });
      double cq_ns = ns_per([&] {
        ibv_cq* c = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
        return c && ibv_destroy_cq(c) == 0;
      });
      double mr_ns = ns_per([&] {
        ibv_mr* mr = ibv_reg_mr(pd, page, sizeof page, IBV_ACCESS_LOCAL_WRITE);
        return mr && ibv_dereg_mr(mr) == 0;
      });
      std::printf("qp live=%d ns_per_create_destroy=%.0f\n", live, qp_ns);
      std::printf("cq live=%d ns_per_create_destroy=%.0f\n", live, cq_ns);
      std::printf("mr live=%d ns_per_create_destroy=%.0f\n", live, mr_ns);
    }
    for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  }
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
