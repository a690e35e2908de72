// SPDX-License-Identifier: BSD-2-Clause
// The one program-wide run of a process (emu/sched/program.h).
#include "emu/sched/program.h"

#include <cstdlib>
#include <memory>

#include "sched/json_text.h"
#include "sched/run.h"

namespace emu::sched::program {
namespace {

struct ProgramRun {
  Spec spec;
  StuckHandler stuck;
  std::unique_ptr<Strategy> strategy;
  std::unique_ptr<Run> run;
  uint32_t threads = 0;
};
ProgramRun* g_run = nullptr;  // set before main; touched only under the baton

bool parse_param(std::string_view item, Spec* out) {
  size_t eq = item.find('=');
  if (eq == std::string_view::npos) return false;
  std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
  char* end = nullptr;
  uint64_t v = std::strtoull(value.c_str(), &end, 0);
  if (value.empty() || *end) return false;
  if (key == "seed")
    out->seed = v;
  else if (key == "depth" && v >= 1 && v <= 3)
    out->depth = static_cast<uint32_t>(v);
  else if (key == "k" && v >= 1 && v <= 1'000'000'000)
    out->k = static_cast<uint32_t>(v);
  else if (key == "max_steps" && v >= 1 && v <= 4'000'000'000)
    out->max_steps = static_cast<uint32_t>(v);
  else
    return false;
  return true;
}

}  // namespace

bool parse_spec(std::string_view text, Spec* out, std::string* err) {
  size_t colon = text.find(':');
  Spec s;
  s.strategy = std::string(text.substr(0, colon));
  std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (s.strategy == "replay") {
    // The schedule's text has commas too: its parameters are what follows the first '='s item.
    size_t eq = rest.find('=');
    size_t cut = eq == std::string_view::npos ? rest.size() : rest.rfind(',', eq);
    if (cut == std::string_view::npos || !parse_schedule(rest.substr(0, cut), &s.replay)) {
      *err = "malformed schedule '" + std::string(rest) + "'";
      return false;
    }
    rest = cut < rest.size() ? rest.substr(cut + 1) : "";
  } else if (s.strategy != "pct" && s.strategy != "random") {
    *err = "unknown strategy '" + s.strategy + "' (pct, random or replay)";
    return false;
  }
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (!parse_param(item, &s)) {
      *err = "bad parameter '" + std::string(item) + "' (seed=N, depth=1..3, k=N, max_steps=N)";
      return false;
    }
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  *out = std::move(s);
  return true;
}

std::string format_spec(const Spec& s) {
  if (s.strategy == "replay") return "replay:" + format_schedule(s.replay);
  std::string t = s.strategy + ":seed=" + std::to_string(s.seed);
  if (s.strategy == "pct") t += ",depth=" + std::to_string(s.depth) + ",k=" + std::to_string(s.k);
  return t;
}

std::string outcome_json(const Spec& spec, const RunResult& r, const std::vector<RaceNote>& races,
                         const std::string& replay_command) {
  static const char* const kOutcomes[] = {"ok", "failed", "deadlock"};
  std::string j = "{\"schedule_spec\": " + json_quote(format_spec(spec));
  j += ", \"strategy\": " + json_quote(spec.strategy) + ", \"seed\": " + json_hex(spec.seed);
  j += ", \"outcome\": " + json_quote(kOutcomes[static_cast<int>(r.outcome)]);
  j += ", \"signature\": " + json_quote(r.signature);
  j += ", \"steps\": " + std::to_string(r.steps);
  j += ", \"decisions\": " + std::to_string(r.schedule.choices.size());
  j += ", \"preemptions\": " + std::to_string(count_preemptions(r.choices));
  j += ", \"actors\": " + std::to_string(r.positions.size());
  j += ", \"schedule\": " + json_quote(format_schedule(r.schedule));
  // Each decision as [chosen, previous (-1: none), whether previous could have moved]: where the
  // preemptions are, for a shrinker that replays the program (emu-shrink).
  j += ", \"choice_records\": [";
  for (size_t i = 0; i < r.choices.size(); ++i) {
    const ChoiceRecord& c = r.choices[i];
    j += std::string(i ? "," : "") + "[" + std::to_string(c.chosen) + "," +
         (c.previous == kNoActor ? std::string("-1") : std::to_string(c.previous)) + "," +
         (c.previous_enabled ? "1" : "0") + "]";
  }
  j += "]";
  j += ", \"trace_hash\": " + json_hex(r.trace_hash);
  j += ", \"races\": [";
  for (size_t i = 0; i < races.size(); ++i)
    j += std::string(i ? ", " : "") + "{\"kind\": " + json_quote(races[i].kind) +
         ", \"qpn\": " + std::to_string(races[i].qpn) +
         ", \"slot\": " + std::to_string(races[i].slot) + "}";
  return j + "], \"replay\": " + json_quote(replay_command) + "}\n";
}

constexpr uint32_t kReserveSteps = 1u << 20;

void start(const Spec& spec, StuckHandler stuck) {
  // A process runs one program, which lives as long as it. A test that starts another has joined
  // the threads of the one before, which was leaked here until LeakSanitizer said so.
  delete g_run;
  g_run = new ProgramRun{spec, stuck, nullptr, nullptr, 0};
  if (spec.strategy == "replay")
    g_run->strategy = replay_strategy(spec.replay);
  else if (spec.strategy == "pct")
    g_run->strategy = pct_strategy(spec.seed, spec.depth, spec.k);
  else
    g_run->strategy = random_walk_strategy(spec.seed);
  g_run->run = std::make_unique<Run>(*g_run->strategy, [](RunResult r) {
    g_run->stuck(g_run->spec, r);
    std::abort();  // the handler ends the process
  });
  g_run->run->set_step_bound(spec.max_steps);
  // Untouched pages until used. UCX hooks the allocator (its memory events take a lock), so the
  // trace must not be reallocated in the middle of a step.
  g_run->run->reserve(spec.max_steps < kReserveSteps ? spec.max_steps : kReserveSteps);
}

bool active() { return g_run && !g_run->run->over(); }

ActorId add_thread() {
  // Actor 0 is main and threads are only added, so the next id is the count of threads so far.
  return g_run->run->add_actor("thread " + std::to_string(++g_run->threads));
}

void drop_thread(ActorId a) { g_run->run->drop(a); }
bool enter(ActorId self) { return g_run->run->enter(self); }
void leave() { g_run->run->leave(current_actor()); }
bool finished(ActorId a) { return g_run->run->finished(a); }
RunResult stop() { return g_run->run->finish_program(current_actor()); }

}  // namespace emu::sched::program
