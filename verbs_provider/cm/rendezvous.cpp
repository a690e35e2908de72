// SPDX-License-Identifier: BSD-2-Clause
#include "rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "addr.h"
#include "emu/config.h"

namespace emu::prov::cm {
namespace {

// "\0rdmaemu-cm.<uid>.<fabric>.<ps>.<ip|any>.<port>": the abstract name of one CM address.
socklen_t make_name(uint16_t ps, const sockaddr_storage& a, bool wildcard, sockaddr_un* un) {
  char ip[INET6_ADDRSTRLEN] = "any";
  if (!wildcard) {
    if (a.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, ip, sizeof ip);
    else
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, ip, sizeof ip);
  }
  std::memset(un, 0, sizeof *un);
  un->sun_family = AF_UNIX;
  int n =
      std::snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "rdmaemu-cm.%u.%s.%x.%s.%u",
                    static_cast<unsigned>(getuid()), config().fabric.c_str(), ps, ip, addr_port(a));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

int new_socket() { return socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0); }

int bind_name(int fd, uint16_t ps, const sockaddr_storage& a) {
  sockaddr_un un;
  socklen_t len = make_name(ps, a, is_any_addr(a), &un);
  return bind(fd, reinterpret_cast<sockaddr*>(&un), len) == 0 ? 0 : -errno;
}

}  // namespace

int rv_bind(uint16_t ps, sockaddr_storage& addr) {
  int fd = new_socket();
  if (fd < 0) return -errno;
  int rc;
  if (addr_port(addr) != 0) {
    rc = bind_name(fd, ps, addr);
  } else {
    // An ephemeral port, as the kernel picks one from its local port range.
    static thread_local std::minstd_rand rng(static_cast<unsigned>(getpid() ^ gettid()));
    rc = -EADDRINUSE;
    for (int tries = 0; tries < 1000 && rc == -EADDRINUSE; ++tries) {
      set_addr_port(addr, static_cast<uint16_t>(32768 + rng() % 28232));
      rc = bind_name(fd, ps, addr);
    }
  }
  if (rc < 0) {
    close(fd);
    return rc;
  }
  return fd;
}

int rv_listen(int fd, int backlog) {
  return listen(fd, backlog > 0 ? backlog : 128) == 0 ? 0 : -errno;
}

int rv_connect(uint16_t ps, const sockaddr_storage& addr, uint32_t timeout_ms) {
  int rc = -ECONNREFUSED;
  for (bool wildcard : {false, true}) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    // A listener's full backlog makes connect wait; the CM gives up as a REQ without answer does.
    timeval tv{static_cast<time_t>(timeout_ms / 1000),
               static_cast<suseconds_t>((timeout_ms % 1000) * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_un un;
    socklen_t len = make_name(ps, addr, wildcard, &un);
    if (connect(fd, reinterpret_cast<sockaddr*>(&un), len) == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      return fd;
    }
    rc = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -ECONNREFUSED;
    close(fd);
    if (rc == -ETIMEDOUT) return rc;
  }
  return rc;
}

bool rv_send(int fd, const Msg& m) {
  return send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof m);
}

RecvResult rv_recv(int fd, Msg& m) {
  ssize_t n = recv(fd, &m, sizeof m, MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(sizeof m)) return RecvResult::kMsg;
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return RecvResult::kAgain;
  return RecvResult::kGone;
}

}  // namespace emu::prov::cm
