// SPDX-License-Identifier: BSD-2-Clause
// The device's log of race events (RaceEvent in layout.h): a ring in the segment that any process
// appends to, with per-device counts by kind. Read by the census (emu-ctl census --json) and by
// tests; EMU_RACE_LOG=1 also prints each event to stderr as the device records it.
#pragma once
#include <string>
#include <vector>

#include "emu/barriers.h"  // EMU_FAST_TLS
#include "emu/layout.h"
#include "emu/segment.h"

namespace emu {

namespace detail {
extern EMU_FAST_TLS constinit uint32_t t_writer_tid;  // 0 until asked, and again in a fork child
uint32_t writer_tid_slow();
}  // namespace detail

// The thread id the device records for the calling thread (gettid, cached). Inline: every post
// asks it, some twice.
inline uint32_t writer_tid() {
  uint32_t t = detail::t_writer_tid;
  return __builtin_expect(t != 0, 1) ? t : detail::writer_tid_slow();
}

struct RaceReport {
  RaceKind kind = kRaceNone;
  RaceAction action = kActNone;
  uint16_t reg = 0xffff;
  uint32_t dev = 0;
  uint32_t qpn = 0;
  uint32_t ctx = 0xffffffffu;
  uint32_t slot = 0;
  uint32_t writers[2] = {0, 0};
  uint32_t value[2] = {0, 0};
};

void record_race(Segment* seg, const RaceReport& r);

const char* race_kind_name(uint32_t kind);      // "bf_torn", ...
const char* race_action_name(uint32_t action);  // "executed_bf_copy", ...

// A copy of a logged event, as readers get it.
struct RaceRecord : RaceBody {
  uint64_t seq;
};

// Events in the log with a number >= from (0: all still in the ring), oldest first.
std::vector<RaceRecord> read_races(Segment* seg, uint64_t from = 0);
uint64_t races_recorded(Segment* seg);
// One event as a JSON object (the format of the census and of EMU_RACE_LOG).
std::string race_json(const RaceRecord& e);

}  // namespace emu
