// SPDX-License-Identifier: BSD-2-Clause
#include "races.h"

#include <unistd.h>

namespace stress {

namespace {
constexpr size_t kAllKept = 4096;  // events kept for checks over all of them
}

const char* race_kind_name(uint32_t kind) {
  switch (kind) {
    case EMUDV_RACE_BF_TORN:
      return "bf_torn";
    case EMUDV_RACE_DBREC_BACKWARDS:
      return "dbrec_backwards";
    case EMUDV_RACE_DBREC_AHEAD:
      return "dbrec_ahead";
    case EMUDV_RACE_DOUBLE_WRITE:
      return "double_write";
    case EMUDV_RACE_STALE_WQE:
      return "stale_wqe";
    case EMUDV_RACE_OWNER:
      return "owner_conflict";
    default:
      return "none";
  }
}

void RaceCollector::start() {
  if (dv_) next_ = dv_->races_recorded();
}

void RaceCollector::collect() {
  if (!dv_) return;
  const pid_t self = getpid();
  emudv_race buf[64];
  for (;;) {
    int n = dv_->read_races(next_, buf, 64);
    for (int i = 0; i < n; ++i) {
      const emudv_race& e = buf[i];
      if (e.seq - 1 > next_) lost_ += e.seq - 1 - next_;  // overwritten before we read them
      next_ = e.seq;
      if (e.pid != self) continue;
      ++total_;
      if (e.kind < EMUDV_RACE_KINDS) ++by_kind_[e.kind];
      if (first_.size() < keep_) first_.push_back(e);
      if (all_.size() < kAllKept) all_.push_back(e);
    }
    if (n < 64) break;
  }
}

}  // namespace stress
