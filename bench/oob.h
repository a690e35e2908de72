// SPDX-License-Identifier: BSD-2-Clause
// The out-of-band channel of bench/msgrate: one TCP connection between the two processes, as
// ibv_rc_pingpong has, carrying fixed-size records (QP addresses, then the end-of-run counts).
#pragma once

#include <cstddef>

namespace bench {

// Server: listens on port and returns the accepted connection; client (host != nullptr): connects.
// Returns a socket, or -1 with a message on stderr.
int oob_connect(const char* host, int port);

// Sends len bytes and receives len bytes in exchange (both sides call it); false on a short
// transfer or a closed peer.
bool oob_exchange(int fd, const void* out, void* in, size_t len);

}  // namespace bench
