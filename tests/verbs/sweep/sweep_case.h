// SPDX-License-Identifier: BSD-2-Clause
// The export sweep's case table (tests/verbs/test_export_sweep.cpp): for every function that
// libibverbs.so.1 exports, and every verbs_context operation an application reaches through an
// inline function of verbs.h, either calls on emu objects with good and bad arguments and the
// result the man page (or the kernel, for EOPNOTSUPP) gives, or the reason it is not called.
// Each case runs in a child process of its own, so a crash names its case.
#pragma once
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <vector>

namespace sweep {

// What every case starts from, made in the child: emu0 open, a PD, a CQ of 16, a registered page.
struct Env {
  ibv_device** list = nullptr;
  ibv_device* dev = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  char* page = nullptr;
  ibv_mr* mr = nullptr;
};

struct Case {
  const char* name;       // the exported symbol, or the inline entry point
  void (*run)(Env& env);  // nullptr: not called, for `reason`
  const char* reason;     // why it is not called (nullptr when it is)
};

// The tables, by family (cases_*.cpp).
std::vector<Case> device_cases();
std::vector<Case> object_cases();
std::vector<Case> misc_cases();
std::vector<Case> private_cases();
std::vector<Case> inline_cases();

// The definition of name@version an application linked against it binds to (the preloaded
// provider's where it interposes, else libibverbs'): for exports that verbs.h hides behind a macro
// or an inline wrapper of the same name.
template <typename Fn>
Fn* exported(const char* name, const char* version) {
  return reinterpret_cast<Fn*>(dlvsym(RTLD_DEFAULT, name, version));
}

// An RC (or other type) QP on env's PD and CQ, in RESET.
ibv_qp* make_qp(Env& env, ibv_qp_type type = IBV_QPT_RC);

// RESET -> RTR (state IBV_QPS_RTR) or RTS towards dest_qpn on port 1, along a GRH path to the
// port's own first GID (what RoCE needs and InfiniBand takes); ibv_modify_qp's result.
int connect_to(Env& env, ibv_qp* qp, uint32_t dest_qpn, ibv_qp_state state);

}  // namespace sweep

// A call that returns a pointer fails with nullptr and errno `err`.
#define SWEEP_EXPECT_NULL(call, err)       \
  do {                                     \
    errno = 0;                             \
    auto* sweep_p_ = (call);               \
    EXPECT_EQ(sweep_p_, nullptr) << #call; \
    EXPECT_EQ(errno, (err)) << #call;      \
  } while (0)

// A call that returns -1 and sets errno fails with `err`.
#define SWEEP_EXPECT_ERRNO(call, err) \
  do {                                \
    errno = 0;                        \
    EXPECT_EQ((call), -1) << #call;   \
    EXPECT_EQ(errno, (err)) << #call; \
  } while (0)
