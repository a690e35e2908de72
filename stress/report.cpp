// SPDX-License-Identifier: BSD-2-Clause
#include "report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace stress {
namespace {

using Json = nlohmann::ordered_json;

const char* status_name(uint32_t s) {
  static const char* const names[] = {"SUCCESS",
                                      "LOC_LEN_ERR",
                                      "LOC_QP_OP_ERR",
                                      "LOC_EEC_OP_ERR",
                                      "LOC_PROT_ERR",
                                      "WR_FLUSH_ERR",
                                      "MW_BIND_ERR",
                                      "BAD_RESP_ERR",
                                      "LOC_ACCESS_ERR",
                                      "REM_INV_REQ_ERR",
                                      "REM_ACCESS_ERR",
                                      "REM_OP_ERR",
                                      "RETRY_EXC_ERR",
                                      "RNR_RETRY_EXC_ERR",
                                      "LOC_RDD_VIOL_ERR",
                                      "REM_INV_RD_REQ_ERR",
                                      "REM_ABORT_ERR",
                                      "INV_EECN_ERR",
                                      "INV_EEC_STATE_ERR",
                                      "FATAL_ERR",
                                      "RESP_TIMEOUT_ERR",
                                      "GENERAL_ERR",
                                      "TM_ERR",
                                      "TM_RNDV_INCOMPLETE"};
  return s < sizeof names / sizeof *names ? names[s] : "OTHER";
}

uint64_t sum(const std::atomic<uint64_t>* a, size_t n, size_t from = 0) {
  uint64_t s = 0;
  for (size_t k = from; k < n; ++k) s += a[k].load();
  return s;
}

// Events naming two distinct threads of this run's posters (kinds that name writers).
bool names_two_posters(const emudv_race& e, const std::vector<uint32_t>& tids) {
  auto is_poster = [&](uint32_t t) { return std::find(tids.begin(), tids.end(), t) != tids.end(); };
  return e.writer_tids[0] != e.writer_tids[1] && is_poster(e.writer_tids[0]) &&
         is_poster(e.writer_tids[1]);
}

}  // namespace

bool Report::clean() const {
  const Counters& c = run.counters();
  return races.total() == 0 && races.lost() == 0 && c.corrupt_messages.load() == 0 &&
         c.corrupt_bytes.load() == 0 && tally.missing == 0 && tally.more_than_once == 0 &&
         sum(c.errors, kStatusSlots) == 0 && sum(c.recv_errors, kStatusSlots) == 0 &&
         c.unmatched.load() == 0 && c.post_errors.load() == 0 && c.qps_abandoned.load() == 0 &&
         drain.bound == 0;
}

