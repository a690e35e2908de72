// SPDX-License-Identifier: BSD-2-Clause
#include "emu/notify.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <mutex>

#include "emu/segment.h"

namespace emu {
namespace {

// Open write ends of other processes' pipes, keyed by the channel's uid (never reused).
struct FdCache {
  static constexpr int kSize = 64;
  uint64_t uid[kSize] = {};
  int fd[kSize] = {};
  int next = 0;
  std::mutex mu;

  // Caller holds mu.
  int get(uint64_t key, int owner_pid, int owner_fd) {
    for (int i = 0; i < kSize; ++i)
      if (uid[i] == key) return fd[i];
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", owner_pid, owner_fd);
    int f = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return -1;
    int slot = next++ % kSize;
    if (uid[slot]) close(fd[slot]);
    uid[slot] = key;
    fd[slot] = f;
    return f;
  }
};

FdCache& cache() {
  static FdCache* c = new FdCache();  // never destroyed: engines may run during exit
  return *c;
}

void deliver(uint32_t owner, int wfd, uint64_t key, const void* rec, size_t len) {
  Segment* seg = Segment::get();
  if (!seg || wfd < 0) return;
  int fd = wfd;
  std::unique_lock<std::mutex> hold;  // a cached fd stays open while we write to it
  if (owner != seg->self()) {
    hold = std::unique_lock<std::mutex>(cache().mu);
    fd = cache().get(key, seg->hdr()->procs[owner].pid, wfd);
    if (fd < 0) return;  // the owner is gone: nobody is left to read the event
  }
  // A reader that is gone must not kill the process running the engine with SIGPIPE: block the
  // signal for this write and take back a SIGPIPE it raised.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  ssize_t r = write(fd, rec, len);
  int err = errno;
  if (r < 0 && err == EPIPE) {
    timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  if (r != static_cast<ssize_t>(len)) log("event lost (pipe full or closed): errno %d", err);
}

}  // namespace

void notify_comp(const CqSlot& cq) {
  CompEventRecord rec{cq.uid};
  deliver(cq.owner, cq.chan_wfd, cq.chan_uid, &rec, sizeof rec);
}

void notify_async(const ContextSlot& ctx, uint64_t element_uid, uint32_t type) {
  AsyncEventRecord rec{element_uid, type, 0};
  deliver(ctx.owner, ctx.async_wfd, ctx.uid, &rec, sizeof rec);
}

}  // namespace emu
