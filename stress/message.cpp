// SPDX-License-Identifier: BSD-2-Clause
#include "message.h"

#include <cstring>

namespace stress {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: neighbouring inputs give unrelated bytes
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint32_t checksum(const uint8_t* p, uint32_t n) {  // FNV-1a
  uint32_t h = 2166136261u;
  for (uint32_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

}  // namespace

void fill_message(uint8_t* dst, MessageId id, uint32_t length) {
  MessageHeader h{id.seq, static_cast<uint16_t>(id.thread), static_cast<uint16_t>(length)};
  std::memcpy(dst, &h, sizeof h);
  uint64_t seed = mix64(uint64_t(id.thread) << 32 | id.seq);
  uint32_t end = length >= 16 ? length - 4 : length;
  for (uint32_t i = sizeof h; i < end; i += 8) {
    uint64_t word = mix64(seed + i);
    uint32_t n = end - i < 8 ? end - i : 8;
    std::memcpy(dst + i, &word, n);
  }
  if (length >= 16) {
    uint32_t sum = checksum(dst, end);
    std::memcpy(dst + end, &sum, 4);
  }
}

uint32_t count_differing(const uint8_t* got, uint32_t n, MessageId id, uint32_t length) {
  uint8_t want[kMaxMessage];
  fill_message(want, id, length);
  uint32_t differ = 0;
  for (uint32_t i = 0; i < n && i < length; ++i) differ += got[i] != want[i];
  return differ;
}

MessageHeader read_header(const uint8_t* p) {
  MessageHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

}  // namespace stress
