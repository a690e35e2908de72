// SPDX-License-Identifier: BSD-2-Clause
// Text pieces shared by the trace writer and the campaign totals (private to emu/sched).
#pragma once
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace emu::sched {

// A JSON string literal, quotes included. Bytes >= 0x80 pass through: strings are UTF-8.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + '"';
}

// "0x..." as a JSON string: 64-bit addresses and seeds do not survive a JSON reader's doubles.
inline std::string json_hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%llx\"", static_cast<unsigned long long>(v));
  return buf;
}

// An unsigned number at the front of *t, which then starts after it; no sign, no "0x".
inline bool read_uint(std::string_view* t, uint64_t* v, int base = 10) {
  auto [p, ec] = std::from_chars(t->data(), t->data() + t->size(), *v, base);
  if (ec != std::errc() || p == t->data()) return false;
  t->remove_prefix(static_cast<size_t>(p - t->data()));
  return true;
}

}  // namespace emu::sched
