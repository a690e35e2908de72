// SPDX-License-Identifier: BSD-2-Clause
// Error injection rules: their text form, their place in the segment, and the decisions the engine
// (a send WR) and the provider (a creation verb) ask of them.
#include "emu/inject.h"

#include <strings.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "emu/config.h"
#include "emu/wqe.h"
#include "faults/rule_text.h"

namespace emu {
namespace {

struct Named {
  const char* name;
  int value;
};

// ibv_wc_status names (without IBV_WC_) to mlx5 syndromes, which the provider's poll turns back
// into those statuses. general_err has no mlx5 syndrome: any unknown one reads as it.
const Named kStatuses[] = {
    {"loc_len_err", kSynLocalLength},
    {"loc_qp_op_err", kSynLocalQpOp},
    {"loc_prot_err", kSynLocalProt},
    {"wr_flush_err", kSynWrFlush},
    {"mw_bind_err", kSynMwBind},
    {"bad_resp_err", kSynBadResp},
    {"loc_access_err", kSynLocalAccess},
    {"rem_inv_req_err", kSynRemoteInvalReq},
    {"rem_access_err", kSynRemoteAccess},
    {"rem_op_err", kSynRemoteOp},
    {"retry_exc_err", kSynRetryExc},
    {"rnr_retry_exc_err", kSynRnrRetryExc},
    {"general_err", 0xff},
};

// ibv_event_type names (without IBV_EVENT_).
const Named kEvents[] = {
    {"cq_err", kEvCqErr},
    {"qp_fatal", kEvQpFatal},
    {"qp_req_err", kEvQpReqErr},
    {"qp_access_err", kEvQpAccessErr},
    {"comm_est", kEvCommEst},
    {"sq_drained", kEvSqDrained},
    {"path_mig", kEvPathMig},
    {"path_mig_err", kEvPathMigErr},
    {"device_fatal", kEvDeviceFatal},
    {"port_active", kEvPortActive},
    {"port_err", kEvPortErr},
    {"lid_change", kEvLidChange},
    {"pkey_change", kEvPkeyChange},
    {"sm_change", kEvSmChange},
    {"srq_err", kEvSrqErr},
    {"srq_limit_reached", kEvSrqLimit},
    {"qp_last_wqe_reached", kEvLastWqe},
    {"client_reregister", kEvClientReregister},
    {"gid_change", kEvGidChange},
};

const char* const kVerbNames[kInjectVerbs] = {"",          "reg_mr",     "create_qp",
                                              "create_cq", "create_srq", "alloc_pd"};
const char* const kOpNames[] = {"any", "send", "write", "read", "atomic"};
constexpr int kOps = sizeof kOpNames / sizeof kOpNames[0];

const Named kErrnos[] = {{"ENOMEM", ENOMEM}, {"EINVAL", EINVAL}, {"EAGAIN", EAGAIN},
                         {"ENOSPC", ENOSPC}, {"EPERM", EPERM},   {"EACCES", EACCES},
                         {"EBUSY", EBUSY},   {"EFAULT", EFAULT}, {"EOPNOTSUPP", EOPNOTSUPP},
                         {"ENOSYS", ENOSYS}, {"EIO", EIO},       {"ENODEV", ENODEV}};

template <size_t N>
bool lookup(const Named (&table)[N], std::string_view name, std::string_view prefix, int* v) {
  if (name.size() > prefix.size() && strncasecmp(name.data(), prefix.data(), prefix.size()) == 0)
    name.remove_prefix(prefix.size());
  for (const Named& e : table)
    if (name.size() == std::strlen(e.name) && strncasecmp(name.data(), e.name, name.size()) == 0) {
      *v = e.value;
      return true;
    }
  return false;
}

bool parse_u32(std::string_view s, uint32_t* v) {
  std::string t(s);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(t.c_str(), &end, 0);
  if (errno || *end || x > 0xffffffffull) return false;
  *v = static_cast<uint32_t>(x);
  return true;
}

int index_of(std::string_view word, const char* const* names, int n) {
  for (int i = 1; i < n; ++i)
    if (word == names[i]) return i;
  return -1;
}

bool parse_key(std::string_view key, std::string_view val, InjectRuleSpec* r) {
  int v = 0;
  bool wc = r->kind == kInjectWc;
  if (key == "nth") return parse_u32(val, &r->nth);
  if (wc && key == "status" && lookup(kStatuses, val, "IBV_WC_", &v))
    return r->syndrome = static_cast<uint8_t>(v), true;
  if (wc && key == "qp") return parse_u32(val, &r->qpn) || (val == "any" && (r->qpn = 0, true));
  if (wc && key == "op" && (v = index_of(val, kOpNames, kOps)) > 0)
    return r->op = static_cast<uint8_t>(v), true;
  if (!wc && key == "verb" && (v = index_of(val, kVerbNames, kInjectVerbs)) > 0)
    return r->op = static_cast<uint8_t>(v), true;
  uint32_t n = 0;
  if (!wc && key == "errno" && (lookup(kErrnos, val, "", &v) || (parse_u32(val, &n) && n > 0)))
    return r->err = v ? v : static_cast<int32_t>(n), true;
  return false;
}

// One "KIND:k=v,..." into out.
bool parse_rule(std::string_view text, InjectRules* out, std::string* err) {
  size_t colon = text.find(':');
  std::string_view kind = text.substr(0, colon);
  InjectRuleSpec r;
  r.kind = kind == "wc" ? kInjectWc : kind == "fail" ? kInjectFail : 0;
  if (!r.kind) {
    *err = "unknown injection '" + std::string(kind) + "'";
    return false;
  }
  if (out->n == kMaxInjectRules) {
    *err = "more than " + std::to_string(kMaxInjectRules) + " rules";
    return false;
  }
  std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  auto set = [&](std::string_view key, std::string_view val) { return parse_key(key, val, &r); };
  if (!for_each_setting(text, rest, err, set)) return false;
  if (r.kind == kInjectWc ? r.syndrome == 0 : (r.op == 0 || r.err == 0)) {
    *err = std::string("'") + std::string(text) +
           (r.kind == kInjectWc ? "' needs status=" : "' needs verb= and errno=");
    return false;
  }
  out->rule[out->n++] = r;
  return true;
}

// The class of a send WQE's opcode as a rule's op names it (0: none of them).
uint8_t op_class(uint8_t wqe_opcode) {
  switch (wqe_opcode) {
    case kOpSend:
    case kOpSendImm:
    case kOpSendInval:
      return kFopSend;
    case kOpRdmaWrite:
    case kOpRdmaWriteImm:
    case kOpAtomicWrite:
      return kFopWrite;
    case kOpRdmaRead:
      return kFopRead;
    case kOpAtomicCs:
    case kOpAtomicFa:
      return kFopAtomic;
    default:
      return 0;
  }
}

// Counts a match of rule r and says whether it is the one the rule acts on.
bool counts_to_fire(InjectRule& r) {
  uint32_t seen = r.seen.fetch_add(1, std::memory_order_relaxed) + 1;
  if (r.nth && seen != r.nth) return false;
  r.fired.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool inject_status_syndrome(std::string_view name, uint8_t* syndrome) {
  int v = 0;
  if (!lookup(kStatuses, name, "IBV_WC_", &v)) return false;
  *syndrome = static_cast<uint8_t>(v);
  return true;
}

const char* inject_syndrome_name(uint8_t syndrome) {
  for (const Named& e : kStatuses)
    if (e.value == syndrome) return e.name;
  return "general_err";
}

bool inject_event_type(std::string_view name, uint32_t* type) {
  int v = 0;
  if (!lookup(kEvents, name, "IBV_EVENT_", &v)) return false;
  *type = static_cast<uint32_t>(v);
  return true;
}

Status inject_parse(std::string_view text, InjectRules* out, std::string* err) {
  *out = InjectRules{};
  bool ok =
      for_each_part(text, ';', [&](std::string_view part) { return parse_rule(part, out, err); });
  return ok ? Status::ok : Status::invalid;
}

std::string inject_format(const InjectRules& rules) {
  std::string s;
  char buf[160];
  for (uint32_t i = 0; i < rules.n; ++i) {
    const InjectRuleSpec& r = rules.rule[i];
    if (i) s += ";";
    if (r.kind == kInjectWc) {
      std::snprintf(buf, sizeof buf, "wc:status=%s,nth=%u", inject_syndrome_name(r.syndrome),
                    r.nth);
      s += buf;
      if (r.qpn) s += ",qp=" + std::to_string(r.qpn);
      if (r.op && r.op < kOps) s += std::string(",op=") + kOpNames[r.op];
      continue;
    } else {
      std::snprintf(buf, sizeof buf, "fail:verb=%s,errno=%d,nth=%u",
                    kVerbNames[r.op < kInjectVerbs ? r.op : 0], r.err, r.nth);
    }
    s += buf;
  }
  return s;
}

void inject_set(Segment* seg, const InjectRules& rules) {
  InjectTable& t = seg->hdr()->inject;
  // Writers are rare (a person or a test); the seqlock keeps a reader from acting on half a table.
  t.seq.fetch_add(1, std::memory_order_acq_rel);
  t.wc_rules.store(0, std::memory_order_release);
  t.verb_rules.store(0, std::memory_order_release);
  t.nrules.store(0, std::memory_order_release);
  uint32_t wc = 0, verbs = 0;
  for (uint32_t i = 0; i < kMaxInjectRules; ++i) {
    InjectRule& r = t.rule[i];
    const InjectRuleSpec& s = rules.rule[i];
    r.kind = i < rules.n ? s.kind : 0;
    r.op = s.op;
    r.syndrome = s.syndrome;
    r.qpn = s.qpn;
    r.nth = s.nth;
    r.err = s.err;
    r.seen.store(0, std::memory_order_relaxed);
    r.fired.store(0, std::memory_order_relaxed);
    wc += r.kind == kInjectWc;
    verbs += r.kind == kInjectFail;
  }
  t.nrules.store(rules.n, std::memory_order_release);
  t.wc_rules.store(wc, std::memory_order_release);
  t.verb_rules.store(verbs, std::memory_order_release);
  t.seq.fetch_add(1, std::memory_order_acq_rel);
}

void inject_clear(Segment* seg) { inject_set(seg, InjectRules{}); }

void inject_from_env(Segment* seg) {
  static std::once_flag once;
  std::call_once(once, [seg] {
    const char* text = std::getenv("EMU_INJECT");
    if (!text || !*text) return;
    InjectRules rules;
    std::string err;
    if (inject_parse(text, &rules, &err) != Status::ok)
      log("EMU_INJECT: %s (ignored)", err.c_str());
    else if (inject_format(rules) != inject_format(inject_get(seg)))
      inject_set(seg, rules);
  });
}

InjectRules inject_get(const Segment* seg) {
  const InjectTable& t = seg->hdr()->inject;
  InjectRules out;
  seqlock_read(t.seq, [&] {
    out.n = t.nrules.load(std::memory_order_acquire);
    for (uint32_t i = 0; i < out.n && i < kMaxInjectRules; ++i) {
      const InjectRule& r = t.rule[i];
      out.rule[i] = InjectRuleSpec{r.kind, r.op, r.syndrome, r.qpn, r.nth, r.err};
    }
  });
  return out;
}

void inject_fired(const Segment* seg, uint32_t fired[kMaxInjectRules]) {
  for (uint32_t i = 0; i < kMaxInjectRules; ++i)
    fired[i] = seg->hdr()->inject.rule[i].fired.load(std::memory_order_relaxed);
}

// Rules are read in place: a table replaced while a WR is judged may judge that one WR by either
// table (who sets rules mid-traffic accepts that), never by a rule half written for the kind.
bool inject_wc_decide(Segment* seg, uint32_t qpn, uint8_t wqe_opcode, uint8_t* syndrome) {
  InjectTable& t = seg->hdr()->inject;
  uint32_t n = t.nrules.load(std::memory_order_acquire);
  uint8_t cls = op_class(wqe_opcode);
  for (uint32_t i = 0; i < n && i < kMaxInjectRules; ++i) {
    InjectRule& r = t.rule[i];
    if (r.kind != kInjectWc || (r.qpn && r.qpn != qpn) || (r.op && r.op != cls)) continue;
    if (!counts_to_fire(r)) continue;
    *syndrome = r.syndrome;
    return true;
  }
  return false;
}

int inject_verb_decide(Segment* seg, InjectVerb verb) {
  InjectTable& t = seg->hdr()->inject;
  uint32_t n = t.nrules.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n && i < kMaxInjectRules; ++i) {
    InjectRule& r = t.rule[i];
    if (r.kind != kInjectFail || r.op != verb) continue;
    if (counts_to_fire(r)) return r.err;
  }
  return 0;
}

}  // namespace emu
