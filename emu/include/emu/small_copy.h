// SPDX-License-Identifier: BSD-2-Clause
// Copies of a few bytes without a call into libc. A memcpy of a length the compiler cannot see is
// a call that spends ~20 instructions choosing its method before a byte moves: as much again as
// the rest of the work for a 2- or 8-byte inline payload, which the post and the engine copy for
// every message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace emu {

// len bytes from `from` to `to` (not overlapping): up to 16 bytes as two overlapping moves of 8 or
// 4 bytes (or bytewise below 4), anything longer by memcpy.
inline void copy_small(void* to, const void* from, size_t len) {
  auto* d = static_cast<uint8_t*>(to);
  const auto* s = static_cast<const uint8_t*>(from);
  if (len > 16) {
    std::memcpy(d, s, len);
  } else if (len >= 8) {
    uint64_t a, b;
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + len - 8, 8);
    std::memcpy(d, &a, 8);
    std::memcpy(d + len - 8, &b, 8);
  } else if (len >= 4) {
    uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + len - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + len - 4, &b, 4);
  } else {
    for (size_t i = 0; i < len; ++i) d[i] = s[i];
  }
}

}  // namespace emu
