// The device's log of race events (RaceEvent in layout.h): a ring in the segment that any process
// appends to, with per-device counts by kind. Read by the census (emu-ctl census --json) and by
// tests; EMU_RACE_LOG=1 also prints each event to stderr as the device records it.
#pragma once
#include <string>
#include <vector>

#include "emu/layout.h"
#include "emu/segment.h"

namespace emu {

// The thread id the device records for the calling thread (gettid, cached).
uint32_t writer_tid();

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
