// SPDX-License-Identifier: BSD-2-Clause
// GET_EVENT: the next event of a channel (peer.cpp turns peers' messages and timers into
// events first).
#pragma once
#include <rdma/rdma_user_cm.h>

namespace emu::prov::cm {

// Waits for an event on channel `fd` unless `nonblock`; returns 0 or an errno (EAGAIN).
int get_event(int fd, rdma_ucm_event_resp* out, bool nonblock);

}  // namespace emu::prov::cm
