// SPDX-License-Identifier: BSD-2-Clause
// Fault rules: their text form, their place in the segment, and the decision per packet.
#include "emu/faults.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "faults/rule_text.h"

namespace emu {
namespace {

const char* const kKindNames[kFaultKinds] = {"none", "drop", "dup", "reorder", "delay", "corrupt"};
const char* const kOpNames[] = {"any", "send", "write", "read", "atomic", "ack", "ud"};
constexpr int kOps = sizeof kOpNames / sizeof kOpNames[0];

int name_index(std::string_view word, const char* const* names, int n) {
  for (int i = 0; i < n; ++i)
    if (word == names[i]) return i;
  return -1;
}

bool parse_u64(std::string_view s, uint64_t* v) {
  std::string t(s);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoull(t.c_str(), &end, 0);
  return errno == 0 && end && *end == '\0';
}

bool parse_key(std::string_view key, std::string_view val, FaultRule* r) {
  uint64_t v = 0;
  if (key == "p") {
    std::string t(val);
    char* end = nullptr;
    double p = std::strtod(t.c_str(), &end);
    if (t.empty() || *end || !(p >= 0.0 && p <= 1.0)) return false;
    double scaled = p * 4294967296.0;
    r->threshold = scaled >= 4294967295.0 ? 0xffffffffu : static_cast<uint32_t>(scaled);
    return true;
  }
  if (key == "op") {
    int i = name_index(val, kOpNames, kOps);
    r->op = static_cast<uint8_t>(i);
    return i >= 0;
  }
  if (!parse_u64(val, &v) || v > 0xffffffffull) return false;
  if (key == "nth" && v > 0)
    r->nth = static_cast<uint32_t>(v);
  else if (key == "times" && v > 0)
    r->times = static_cast<uint32_t>(v);
  else if (key == "qp")
    r->qpn = static_cast<uint32_t>(v);
  else if (key == "dev")
    r->dev = static_cast<uint32_t>(v), r->any_dev = 0;
  else
    return false;
  return true;
}

// One "KIND[:k=v,...]" (or "seed=S") into out.
bool parse_rule(std::string_view text, FaultRules* out, std::string* err) {
  if (text.substr(0, 5) == "seed=") {
    if (parse_u64(text.substr(5), &out->seed)) return true;
    *err = "bad seed in '" + std::string(text) + "'";
    return false;
  }
  size_t colon = text.find(':');
  int kind = name_index(text.substr(0, colon), kKindNames, kFaultKinds);
  if (kind <= 0) {
    *err = "unknown fault '" + std::string(text.substr(0, colon)) + "'";
    return false;
  }
  if (out->n == kMaxFaultRules) {
    *err = "more than " + std::to_string(kMaxFaultRules) + " rules";
    return false;
  }
  FaultRule r{};
  r.kind = static_cast<uint8_t>(kind);
  r.any_dev = 1;
  r.times = 1;
  std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  auto set = [&](std::string_view key, std::string_view val) { return parse_key(key, val, &r); };
  if (!for_each_setting(text, rest, err, set)) return false;
  out->rule[out->n++] = r;
  return true;
}

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool rule_matches(const FaultRule& r, const PacketKey& k) {
  if (!r.any_dev && r.dev != k.dev) return false;
  if (r.qpn && r.qpn != k.qpn) return false;
  return r.op == kFopAny || r.op == k.op;
}

}  // namespace

const char* fault_name(FaultKind k) { return k < kFaultKinds ? kKindNames[k] : "?"; }

Status faults_parse(std::string_view text, FaultRules* out, std::string* err) {
  *out = FaultRules{};
  bool ok =
      for_each_part(text, ';', [&](std::string_view part) { return parse_rule(part, out, err); });
  return ok ? Status::ok : Status::invalid;
}

std::string faults_format(const FaultRules& rules) {
  std::string s = "seed=" + std::to_string(rules.seed);
  char buf[160];
  for (uint32_t i = 0; i < rules.n; ++i) {
    const FaultRule& r = rules.rule[i];
    s += ";";
    s += kKindNames[r.kind];
    if (r.nth)
      std::snprintf(buf, sizeof buf, ":nth=%u,times=%u", r.nth, r.times);
    else
      std::snprintf(buf, sizeof buf, ":p=%.9g", r.threshold / 4294967296.0);
    s += buf;
    if (r.qpn) s += ",qp=" + std::to_string(r.qpn);
    if (!r.any_dev) s += ",dev=" + std::to_string(r.dev);
    if (r.op != kFopAny) s += std::string(",op=") + kOpNames[r.op];
  }
  return s;
}

void faults_set(Segment* seg, const FaultRules& rules) {
  FaultTable& t = seg->hdr()->faults;
  // Writers are rare (a person or a test): one at a time is their business; the seqlock keeps a
  // reader from acting on half a table.
  t.seq.fetch_add(1, std::memory_order_acq_rel);
  t.nrules.store(0, std::memory_order_release);
  t.seed = rules.seed;
  std::memcpy(t.rules, rules.rule, sizeof t.rules);
  for (auto& c : t.injected) c.store(0, std::memory_order_relaxed);
  t.retransmitted.store(0, std::memory_order_relaxed);
  t.naks.store(0, std::memory_order_relaxed);
  t.timeouts.store(0, std::memory_order_relaxed);
  t.nrules.store(rules.n, std::memory_order_release);
  t.seq.fetch_add(1, std::memory_order_acq_rel);
}

Status faults_set(Segment* seg, std::string_view text, std::string* err) {
  FaultRules rules;
  Status st = faults_parse(text, &rules, err);
  if (st == Status::ok) faults_set(seg, rules);
  return st;
}

void faults_clear(Segment* seg) { faults_set(seg, FaultRules{}); }

FaultRules faults_get(const Segment* seg) {
  const FaultTable& t = seg->hdr()->faults;
  FaultRules r;
  seqlock_read(t.seq, [&] {
    r.n = t.nrules.load(std::memory_order_acquire);
    r.seed = t.seed;
    std::memcpy(r.rule, t.rules, sizeof r.rule);
  });
  return r;
}

FaultCounters faults_counters(const Segment* seg) {
  const FaultTable& t = seg->hdr()->faults;
  FaultCounters c{};
  for (int i = 0; i < kFaultKinds; ++i) c.injected[i] = t.injected[i].load();
  c.retransmitted = t.retransmitted.load();
  c.naks = t.naks.load();
  c.timeouts = t.timeouts.load();
  return c;
}

FaultKind fault_decide(const FaultRules& rules, const PacketKey& k) {
  for (uint32_t i = 0; i < rules.n; ++i) {
    const FaultRule& r = rules.rule[i];
    if (!rule_matches(r, k)) continue;
    if (r.nth) {
      if (k.number == r.nth && k.attempt < r.times) return static_cast<FaultKind>(r.kind);
      continue;
    }
    uint64_t h = mix(rules.seed ^ mix(i + 1));
    h = mix(h ^ k.qpn);
    h = mix(h ^ (uint64_t{k.psn} << 8) ^ k.op);
    h = mix(h ^ k.attempt);
    if (static_cast<uint32_t>(h >> 32) < r.threshold) return static_cast<FaultKind>(r.kind);
  }
  return kFaultNone;
}

}  // namespace emu
