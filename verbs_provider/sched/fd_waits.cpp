// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so in a program-wide run (EMU_SCHEDULE): waits on file descriptors. An actor that
// blocked in epoll_wait or poll would hold the baton while it slept, and the run would stop (UCX
// starts such a thread for its asynchronous events the moment a memory domain is opened). Here
// an actor's wait asks the kernel without blocking; when nothing is ready it is a spin point
// (kPointFdWait: the actor moves again once another has) and asks again. A timed wait ends when
// the run's logical clock passes its timeout, so what the wait returns is a function of the
// schedule as long as what makes the descriptors ready is the program's own actors. Outside a
// run each call is libc's.
#include <poll.h>
#include <sys/epoll.h>

#include <csignal>

#include "emu/sched/program.h"
#include "libc.h"

namespace {

namespace sched = emu::sched;
using emu_sched::libc_next;

bool in_program_run() { return sched::scheduled() && sched::program::active(); }

// Repeats `ready_now` (the call with a zero timeout) at spin points until it reports something,
// fails, or the logical time passes timeout_ms (negative: no timeout).
template <typename Ask>
int wait_scheduled(Ask ready_now, int64_t timeout_ms, uint64_t fd) {
  const uint64_t deadline = sched::logical_time_ns() + uint64_t(timeout_ms) * 1'000'000;
  for (;;) {
    int n = ready_now();
    if (n != 0 || timeout_ms == 0) return n;
    if (timeout_ms > 0 && sched::logical_time_ns() >= deadline) return 0;
    sched::spin(sched::kPointFdWait, fd);
  }
}

int64_t ms_of(const timespec* ts) {
  return ts ? int64_t(ts->tv_sec) * 1000 + ts->tv_nsec / 1'000'000 : -1;
}

using EpollWaitFn = int (*)(int, epoll_event*, int, int);
using EpollPwaitFn = int (*)(int, epoll_event*, int, int, const sigset_t*);
using PollFn = int (*)(pollfd*, nfds_t, int);
using PpollFn = int (*)(pollfd*, nfds_t, const timespec*, const sigset_t*);
std::atomic<EpollWaitFn> g_epoll_wait{nullptr};
std::atomic<EpollPwaitFn> g_epoll_pwait{nullptr};
std::atomic<PollFn> g_poll{nullptr};
std::atomic<PpollFn> g_ppoll{nullptr};

}  // namespace

extern "C" {

int epoll_wait(int epfd, epoll_event* events, int max, int timeout) {
  auto real = libc_next(g_epoll_wait, "epoll_wait");
  if (!in_program_run()) return real(epfd, events, max, timeout);
  return wait_scheduled([&] { return real(epfd, events, max, 0); }, timeout, uint64_t(epfd));
}

// The signal mask is the caller's for the non-blocking asks too.
int epoll_pwait(int epfd, epoll_event* events, int max, int timeout, const sigset_t* mask) {
  auto real = libc_next(g_epoll_pwait, "epoll_pwait");
  if (!in_program_run()) return real(epfd, events, max, timeout, mask);
  return wait_scheduled([&] { return real(epfd, events, max, 0, mask); }, timeout, uint64_t(epfd));
}

int poll(pollfd* fds, nfds_t n, int timeout) {
  auto real = libc_next(g_poll, "poll");
  if (!in_program_run()) return real(fds, n, timeout);
  uint64_t first = n ? uint64_t(fds[0].fd) : 0;
  return wait_scheduled([&] { return real(fds, n, 0); }, timeout, first);
}

int ppoll(pollfd* fds, nfds_t n, const timespec* timeout, const sigset_t* mask) {
  auto real = libc_next(g_ppoll, "ppoll");
  if (!in_program_run()) return real(fds, n, timeout, mask);
  static const timespec kZero{0, 0};
  uint64_t first = n ? uint64_t(fds[0].fd) : 0;
  return wait_scheduled([&] { return real(fds, n, &kZero, mask); }, ms_of(timeout), first);
}

}  // extern "C"