void Report::print_text(FILE* out) const {
  const Options& o = run.opts();
  const Counters& c = run.counters();
  std::fprintf(
      out,
      "emu-stress: api %s%s%s, thread mode %s, op %s, %u threads on %u QPs of %s%s, engine %s\n",
      uctlite::api_name(o.api), o.api == uctlite::Api::direct ? ", mmio " : "",
      o.api == uctlite::Api::direct ? uctlite::mmio_name(o.mmio) : "",
      uctlite::thread_mode_name(o.thread_mode), uctlite::op_name(o.op), o.threads, o.qps,
      o.device.c_str(), o.td ? " (thread domains)" : "", engine.c_str());
  double s = post_seconds > 0 ? post_seconds : 1e-9;
  uint64_t bytes = 0;
  for (size_t k = 0; k < o.sizes.size(); ++k) bytes += tally.posted_per_size[k] * o.sizes[k];
  std::fprintf(out, "posted %llu messages in %.3f s: %.0f messages/s, %.2f MB/s",
               (unsigned long long)tally.posted, post_seconds, tally.posted / s, bytes / s / 1e6);
  if (tally.unposted) std::fprintf(out, " (%llu not posted)", (unsigned long long)tally.unposted);
  std::fprintf(out, "\n");
  for (size_t k = 0; k < o.sizes.size(); ++k)
    std::fprintf(out, "  %5u B: %8llu messages, %8.2f MB/s\n", o.sizes[k],
                 (unsigned long long)tally.posted_per_size[k],
                 tally.posted_per_size[k] * o.sizes[k] / s / 1e6);
  std::fprintf(out,
               "completions: %llu ok, messages completed once %llu, more than once %llu, missing "
               "%llu, unmatched %llu\n",
               (unsigned long long)c.ok.load(), (unsigned long long)tally.once,
               (unsigned long long)tally.more_than_once, (unsigned long long)tally.missing,
               (unsigned long long)c.unmatched.load());
  for (uint32_t k = 1; k < kStatusSlots; ++k)
    if (c.errors[k].load())
      std::fprintf(out, "  error %s: %llu\n", status_name(k),
                   (unsigned long long)c.errors[k].load());
  if (o.op == uctlite::Op::send) {
    std::fprintf(out, "receives: %llu ok\n", (unsigned long long)c.received.load());
    for (uint32_t k = 1; k < kStatusSlots; ++k)
      if (c.recv_errors[k].load())
        std::fprintf(out, "  receive error %s: %llu\n", status_name(k),
                     (unsigned long long)c.recv_errors[k].load());
  }
  std::fprintf(out,
               "corruption: %llu corrupt messages, %llu corrupt bytes (%llu misplaced; found at "
               "completion %llu, "
               "at receive %llu, in the final sweep %llu); %llu verified\n",
               (unsigned long long)c.corrupt_messages.load(),
               (unsigned long long)c.corrupt_bytes.load(), (unsigned long long)c.misplaced.load(),
               (unsigned long long)c.found_at_completion.load(),
               (unsigned long long)c.found_at_receive.load(),
               (unsigned long long)c.found_in_sweep.load(), (unsigned long long)c.verified.load());
  if (c.qps_abandoned.load() || c.post_errors.load())
    std::fprintf(out, "QPs given up while posting: %llu; post errors: %llu\n",
                 (unsigned long long)c.qps_abandoned.load(),
                 (unsigned long long)c.post_errors.load());
  std::fprintf(out,
               "drain: %.1f ms; QPs complete %u, device idle with work missing %u, in error and "
               "flushed %u%s\n",
               drain.ms, drain.complete, drain.device_idle, drain.error_flushed,
               drain.bound ? ", STOPPED BY --drain-ms" : "");
  if (!races.available()) {
    std::fprintf(out, "race events: not available (not an emulated device)\n");
  } else {
    std::fprintf(out, "race events: %llu", (unsigned long long)races.total());
    for (uint32_t k = 1; k < EMUDV_RACE_KINDS; ++k)
      if (races.count(k))
        std::fprintf(out, ", %s %llu", race_kind_name(k), (unsigned long long)races.count(k));
    if (races.lost())
      std::fprintf(out, " (%llu overwritten before read)", (unsigned long long)races.lost());
    std::fprintf(out, "\n");
    for (const emudv_race& e : races.first())
      std::fprintf(out, "  %s qpn 0x%x register %d slot %u threads %u,%u -> %s\n", e.kind_name,
                   e.qpn, e.reg, e.slot, e.writer_tids[0], e.writer_tids[1], e.executed);
  }
  std::fprintf(out, "%s\n", clean() ? "clean" : "NOT CLEAN");
}

