// SPDX-License-Identifier: BSD-2-Clause
#include "report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

namespace stress {
namespace {

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

// A small JSON builder: values are appended in order; commas are placed by depth.
class Json {
 public:
  Json& open(char c) {
    sep();
    out_ += c;
    first_.push_back(true);
    return *this;
  }
  Json& close(char c) {
    out_ += c;
    first_.pop_back();
    return *this;
  }
  Json& key(const char* k) {
    sep();
    out_ += '"';
    out_ += k;
    out_ += "\":";
    after_key_ = true;
    return *this;
  }
  Json& str(const std::string& s) {
    sep();
    out_ += '"';
    for (char ch : s) {
      if (ch == '"' || ch == '\\') out_ += '\\';
      out_ += ch;
    }
    out_ += '"';
    return *this;
  }
  Json& num(double v) {
    sep();
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    out_ += b;
    return *this;
  }
  Json& u(uint64_t v) {
    sep();
    out_ += std::to_string(v);
    return *this;
  }
  Json& i(int64_t v) {
    sep();
    out_ += std::to_string(v);
    return *this;
  }
  Json& boolean(bool b) {
    sep();
    out_ += b ? "true" : "false";
    return *this;
  }
  Json& null() {
    sep();
    out_ += "null";
    return *this;
  }
  const std::string& text() const { return out_; }

