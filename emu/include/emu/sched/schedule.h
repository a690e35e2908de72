// SPDX-License-Identifier: BSD-2-Clause
// A schedule: the choices a scheduled run made, in order, at the decision points where more than
// one actor could move (a point with one runnable actor is forced and not recorded). Replaying a
// schedule makes the same choices; where it runs out, or names an actor that cannot move, the
// replay goes on with the default choice (the actor that moved last if it still can, else the
// lowest-numbered one that can): so a truncated or edited schedule still runs to the end, which
// is what shrinking relies on.
//
// Text form (what a person copies into a replay command): "s1:" then comma-separated runs, each
// an actor number, optionally "xN" for N consecutive choices of it: "s1:0x12,1,0x3,2".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace emu::sched {

using ActorId = uint16_t;
constexpr ActorId kNoActor = 0xffff;

struct Schedule {
  std::vector<ActorId> choices;
  bool operator==(const Schedule&) const = default;
};

// A preemption: a choice of another actor while the one that moved last could still move. Shrinking
// minimises these; `enabled_last[i]` says whether the previous mover could still move at choice i
// (the scheduler records it), so the count needs the run's record, not only the choices.
struct ChoiceRecord {
  ActorId chosen;
  ActorId previous;       // the actor that moved at the decision before (kNoActor at the start)
  bool previous_enabled;  // whether `previous` could have moved instead
};
inline uint32_t count_preemptions(const std::vector<ChoiceRecord>& rec) {
  uint32_t n = 0;
  for (const ChoiceRecord& c : rec)
    if (c.previous != kNoActor && c.previous_enabled && c.chosen != c.previous) ++n;
  return n;
}

// "s1:..." as above. format_schedule(parse) is the identity on well-formed text.
std::string format_schedule(const Schedule& s);
// false (and *out untouched) on malformed text.
bool parse_schedule(std::string_view text, Schedule* out);

}  // namespace emu::sched
