// SPDX-License-Identifier: BSD-2-Clause
#include "fault_signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace emu::mmio {
namespace {

constexpr int kClaimants = 4;

struct SignalState {
  int sig;
  std::atomic<bool> installed{false};
  std::atomic<FaultClaimant> claimants[kClaimants] = {};
  // The program's handler, in two copies: a setter writes the one not in use and then flips
  // `current`, so the signal handler (which cannot take the mutex) copies a whole one.
  struct sigaction app[2] = {};
  std::atomic<int> current{0};
};
SignalState g_states[3] = {{SIGSEGV}, {SIGBUS}, {SIGTRAP}};
std::mutex g_mutex;  // installs and the program's sigaction calls (never in signal context)

SignalState* state_of(int sig) {
  for (SignalState& s : g_states)
    if (s.sig == sig) return &s;
  return nullptr;
}

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
using SignalFn = sighandler_t (*)(int, sighandler_t);

SigactionFn real_sigaction() {
  static SigactionFn fn = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  return fn;
}
SignalFn real_signal() {
  static SignalFn fn = reinterpret_cast<SignalFn>(dlsym(RTLD_NEXT, "signal"));
  return fn;
}

// Resolved at load: the interposers may be called from a signal handler, where dlsym may not.
__attribute__((constructor)) void resolve_real_functions() {
  real_sigaction();
  real_signal();
}

struct sigaction program_handler(const SignalState& s) {
  return s.app[s.current.load(std::memory_order_acquire)];
}
void set_program_handler(SignalState& s, const struct sigaction& sa) {
  int next = 1 - s.current.load(std::memory_order_relaxed);
  s.app[next] = sa;
  s.current.store(next, std::memory_order_release);
}

void raise_in_thread(int sig) { syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig); }

// What the kernel would have done with the fault had our handler not been there.
void deliver_to_program(SignalState& s, siginfo_t* si, void* ctx) {
  struct sigaction app = program_handler(s);
  bool info = app.sa_flags & SA_SIGINFO;
  if (!info && app.sa_handler == SIG_IGN && s.sig == SIGTRAP) return;
  if (!info && (app.sa_handler == SIG_DFL || app.sa_handler == SIG_IGN)) {
    // The default action (a fault cannot be ignored): ours steps aside and the signal, pending
    // while this handler runs, ends the process as it would have.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    real_sigaction()(s.sig, &dfl, nullptr);
    raise_in_thread(s.sig);
    return;
  }
  if (app.sa_flags & SA_RESETHAND) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    set_program_handler(s, dfl);
  }
  // The program's handler runs with the mask it asked for (restored when it returns; a handler
  // that jumps out restores its own with siglongjmp).
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &app.sa_mask, &old);
  if (info)
    app.sa_sigaction(s.sig, si, ctx);
  else
    app.sa_handler(s.sig);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void dispatch(int sig, siginfo_t* si, void* ctx) {
  int saved_errno = errno;
  SignalState* s = state_of(sig);
  for (auto& c : s->claimants) {
    FaultClaimant claim = c.load(std::memory_order_acquire);
    if (!claim) break;
    if (claim(sig, si, ctx)) {
      errno = saved_errno;
      return;
    }
  }
  errno = saved_errno;
  deliver_to_program(*s, si, ctx);
}

// Ours in front; what was there becomes the program's handler. Under g_mutex.
void install(SignalState& s) {
  struct sigaction before {};
  real_sigaction()(s.sig, nullptr, &before);
  set_program_handler(s, before);
  struct sigaction ours {};
  ours.sa_sigaction = dispatch;
  // SA_NODEFER: a claimant's work may fault in turn (the device run by an MMIO exit copying into
  // memory a program unmapped, under its own guard): that fault must reach its handler, not find
  // the signal blocked, which would have the kernel end the process.
  ours.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&ours.sa_mask);
  real_sigaction()(s.sig, &ours, nullptr);
  s.installed.store(true, std::memory_order_release);
}

}  // namespace

void fault_claimant_add(int sig, FaultClaimant claimant) {
  SignalState* s = state_of(sig);
  if (!s) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& c : s->claimants) {
    FaultClaimant have = c.load(std::memory_order_relaxed);
    if (have == claimant) break;
    if (!have) {
      c.store(claimant, std::memory_order_release);
      break;
    }
  }
  if (!s->installed.load(std::memory_order_relaxed)) install(*s);
}

}  // namespace emu::mmio

using emu::mmio::g_mutex;
using emu::mmio::state_of;

// The program's view of the fault signals once ours is installed: its own handler, set and read
// as if it were the only one. Every other signal, and these before ours is installed, go to libc.
extern "C" int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  emu::mmio::SignalState* s = state_of(sig);
  if (!s || !s->installed.load(std::memory_order_acquire))
    return emu::mmio::real_sigaction()(sig, act, old);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (old) *old = emu::mmio::program_handler(*s);
  if (act) emu::mmio::set_program_handler(*s, *act);
  return 0;
}

extern "C" sighandler_t signal(int sig, sighandler_t handler) {
  emu::mmio::SignalState* s = state_of(sig);
  if (!s || !s->installed.load(std::memory_order_acquire))
    return emu::mmio::real_signal()(sig, handler);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;  // glibc's signal(): BSD semantics
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, &old);
  // sa_handler and sa_sigaction share their storage: a SA_SIGINFO handler comes back as it was
  // set, as glibc's signal() returns it.
  return old.sa_handler;
}