 private:
  void sep() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

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

bool Report::write_json(const std::string& path, std::string* err) const {
  const Options& o = run.opts();
  const Counters& c = run.counters();
  Json j;
  j.open('{');
  j.key("config").open('{');
  j.key("api").str(uctlite::api_name(o.api));
  j.key("mmio");
  if (o.api == uctlite::Api::direct)
    j.str(uctlite::mmio_name(o.mmio));
  else
    j.null();
  j.key("stores");
  if (o.api == uctlite::Api::direct)
    j.str(o.plain_stores ? "plain" : "calls");
  else
    j.null();
  j.key("thread_mode").str(uctlite::thread_mode_name(o.thread_mode));
  j.key("op").str(uctlite::op_name(o.op));
  j.key("device").str(o.device);
  j.key("threads").u(o.threads);
  j.key("qps").u(o.qps);
  j.key("td").boolean(o.td);
  j.key("sizes").open('[');
  for (uint32_t sz : o.sizes) j.u(sz);
  j.close(']');
  j.key("count");
  if (o.count)
    j.u(o.count);
  else
    j.null();
  j.key("duration_ms");
  if (o.duration_ms)
    j.u(o.duration_ms);
  else
    j.null();
  j.key("engine").str(engine);
  j.key("max_inline").u(run.pairs().empty() ? 0 : run.pairs()[0]->ep->max_inline());
  j.key("inline").boolean(!o.sge_only);
  j.key("slots_per_lane").u(run.slots_per_lane());
  j.close('}');

  j.key("posting_tids").open('[');
  for (uint32_t t : run.tids()) j.u(t);
  j.close(']');
  j.key("registers").open('[');
  for (const auto& p : run.pairs()) j.i(p->ep->register_index());
  j.close(']');

  double s = post_seconds > 0 ? post_seconds : 1e-9;
  uint64_t bytes = 0;
  for (size_t k = 0; k < o.sizes.size(); ++k) bytes += tally.posted_per_size[k] * o.sizes[k];
  j.key("elapsed_s").num(post_seconds);
  j.key("messages").open('{');
  j.key("posted").u(tally.posted);
  j.key("not_posted").u(tally.unposted);
  j.key("per_second").num(tally.posted / s);
  j.key("mb_per_s").num(bytes / s / 1e6);
  j.close('}');
  j.key("per_size").open('[');
  for (size_t k = 0; k < o.sizes.size(); ++k) {
    j.open('{');
    j.key("size").u(o.sizes[k]);
    j.key("posted").u(tally.posted_per_size[k]);
    j.key("mb_per_s").num(tally.posted_per_size[k] * o.sizes[k] / s / 1e6);
    j.close('}');
  }
  j.close(']');

  j.key("completions").open('{');
  j.key("ok").u(c.ok.load());
  j.key("errors").open('{');
  for (uint32_t k = 1; k < kStatusSlots; ++k)
    if (c.errors[k].load()) j.key(status_name(k)).u(c.errors[k].load());
  j.close('}');
  j.key("unmatched").u(c.unmatched.load());
  j.key("messages_once").u(tally.once);
  j.key("messages_more_than_once").u(tally.more_than_once);
  j.key("extra_completions").u(tally.extra);
  j.key("messages_missing").u(tally.missing);
  j.close('}');
  j.key("receives").open('{');
  j.key("ok").u(c.received.load());
  j.key("errors").open('{');
  for (uint32_t k = 1; k < kStatusSlots; ++k)
    if (c.recv_errors[k].load()) j.key(status_name(k)).u(c.recv_errors[k].load());
  j.close('}');
  j.close('}');

  j.key("corruption").open('{');
  j.key("corrupt_messages").u(c.corrupt_messages.load());
  j.key("corrupt_bytes").u(c.corrupt_bytes.load());
  j.key("misplaced_messages").u(c.misplaced.load());
  j.key("found_at_completion").u(c.found_at_completion.load());
  j.key("found_at_receive").u(c.found_at_receive.load());
  j.key("found_in_sweep").u(c.found_in_sweep.load());
  j.key("verified").u(c.verified.load());
  j.key("unverifiable").u(c.unverifiable.load());
  j.key("delivered_without_completion").u(c.delivered_without_completion.load());
  j.key("overwritten_before_completion").u(c.overwritten_uncompleted.load());
  j.close('}');
  j.key("post_errors").u(c.post_errors.load());
  j.key("qps_abandoned").u(c.qps_abandoned.load());
  j.key("drain").open('{');
  j.key("ms").num(drain.ms);
  j.key("complete").u(drain.complete);
  j.key("device_idle").u(drain.device_idle);
  j.key("error_flushed").u(drain.error_flushed);
  j.key("stopped_by_bound").u(drain.bound);
  j.close('}');

  j.key("races");
  if (!races.available()) {
    j.null();
  } else {
    j.open('{');
    j.key("total").u(races.total());
    j.key("lost").u(races.lost());
    j.key("by_kind").open('{');
    for (uint32_t k = 1; k < EMUDV_RACE_KINDS; ++k) j.key(race_kind_name(k)).u(races.count(k));
    j.close('}');
    // Over every event kept (up to 4096): per kind, how many name two distinct posting threads.
    uint64_t two[EMUDV_RACE_KINDS] = {};
    for (const emudv_race& e : races.all())
      if (e.kind < EMUDV_RACE_KINDS) two[e.kind] += names_two_posters(e, run.tids());
    j.key("checked").u(races.all().size());
    j.key("naming_two_posting_threads").open('{');
    for (uint32_t k = 1; k < EMUDV_RACE_KINDS; ++k) j.key(race_kind_name(k)).u(two[k]);
    j.close('}');
    j.key("checked_by_kind").open('{');
    for (uint32_t k = 1; k < EMUDV_RACE_KINDS; ++k)
      j.key(race_kind_name(k))
          .u(static_cast<uint64_t>(
              std::count_if(races.all().begin(), races.all().end(),
                            [k](const emudv_race& e) { return e.kind == k; })));
    j.close('}');
    j.key("first").open('[');
    for (const emudv_race& e : races.first()) {
      j.open('{');
      j.key("seq").u(e.seq);
      j.key("kind").str(e.kind_name ? e.kind_name : race_kind_name(e.kind));
      j.key("qpn").u(e.qpn);
      j.key("context").i(e.context);
      j.key("register").i(e.reg);
      j.key("slot").u(e.slot);
      j.key("writer_tids").open('[').u(e.writer_tids[0]).u(e.writer_tids[1]).close(']');
      j.key("values").open('[').u(e.values[0]).u(e.values[1]).close(']');
      j.key("executed").str(e.executed ? e.executed : "");
      j.close('}');
    }
    j.close(']');
    j.close('}');
  }
  j.key("clean").boolean(clean());
  j.close('}');

  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    *err = path + ": " + std::strerror(errno);
    return false;
  }
  std::fprintf(f, "%s\n", j.text().c_str());
  return std::fclose(f) == 0;
}

}  // namespace stress
