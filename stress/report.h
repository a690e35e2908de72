// SPDX-License-Identifier: BSD-2-Clause
// emu-stress's report: the text for people (stdout) and the JSON summary (--json; fields in
// docs/guides/stress.md).
#pragma once

#include <cstdio>
#include <string>

#include "races.h"
#include "run.h"

namespace stress {

struct Report {
  const Run& run;
  const RaceCollector& races;
  Tally tally;
  DrainResult drain;
  double post_seconds = 0;
  std::string engine;  // EMU_ENGINE as the run saw it

  // No race event, corruption, missing or duplicate completion, error completion or unmatched
  // completion: what --expect-clean requires.
  bool clean() const;
  void print_text(FILE* out) const;
  bool write_json(const std::string& path, std::string* err) const;
};

}  // namespace stress
