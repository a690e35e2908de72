// SPDX-License-Identifier: BSD-2-Clause
// A scheduled run as a picture and as a fingerprint. The picture is the Chrome / Perfetto
// trace-event JSON format (open it at ui.perfetto.dev): one track per actor, the device being an
// actor like the threads, each scheduling point a 1 us slice at ts = its step, race events as
// instants. The fingerprint, trace_hash, is what replays compare: the same schedule must give the
// same hash, in this process or another.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emu/sched/schedule.h"

namespace emu::sched {

// One scheduling point of a run. `label` names the kind (a static string, may be null).
struct TraceEvent {
  uint32_t step;
  ActorId actor;
  uint16_t kind;
  uint64_t addr;
  uint64_t value;
  const char* label;
};

// Something an oracle saw (a race event of the device, a failed assertion), drawn as an instant
// on the actor's track at the step where it was seen.
struct TraceInstant {
  uint32_t step;
  ActorId actor;
  std::string name;
  std::string detail;
};

struct TraceInput {
  const std::vector<TraceEvent>& events;
  const std::vector<std::string>& actor_names;  // indexed by ActorId; unnamed actors get "actor N"
  const std::vector<TraceInstant>& instants;
};

// {"traceEvents":[...]}: metadata naming each actor's track, then the slices, then the instants.
std::string format_trace_json(const TraceInput& in);
// false when the file cannot be written.
bool write_trace_json(const std::string& path, const TraceInput& in);

// FNV-1a (64 bits) over each event's step, actor, kind and addr, little-endian at fixed widths.
// `value` and `label` are left out: the hash says which actor did what where, in which order.
uint64_t trace_hash(const std::vector<TraceEvent>& events);

}  // namespace emu::sched
