// SPDX-License-Identifier: BSD-2-Clause
// Reading campaign totals back (emu/sched/seeds.h's parse_totals), for the step that merges shard
// results: nlohmann/json reads the text, and this file is strict about what it found in it (the
// six keys once each, unsigned counts, seeds as "0x..." strings, counts that agree).
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "emu/sched/seeds.h"
#include "sched/json_text.h"

namespace emu::sched {

namespace {

using nlohmann::json;

// Parses `text`; a discarded value when it is no JSON, or when any object in it names a key twice
// (the reader keeps the last of a repeated key silently; a merge must not).
json parse_refusing_repeated_keys(std::string_view text) {
  std::vector<std::set<std::string>> keys_of_open_objects;
  bool repeated = false;
  auto watch = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) keys_of_open_objects.pop_back();
    if (event == json::parse_event_t::key)
      repeated |= !keys_of_open_objects.back().insert(parsed.get<std::string>()).second;
    return true;
  };
  json j = json::parse(text.begin(), text.end(), watch, /*allow_exceptions=*/false);
  return repeated ? json(json::value_t::discarded) : j;
}

bool read_count(const json& j, const char* key, uint64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *v = it->get<uint64_t>();
  return true;
}

bool read_hex(const json& j, const char* key, uint64_t* v) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  std::string_view s = it->get_ref<const std::string&>();
  if (s.substr(0, 2) != "0x") return false;
  s.remove_prefix(2);
  return read_uint(&s, v, 16) && s.empty();
}

bool read_first_failing_run(const json& j, uint64_t* run) {
  auto it = j.find("first_failing_run");
  if (it != j.end() && it->is_null()) {
    *run = kNoRun;
    return true;
  }
  return read_count(j, "first_failing_run", run) && *run != kNoRun;
}

bool read_signatures(const json& j, std::map<std::string, uint64_t>* out) {
  auto it = j.find("failures_by_signature");
  if (it == j.end() || !it->is_object()) return false;
  for (const auto& [signature, n] : it->items()) {
    if (!n.is_number_unsigned()) return false;
    (*out)[signature] = n.get<uint64_t>();
  }
  return true;
}

// The totals a merge step may trust: the counts agree with each other.
bool consistent(const CampaignTotals& t) {
  uint64_t by_signature = 0;
  for (const auto& entry : t.failures_by_signature) by_signature += entry.second;
  return by_signature == t.failures && t.failures <= t.schedules &&
         (t.failures == 0) == (t.first_failing_run == kNoRun);
}

}  // namespace

bool parse_totals(std::string_view text, CampaignTotals* out) {
  constexpr size_t kKeys = 6;
  const json j = parse_refusing_repeated_keys(text);
  CampaignTotals t;
  if (!j.is_object() || j.size() != kKeys || !read_hex(j, "master_seed", &t.master_seed) ||
      !read_count(j, "schedules", &t.schedules) || !read_count(j, "failures", &t.failures) ||
      !read_first_failing_run(j, &t.first_failing_run) ||
      !read_hex(j, "first_failing_seed", &t.first_failing_seed) ||
      !read_signatures(j, &t.failures_by_signature) || !consistent(t))
    return false;
  *out = std::move(t);
  return true;
}

}  // namespace emu::sched
