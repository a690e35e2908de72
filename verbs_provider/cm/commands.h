// SPDX-License-Identifier: BSD-2-Clause
// One ucma command written on a channel fd (all but GET_EVENT, which cdev.cpp hands to
// get_event because it waits). Caller holds cm_mutex(); `buf` is the whole write, header first,
// with at least hdr.in bytes after the header.
#pragma once
#include <rdma/rdma_user_cm.h>

#include <cstdint>

#include "state.h"

namespace emu::prov::cm {

// Returns 0 or the errno the kernel would give.
int command(Channel& ch, const rdma_ucm_cmd_hdr& hdr, const uint8_t* buf);

}  // namespace emu::prov::cm
