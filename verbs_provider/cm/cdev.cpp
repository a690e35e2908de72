// SPDX-License-Identifier: BSD-2-Clause
// The RDMA CM character device of emu fabrics (cdev.h): a channel is an epoll set, so that
// poll/epoll/select and O_NONBLOCK on it behave natively, and the commands librdmacm write()s on
// it are served here (commands.cpp) instead of by the kernel's ucma. close() of a channel
// destroys its ids, as closing the kernel's file does.
#include "cdev.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "commands.h"
#include "peer.h"
#include "state.h"
#include "verbs/provider.h"

namespace emu::prov {
namespace {

// Which fds are channels: one byte each, so write() and close() of every other fd pay one load.
constexpr int kMaxChannelFd = 1 << 16;
std::atomic<uint8_t> g_is_channel[kMaxChannelFd];

}  // namespace

bool cm_cdev_is_channel(int fd) {
  return fd >= 0 && fd < kMaxChannelFd && g_is_channel[fd].load(std::memory_order_relaxed);
}

namespace {

using WriteFn = ssize_t (*)(int, const void*, size_t);
using CloseFn = int (*)(int);
WriteFn real_write() {
  static WriteFn fn = reinterpret_cast<WriteFn>(dlsym(RTLD_NEXT, "write"));
  return fn;
}
CloseFn real_close() {
  static CloseFn fn = reinterpret_cast<CloseFn>(dlsym(RTLD_NEXT, "close"));
  return fn;
}

ssize_t fail(int err) {
  errno = err;
  return -1;
}

ssize_t channel_write(int fd, const void* buf, size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof hdr) return fail(EINVAL);
  std::memcpy(&hdr, buf, sizeof hdr);
  if (sizeof hdr + hdr.in > len) return fail(EINVAL);
  const auto* bytes = static_cast<const uint8_t*>(buf);
  if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {
    rdma_ucm_get_event cmd{};
    std::memcpy(&cmd, bytes + sizeof hdr, hdr.in < sizeof cmd ? hdr.in : sizeof cmd);
    bool nonblock = fcntl(fd, F_GETFL) & O_NONBLOCK;
    rdma_ucm_event_resp r{};
    if (int rc = cm::get_event(fd, &r, nonblock)) return fail(rc);
    std::memcpy(reinterpret_cast<void*>(cmd.response), &r, hdr.out < sizeof r ? hdr.out : sizeof r);
    return static_cast<ssize_t>(len);
  }
  std::lock_guard<std::mutex> g(cm::cm_mutex());
  auto it = cm::channels().find(fd);
  if (it == cm::channels().end()) return fail(EBADF);
  if (int rc = cm::command(it->second, hdr, bytes)) return fail(rc);
  return static_cast<ssize_t>(len);
}

void channel_close(int fd) {
  std::lock_guard<std::mutex> g(cm::cm_mutex());
  g_is_channel[fd].store(0, std::memory_order_relaxed);
  auto it = cm::channels().find(fd);
  if (it == cm::channels().end()) return;
  std::vector<uint32_t> ids;
  for (auto& [id, c] : cm::ctxs())
    if (c.channel == &it->second) ids.push_back(id);
  for (uint32_t id : ids) cm::destroy_ctx(id);
  real_close()(it->second.eventfd);
  cm::channels().erase(it);
}

}  // namespace

int cm_cdev_open(int flags) {
  if (!segment()) {  // no fabric: no CM device either
    errno = ENODEV;
    return -1;
  }
  int epfd = epoll_create1((flags & O_CLOEXEC) ? EPOLL_CLOEXEC : 0);
  if (epfd < 0) return -1;
  if (epfd >= kMaxChannelFd) {
    real_close()(epfd);
    errno = EMFILE;
    return -1;
  }
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) {
    real_close()(epfd);
    return -1;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint64_t>(cm::Source::kQueue) << 32;
  epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev);
  if (flags & O_NONBLOCK) fcntl(epfd, F_SETFL, O_NONBLOCK);
  std::lock_guard<std::mutex> g(cm::cm_mutex());
  cm::Channel& ch = cm::channels()[epfd];
  ch.epfd = epfd;
  ch.eventfd = efd;
  static uint64_t next_serial = 1;
  ch.serial = next_serial++;
  g_is_channel[epfd].store(1, std::memory_order_relaxed);
  return epfd;
}

}  // namespace emu::prov

// librdmacm speaks to the CM device with write(); every other fd goes straight to libc.
extern "C" ssize_t write(int fd, const void* buf, size_t len) {
  if (emu::prov::cm_cdev_is_channel(fd)) return emu::prov::channel_write(fd, buf, len);
  return emu::prov::real_write()(fd, buf, len);
}

extern "C" int close(int fd) {
  if (emu::prov::cm_cdev_is_channel(fd)) emu::prov::channel_close(fd);
  return emu::prov::real_close()(fd);
}
