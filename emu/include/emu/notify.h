// SPDX-License-Identifier: BSD-2-Clause
// Interrupt delivery: completion events to a CQ's channel and async events to a context, wherever
// the owning process is. Records are written to a pipe the owner reads; from another process the
// pipe is reached through /proc/<pid>/fd. Slow path only (one system call per event).
#pragma once
#include <cstdint>

#include "emu/layout.h"

namespace emu {

// Record formats read back by the provider's ibv_get_cq_event / ibv_get_async_event.
struct CompEventRecord {
  uint64_t cq_uid;
};
struct AsyncEventRecord {
  uint64_t element_uid;  // QP/CQ uid, or port number for port events
  uint32_t type;         // AsyncEvent
  uint32_t rsvd;
};
static_assert(sizeof(CompEventRecord) == 8);
static_assert(sizeof(AsyncEventRecord) == 16);

void notify_comp(const CqSlot& cq);
void notify_async(const ContextSlot& ctx, uint64_t element_uid, uint32_t type);

}  // namespace emu
