// SPDX-License-Identifier: BSD-2-Clause
// The schedule's text form (emu/sched/schedule.h).
#include "emu/sched/schedule.h"

#include <charconv>

namespace emu::sched {

std::string format_schedule(const Schedule& s) {
  std::string out = "s1:";
  const auto& c = s.choices;
  for (size_t i = 0; i < c.size();) {
    size_t j = i;
    while (j < c.size() && c[j] == c[i]) ++j;
    if (i) out += ',';
    out += std::to_string(c[i]);
    if (j - i > 1) out += 'x' + std::to_string(j - i);
    i = j;
  }
  return out;
}

namespace {

bool read_number(std::string_view& t, uint64_t max, uint64_t* v) {
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
  if (ec != std::errc() || p == t.data() || *v > max) return false;
  t.remove_prefix(static_cast<size_t>(p - t.data()));
  return true;
}

}  // namespace

bool parse_schedule(std::string_view t, Schedule* out) {
  if (t.substr(0, 3) != "s1:") return false;
  t.remove_prefix(3);
  Schedule s;
  constexpr uint64_t kMaxRun = 1u << 24;  // a bound, so bad text cannot ask for gigabytes
  while (!t.empty()) {
    uint64_t actor = 0, run = 1;
    if (!read_number(t, kNoActor - 1, &actor)) return false;
    if (!t.empty() && t[0] == 'x') {
      t.remove_prefix(1);
      if (!read_number(t, kMaxRun, &run) || run == 0) return false;
    }
    s.choices.insert(s.choices.end(), run, static_cast<ActorId>(actor));
    if (s.choices.size() > kMaxRun) return false;
    if (!t.empty()) {
      if (t[0] != ',' || t.size() == 1) return false;
      t.remove_prefix(1);
    }
  }
  *out = std::move(s);
  return true;
}

}  // namespace emu::sched
