// SPDX-License-Identifier: BSD-2-Clause
// How CM ids of different processes find each other: a bound id reserves an abstract Unix socket
// named after user, fabric, port space, IP address and port; LISTEN makes it listen; CONNECT
// connects a SOCK_SEQPACKET socket to it. Abstract names vanish with the last process holding
// them, so a killed process leaves nothing behind, and the kernel's own EADDRINUSE and
// ECONNREFUSED on those names are the CM's address-in-use and nobody-listening answers.
#pragma once
#include <sys/socket.h>

#include <cstdint>

#include "wire.h"

namespace emu::prov::cm {

// Reserves ps/addr (a port of 0 picks a free one and writes it into `addr`). Returns the socket
// or -errno (EADDRINUSE).
int rv_bind(uint16_t ps, sockaddr_storage& addr);
// Makes a reserved socket accept connections.
int rv_listen(int fd, int backlog);
// Connects to whoever listens on ps/addr (the exact address, then the wildcard). Returns the
// connected socket or -errno: ECONNREFUSED when nobody listens, ETIMEDOUT when the listener's
// backlog stays full.
int rv_connect(uint16_t ps, const sockaddr_storage& addr, uint32_t timeout_ms);

// One message each way; false when the peer is gone (recv: EOF or an error; EAGAIN is *again).
bool rv_send(int fd, const Msg& m);
enum class RecvResult { kMsg, kAgain, kGone };
RecvResult rv_recv(int fd, Msg& m);

}  // namespace emu::prov::cm
