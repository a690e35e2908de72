// SPDX-License-Identifier: BSD-2-Clause
// Reading campaign totals back (emu/sched/seeds.h's parse_totals): a strict reader of the one JSON
// object format_totals writes, for the step that merges shard results.
#include "emu/sched/seeds.h"
#include "sched/json_text.h"

namespace emu::sched {

namespace {

bool append_utf8(uint64_t cp, std::string* s) {
  if (cp >= 0xd800 && cp <= 0xdfff) return false;  // surrogate pairs: never written by us
  if (cp < 0x80) {
    *s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *s += static_cast<char>(0xc0 | (cp >> 6));
    *s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *s += static_cast<char>(0xe0 | (cp >> 12));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return true;
}

class JsonCursor {
 public:
  explicit JsonCursor(std::string_view t) : t_(t) {}

  bool eat(char c) {
    skip_space();
    if (t_.empty() || t_[0] != c) return false;
    t_.remove_prefix(1);
    return true;
  }
  bool at_end() {
    skip_space();
    return t_.empty();
  }
  bool number(uint64_t* v) {
    skip_space();
    return read_uint(&t_, v, 10);
  }
  bool null() {
    skip_space();
    if (t_.substr(0, 4) != "null") return false;
    t_.remove_prefix(4);
    return true;
  }
  bool hex_string(uint64_t* v) {
    std::string s;
    if (!string(&s) || s.substr(0, 2) != "0x") return false;
    std::string_view digits = std::string_view(s).substr(2);
    return read_uint(&digits, v, 16) && digits.empty();
  }
  bool string(std::string* s) {
    if (!eat('"')) return false;
    s->clear();
    while (!t_.empty()) {
      const char c = take();
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        *s += c;
      } else if (!escape(s)) {
        return false;
      }
    }
    return false;
  }

 private:
  char take() {
    const char c = t_[0];
    t_.remove_prefix(1);
    return c;
  }
  void skip_space() {
    while (!t_.empty() && (t_[0] == ' ' || t_[0] == '\n' || t_[0] == '\t' || t_[0] == '\r'))
      t_.remove_prefix(1);
  }
  bool escape(std::string* s) {
    if (t_.empty()) return false;
    const char e = take();
    switch (e) {
      case '"':
      case '\\':
      case '/':
        *s += e;
        return true;
      case 'b':
        *s += '\b';
        return true;
      case 'f':
        *s += '\f';
        return true;
      case 'n':
        *s += '\n';
        return true;
      case 'r':
        *s += '\r';
        return true;
      case 't':
        *s += '\t';
        return true;
      case 'u':
        break;
      default:
        return false;
    }
    std::string_view hex = t_.substr(0, 4);
    uint64_t cp = 0;
    if (hex.size() != 4 || !read_uint(&hex, &cp, 16) || !hex.empty()) return false;
    t_.remove_prefix(4);
    return append_utf8(cp, s);
  }

  std::string_view t_;
};

bool read_signatures(JsonCursor& c, std::map<std::string, uint64_t>* out) {
  if (!c.eat('{')) return false;
  if (c.eat('}')) return true;
  do {
    std::string signature;
    uint64_t n = 0;
    if (!c.string(&signature) || !c.eat(':') || !c.number(&n) || out->count(signature))
      return false;
    (*out)[signature] = n;
  } while (c.eat(','));
  return c.eat('}');
}

bool read_first_failing_run(JsonCursor& c, uint64_t* run) {
  if (c.null()) {
    *run = kNoRun;
    return true;
  }
  return c.number(run) && *run != kNoRun;
}

// Reads the value of `key` into *t; false on an unknown key or a malformed value.
bool read_field(JsonCursor& c, const std::string& key, CampaignTotals* t) {
  if (key == "master_seed") return c.hex_string(&t->master_seed);
  if (key == "schedules") return c.number(&t->schedules);
  if (key == "failures") return c.number(&t->failures);
  if (key == "first_failing_run") return read_first_failing_run(c, &t->first_failing_run);
  if (key == "first_failing_seed") return c.hex_string(&t->first_failing_seed);
  if (key == "failures_by_signature") return read_signatures(c, &t->failures_by_signature);
  return false;
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
  JsonCursor c(text);
  CampaignTotals t;
  std::map<std::string, int> seen;
  if (!c.eat('{')) return false;
  do {
    std::string key;
    if (!c.string(&key) || !c.eat(':') || seen[key]++ || !read_field(c, key, &t)) return false;
  } while (c.eat(','));
  if (!c.eat('}') || !c.at_end() || seen.size() != kKeys || !consistent(t)) return false;
  *out = std::move(t);
  return true;
}

}  // namespace emu::sched