namespace {

// The run's configuration as the report's "config".
Json config_json(const Run& run, const std::string& engine) {
  const Options& o = run.opts();
  const bool direct = o.api == uctlite::Api::direct;
  Json j = {{"api", uctlite::api_name(o.api)},
            {"mmio", direct ? Json(uctlite::mmio_name(o.mmio)) : Json(nullptr)},
            {"stores", direct ? Json(o.plain_stores ? "plain" : "calls") : Json(nullptr)},
            {"thread_mode", uctlite::thread_mode_name(o.thread_mode)},
            {"op", uctlite::op_name(o.op)},
            {"device", o.device},
            {"threads", o.threads},
            {"qps", o.qps},
            {"td", o.td},
            {"sizes", o.sizes},
            {"count", o.count ? Json(o.count) : Json(nullptr)},
            {"duration_ms", o.duration_ms ? Json(o.duration_ms) : Json(nullptr)},
            {"engine", engine},
            {"max_inline", run.pairs().empty() ? 0 : run.pairs()[0]->ep->max_inline()},
            {"inline", !o.sge_only},
            {"slots_per_lane", run.slots_per_lane()}};
  return j;
}

// Counts per completion status, the successful one left out.
Json errors_json(const std::atomic<uint64_t>* by_status) {
  Json j = Json::object();
  for (uint32_t k = 1; k < kStatusSlots; ++k)
    if (by_status[k].load()) j[status_name(k)] = by_status[k].load();
  return j;
}

Json completions_json(const Counters& c, const Tally& tally) {
  return {{"ok", c.ok.load()},
          {"errors", errors_json(c.errors)},
          {"unmatched", c.unmatched.load()},
          {"messages_once", tally.once},
          {"messages_more_than_once", tally.more_than_once},
          {"extra_completions", tally.extra},
          {"messages_missing", tally.missing}};
}

Json corruption_json(const Counters& c) {
  return {{"corrupt_messages", c.corrupt_messages.load()},
          {"corrupt_bytes", c.corrupt_bytes.load()},
          {"misplaced_messages", c.misplaced.load()},
          {"found_at_completion", c.found_at_completion.load()},
          {"found_at_receive", c.found_at_receive.load()},
          {"found_in_sweep", c.found_in_sweep.load()},
          {"verified", c.verified.load()},
          {"unverifiable", c.unverifiable.load()},
          {"delivered_without_completion", c.delivered_without_completion.load()},
          {"overwritten_before_completion", c.overwritten_uncompleted.load()}};
}

// The race events: counts per kind, and over every event kept (up to 4096) how many of each
// kind name two distinct posting threads; the first ones as they were recorded.
Json races_json(const RaceCollector& races, const std::vector<uint32_t>& tids) {
  if (!races.available()) return nullptr;
  Json by_kind = Json::object(), two = Json::object(), checked = Json::object();
  for (uint32_t k = 1; k < EMUDV_RACE_KINDS; ++k) {
    by_kind[race_kind_name(k)] = races.count(k);
    two[race_kind_name(k)] = std::count_if(
        races.all().begin(), races.all().end(),
        [&](const emudv_race& e) { return e.kind == k && names_two_posters(e, tids); });
    checked[race_kind_name(k)] = std::count_if(races.all().begin(), races.all().end(),
                                               [k](const emudv_race& e) { return e.kind == k; });
  }
  Json first = Json::array();
  for (const emudv_race& e : races.first())
    first.push_back({{"seq", e.seq},
                     {"kind", e.kind_name ? e.kind_name : race_kind_name(e.kind)},
                     {"qpn", e.qpn},
                     {"context", e.context},
                     {"register", e.reg},
                     {"slot", e.slot},
                     {"writer_tids", {e.writer_tids[0], e.writer_tids[1]}},
                     {"values", {e.values[0], e.values[1]}},
                     {"executed", e.executed ? e.executed : ""}});
  return {{"total", races.total()},
          {"lost", races.lost()},
          {"by_kind", by_kind},
          {"checked", races.all().size()},
          {"naming_two_posting_threads", two},
          {"checked_by_kind", checked},
          {"first", first}};
}

// The whole report as JSON (docs/guides/stress.md lists the fields).
Json report_json(const Report& r) {
  const Options& o = r.run.opts();
  const Counters& c = r.run.counters();
  const double s = r.post_seconds > 0 ? r.post_seconds : 1e-9;
  uint64_t bytes = 0;
  Json per_size = Json::array();
  for (size_t k = 0; k < o.sizes.size(); ++k) {
    bytes += r.tally.posted_per_size[k] * o.sizes[k];
    per_size.push_back({{"size", o.sizes[k]},
                        {"posted", r.tally.posted_per_size[k]},
                        {"mb_per_s", r.tally.posted_per_size[k] * o.sizes[k] / s / 1e6}});
  }
  Json registers = Json::array();
  for (const auto& p : r.run.pairs()) registers.push_back(p->ep->register_index());
  return {{"config", config_json(r.run, r.engine)},
          {"posting_tids", r.run.tids()},
          {"registers", registers},
          {"elapsed_s", r.post_seconds},
          {"messages",
           {{"posted", r.tally.posted},
            {"not_posted", r.tally.unposted},
            {"per_second", r.tally.posted / s},
            {"mb_per_s", bytes / s / 1e6}}},
          {"per_size", per_size},
          {"completions", completions_json(c, r.tally)},
          {"receives", {{"ok", c.received.load()}, {"errors", errors_json(c.recv_errors)}}},
          {"corruption", corruption_json(c)},
          {"post_errors", c.post_errors.load()},
          {"qps_abandoned", c.qps_abandoned.load()},
          {"drain",
           {{"ms", r.drain.ms},
            {"complete", r.drain.complete},
            {"device_idle", r.drain.device_idle},
            {"error_flushed", r.drain.error_flushed},
            {"stopped_by_bound", r.drain.bound}}},
          {"races", races_json(r.races, r.run.tids())},
          {"clean", r.clean()}};
}

}  // namespace

bool Report::write_json(const std::string& path, std::string* err) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    *err = path + ": " + std::strerror(errno);
    return false;
  }
  std::fprintf(f, "%s\n",
               report_json(*this).dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  return std::fclose(f) == 0;
}

}  // namespace stress
