// SPDX-License-Identifier: BSD-2-Clause
#include "emu/race_log.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "emu/barriers.h"
#include "emu/config.h"

namespace emu {

namespace detail {
EMU_FAST_TLS constinit uint32_t t_writer_tid = 0;

uint32_t writer_tid_slow() {
  // A fork child's thread has its own id: the parent's cached one is forgotten there.
  [[maybe_unused]] static const int forget_in_child =
      pthread_atfork(nullptr, nullptr, [] { t_writer_tid = 0; });
  t_writer_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_writer_tid;
}
}  // namespace detail

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool log_on() {
  static const bool on = [] { return knob_flag("EMU_RACE_LOG"); }();
  return on;
}

}  // namespace

const char* race_kind_name(uint32_t kind) {
  switch (kind) {
    case kRaceBfTorn:
      return "bf_torn";
    case kRaceDbrecBackwards:
      return "dbrec_backwards";
    case kRaceDbrecAhead:
      return "dbrec_ahead";
    case kRaceDoubleWrite:
      return "double_write";
    case kRaceStaleWqe:
      return "stale_wqe";
    case kRaceOwner:
      return "owner_conflict";
    default:
      return "none";
  }
}

const char* race_action_name(uint32_t action) {
  switch (action) {
    case kActExecutedBf:
      return "executed_bf_copy";
    case kActExecutedRing:
      return "executed_ring_wqe";
    case kActLocalQpOpErr:
      return "local_qp_op_error";
    case kActIgnored:
      return "ignored";
    case kActDropped:
      return "dropped";
    default:
      return "none";
  }
}

void record_race(Segment* seg, const RaceReport& r) {
  RaceBody body{r.kind,
                r.action,
                r.reg,
                r.dev,
                r.qpn,
                r.ctx,
                r.slot,
                static_cast<int32_t>(getpid()),
                {r.writers[0], r.writers[1]},
                {r.value[0], r.value[1]},
                now_ns()};
  RaceLog& log = seg->hdr()->races;
  uint64_t n = log.next.fetch_add(1);
  RaceEvent& e = log.ring[n % kRaceLogLen];
  e.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.body = body;
  e.seq.store(n + 1, std::memory_order_release);
  if (r.dev < kMaxDevices && r.kind < kRaceKinds) log.counts[r.dev][r.kind].fetch_add(1);
  if (log_on()) {
    RaceRecord c;
    static_cast<RaceBody&>(c) = body;
    c.seq = n + 1;
    std::fprintf(stderr, "rdmaemu race: %s\n", race_json(c).c_str());
  }
}

uint64_t races_recorded(Segment* seg) { return seg->hdr()->races.next.load(); }

std::vector<RaceRecord> read_races(Segment* seg, uint64_t from) {
  RaceLog& log = seg->hdr()->races;
  uint64_t end = log.next.load();
  uint64_t begin = end > kRaceLogLen ? end - kRaceLogLen : 0;
  if (from > begin) begin = from;
  std::vector<RaceRecord> out;
  for (uint64_t n = begin; n < end; ++n) {
    const RaceEvent& src = log.ring[n % kRaceLogLen];
    if (src.seq.load(std::memory_order_acquire) != n + 1) continue;  // being written, or reused
    RaceRecord e;
    static_cast<RaceBody&>(e) = src.body;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (src.seq.load(std::memory_order_relaxed) != n + 1) continue;  // overwritten while copied
    e.seq = n + 1;
    out.push_back(e);
  }
  return out;
}

std::string race_json(const RaceRecord& e) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"seq\":%llu,\"kind\":\"%s\",\"device\":%u,\"qpn\":%u,\"context\":%d,"
                "\"register\":%d,\"slot\":%u,\"pid\":%d,\"writer_threads\":[%u,%u],"
                "\"values\":[%u,%u],\"executed\":\"%s\"}",
                static_cast<unsigned long long>(e.seq), race_kind_name(e.kind), e.dev, e.qpn,
                e.ctx == 0xffffffffu ? -1 : static_cast<int>(e.ctx),
                e.reg == 0xffff ? -1 : static_cast<int>(e.reg), e.slot, e.pid, e.writers[0],
                e.writers[1], e.value[0], e.value[1], race_action_name(e.action));
  return buf;
}

}  // namespace emu
