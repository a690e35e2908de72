// SPDX-License-Identifier: BSD-2-Clause
// Self-checking messages. Every byte is a function of (thread, seq, length): an 8-byte header
// naming them, a pattern derived from them, and (from 16 bytes on) a checksum of everything before
// it in the last 4 bytes. So whoever holds a message can name the message it claims to be and
// count the bytes that differ from it.
#pragma once

#include <cstdint>

namespace stress {

constexpr uint32_t kMinMessage = 8;
constexpr uint32_t kMaxMessage = 4096;

struct MessageId {
  uint32_t thread;
  uint32_t seq;
};

// The header as stored: host byte order, at offset 0.
struct MessageHeader {
  uint32_t seq;
  uint16_t thread;
  uint16_t length;
};
static_assert(sizeof(MessageHeader) == kMinMessage);

// Writes message (id, length) into dst (length bytes).
void fill_message(uint8_t* dst, MessageId id, uint32_t length);

// How many of the first n bytes at got (n <= length) differ from message (id, length).
uint32_t count_differing(const uint8_t* got, uint32_t n, MessageId id, uint32_t length);

MessageHeader read_header(const uint8_t* p);

}  // namespace stress
