// SPDX-License-Identifier: BSD-2-Clause
// The trace-event JSON writer and the trace hash (emu/sched/trace.h).
#include "emu/sched/trace.h"

#include <algorithm>
#include <fstream>

#include "sched/json_text.h"

namespace emu::sched {

namespace {

constexpr int kPid = 1;

// tid 0 reads as the idle task in some viewers, so track k shows actor k - 1.
std::string track_of(ActorId actor) {
  return "\"pid\":" + std::to_string(kPid) + ",\"tid\":" + std::to_string(actor + 1);
}

std::string actor_name(const std::vector<std::string>& names, ActorId a) {
  return a < names.size() ? names[a] : "actor " + std::to_string(a);
}

// Every actor that is named or that appears, so no event sits on an unnamed track.
size_t actor_count(const TraceInput& in) {
  size_t n = in.actor_names.size();
  for (const TraceEvent& e : in.events) n = std::max<size_t>(n, e.actor + 1u);
  for (const TraceInstant& i : in.instants) n = std::max<size_t>(n, i.actor + 1u);
  return n;
}

void append_metadata(const TraceInput& in, std::vector<std::string>* out) {
  out->push_back("{\"ph\":\"M\",\"name\":\"process_name\"," + track_of(0) +
                 ",\"args\":{\"name\":\"rdmaemu schedule\"}}");
  for (size_t a = 0; a < actor_count(in); ++a) {
    const auto id = static_cast<ActorId>(a);
    out->push_back("{\"ph\":\"M\",\"name\":\"thread_name\"," + track_of(id) +
                   ",\"args\":{\"name\":" + json_quote(actor_name(in.actor_names, id)) + "}}");
    out->push_back("{\"ph\":\"M\",\"name\":\"thread_sort_index\"," + track_of(id) +
                   ",\"args\":{\"sort_index\":" + std::to_string(a) + "}}");
  }
}

std::string slice(const TraceEvent& e) {
  const std::string name = e.label ? e.label : "kind " + std::to_string(e.kind);
  return "{\"ph\":\"X\",\"name\":" + json_quote(name) + ",\"cat\":\"sched\"," + track_of(e.actor) +
         ",\"ts\":" + std::to_string(e.step) +
         ",\"dur\":1,\"args\":{\"step\":" + std::to_string(e.step) +
         ",\"kind\":" + std::to_string(e.kind) + ",\"addr\":" + json_hex(e.addr) +
         ",\"value\":" + json_hex(e.value) + "}}";
}

std::string instant(const TraceInstant& i) {
  return "{\"ph\":\"i\",\"s\":\"t\",\"name\":" + json_quote(i.name) + ",\"cat\":\"oracle\"," +
         track_of(i.actor) + ",\"ts\":" + std::to_string(i.step) +
         ",\"args\":{\"detail\":" + json_quote(i.detail) + "}}";
}

void hash_bytes(uint64_t* h, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) {
    *h ^= (v >> (8 * b)) & 0xff;
    *h *= 0x100000001b3ull;
  }
}

}  // namespace

std::string format_trace_json(const TraceInput& in) {
  std::vector<std::string> items;
  append_metadata(in, &items);
  for (const TraceEvent& e : in.events) items.push_back(slice(e));
  for (const TraceInstant& i : in.instants) items.push_back(instant(i));
  std::string out = "{\"traceEvents\":[\n";
  for (size_t k = 0; k < items.size(); ++k) out += items[k] + (k + 1 < items.size() ? ",\n" : "\n");
  return out + "]}\n";
}

bool write_trace_json(const std::string& path, const TraceInput& in) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << format_trace_json(in);
  f.close();
  return static_cast<bool>(f);
}

uint64_t trace_hash(const std::vector<TraceEvent>& events) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const TraceEvent& e : events) {
    hash_bytes(&h, e.step, sizeof e.step);
    hash_bytes(&h, e.actor, sizeof e.actor);
    hash_bytes(&h, e.kind, sizeof e.kind);
    hash_bytes(&h, e.addr, sizeof e.addr);
  }
  return h;
}

}  // namespace emu::sched
