// SPDX-License-Identifier: BSD-2-Clause
// The RDMA CM emulation's knobs (documented in emu/control/config.cpp's table), read once.
#pragma once
#include <cstdint>

#include "emu/config.h"

namespace emu::prov::cm {

inline uint32_t knob_ms(const char* name) { return static_cast<uint32_t>(knob_uint(name)); }

// EMU_CM_TIMEWAIT_MS: how long after a disconnect TIMEWAIT_EXIT comes.
inline uint32_t knob_timewait_ms() {
  static const uint32_t v = knob_ms("EMU_CM_TIMEWAIT_MS");
  return v;
}

// EMU_CM_TIMEOUT_MS: how long a REQ waits for any answer before UNREACHABLE.
inline uint32_t knob_connect_timeout_ms() {
  static const uint32_t v = knob_ms("EMU_CM_TIMEOUT_MS");
  return v;
}

}  // namespace emu::prov::cm
