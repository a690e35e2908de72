// SPDX-License-Identifier: BSD-2-Clause
// The engine's side of shared registered memory: another process's registered pages, mapped here
// once (from the file or memfd its owner keeps open) so the device copies into them with memcpy, as
// a NIC writes host memory without the host's CPU.
#pragma once
#include <cstdint>

#include "emu/layout.h"
#include "emu/segment.h"

namespace emu {

// The address in this process of [va, va + len) of mr (va in the owner's address space), or 0 if
// that range is not reachable that way (no shared backing, outside it, or the owner is gone).
// An MR of this process has none unless `own`: the engine copies through the program's own
// addresses, and maps the MR's file only after such a copy faulted (the program unmapped the
// buffer; the MR still holds its pages, docs/design/registered-memory.md "Registered memory a
// program unmapped"). Caller is inside an EngineSection.
uint64_t shared_window(Segment* seg, const MrSlot& mr, uint64_t va, uint64_t len, bool own = false);

}  // namespace emu
