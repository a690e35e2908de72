// SPDX-License-Identifier: BSD-2-Clause
#include "oob.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace bench {

namespace {

int oob_accept(int port) {
  // IPv4, as the benchmark scripts' listening check reads /proc/net/tcp (a client given
  // "localhost" tries ::1 and then 127.0.0.1).
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) return -1;
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(ls, 1) != 0) {
    perror("msgrate: bind/listen");
    close(ls);
    return -1;
  }
  const int fd = accept(ls, nullptr, nullptr);
  close(ls);
  return fd;
}

int oob_dial(const char* host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host, service.c_str(), &hints, &res) != 0) {
    fprintf(stderr, "msgrate: cannot resolve %s\n", host);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) fprintf(stderr, "msgrate: cannot connect to %s:%d\n", host, port);
  return fd;
}

bool transfer_all(int fd, char* buf, size_t len, bool sending) {
  while (len > 0) {
    const ssize_t n = sending ? write(fd, buf, len) : read(fd, buf, len);
    if (n <= 0) return false;
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int oob_connect(const char* host, int port) {
  const int fd = host ? oob_dial(host, port) : oob_accept(port);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

bool oob_exchange(int fd, const void* out, void* in, size_t len) {
  std::string copy(static_cast<const char*>(out), len);
  return transfer_all(fd, copy.data(), len, true) &&
         transfer_all(fd, static_cast<char*>(in), len, false);
}

}  // namespace bench
