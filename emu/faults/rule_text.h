// SPDX-License-Identifier: BSD-2-Clause
// What the fault and injection rule tables have in common (EMU_FAULTS, EMU_INJECT): texts of parts
// split by a separator with blanks around them ignored and KEY=VALUE settings, and a table in the
// segment that rare writers change under a seqlock.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace emu {

// Calls fn(part) for each non-empty part of text between separators; false as soon as fn is.
template <class Fn>
bool for_each_part(std::string_view text, char sep, Fn fn) {
  while (!text.empty()) {
    size_t at = text.find(sep);
    std::string_view part = text.substr(0, at);
    text = at == std::string_view::npos ? "" : text.substr(at + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (!part.empty() && !fn(part)) return false;
  }
  return true;
}

// Each KEY=VALUE of settings (separated by ',') through set(key, value); false at the first one
// without '=' or that set refuses, with *err naming it within rule.
template <class Fn>
bool for_each_setting(std::string_view rule, std::string_view settings, std::string* err, Fn set) {
  return for_each_part(settings, ',', [&](std::string_view kv) {
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos && set(kv.substr(0, eq), kv.substr(eq + 1))) return true;
    *err = "bad setting '" + std::string(kv) + "' in '" + std::string(rule) + "'";
    return false;
  });
}

// Runs copy() until it ran while no writer was inside (seq odd while one is): a consistent copy.
template <class Fn>
void seqlock_read(const std::atomic<uint32_t>& seq, Fn copy) {
  for (;;) {
    uint32_t s1 = seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    copy();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) == s1) return;
  }
}

}  // namespace emu
