// SPDX-License-Identifier: BSD-2-Clause
// The device's race events that belong to this run: those recorded on the fabric after the run
// started (emudv_races_recorded) by this process's threads. Read while the run goes on, since the
// device keeps only its last 1024 events; what was overwritten before it was read counts as lost.
#pragma once

#include <cstdint>
#include <vector>

#include "emudv_link.h"

namespace stress {

class RaceCollector {
 public:
  // dv null: the device cannot report races (not an emulated one).
  RaceCollector(const uctlite::EmudvFns* dv, uint32_t keep) : dv_(dv), keep_(keep) {}
  void start();
  void collect();

  bool available() const { return dv_ != nullptr; }
  uint64_t total() const { return total_; }
  uint64_t lost() const { return lost_; }
  uint64_t count(uint32_t kind) const { return kind < EMUDV_RACE_KINDS ? by_kind_[kind] : 0; }
  const std::vector<emudv_race>& first() const { return first_; }
  // Every event kept so far, for checks over all of them (the first `keep` plus later ones up to
  // a bound).
  const std::vector<emudv_race>& all() const { return all_; }

 private:
  const uctlite::EmudvFns* dv_;
  uint32_t keep_;
  uint64_t next_ = 0;  // the log position to read from
  uint64_t total_ = 0, lost_ = 0;
  uint64_t by_kind_[EMUDV_RACE_KINDS] = {};
  std::vector<emudv_race> first_;
  std::vector<emudv_race> all_;
};

const char* race_kind_name(uint32_t kind);

}  // namespace stress
