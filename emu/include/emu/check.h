// SPDX-License-Identifier: BSD-2-Clause
// The segment consistency checker: walks every table, ring reference, the heap's bitmaps and order
// bytes, the process records and the shared locks, and names every place where the segment breaks
// an invariant the device model keeps. The fuzz targets run it after every run (`emu-ctl check`):
// bad input from an application may fail its own verbs and QPs, but never the segment.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emu/segment.h"

namespace emu {

struct CheckReport {
  std::vector<std::string> problems;  // one line each; empty: consistent
  // What was walked (so a test can see the checker saw the objects it made).
  uint64_t live_objects = 0;
  uint64_t heap_blocks_allocated = 0;  // allocated heap blocks (heads), each owned by one object
  uint64_t heap_bytes_free = 0;        // free blocks, and the heap not grown over yet
  uint64_t heap_bytes_grown = 0;       // the heap with bookkeeping so far, of heap_bytes (it grows)
  uint64_t heap_bytes = 0;
  bool ok() const { return problems.empty(); }
};

// A snapshot read without locks: run it on a quiet fabric (no object being made or destroyed, no
// process dying meanwhile), or a half-made object may show as a problem. Traffic may run.
CheckReport check_segment(Segment* seg);
std::string check_text(const CheckReport& r);

}  // namespace emu
