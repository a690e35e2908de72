// SPDX-License-Identifier: BSD-2-Clause
// emu-race: the known posting races as scenarios, found by a seeded search, replayed exactly,
// shrunk and drawn. Runs under emu-run (the provider is the device).
//   emu-race list
//   emu-race run NAME [--strategy random|pct|dfs|delays] [--seed S] [--budget N] [--bound B]
//                     [--shard i/N] [--keep-going] [--json] [--trace FILE] [--no-shrink]
//   emu-race replay NAME --schedule S [--times N]
//   emu-race merge FILE...      (the --json outputs of the shards of one campaign)
//   emu-race bench [--seeds N] [--budget N] [--control N] [NAME...]
// `emu-race --help` and `emu-race COMMAND --help` say more; a bad command line exits 2, naming
// the option (emu/cli.h).
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench.h"
#include "campaign.h"
#include "emu/cli.h"

namespace {

using namespace emu::sched;
using race::CampaignOptions;
using race::CampaignReport;
using race::ScenarioDef;

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

int list() {
  for (const ScenarioDef& d : race::scenarios())
    printf("%-24s %-6s %-28s counterpart %-24s %s\n", d.name.c_str(), d.buggy ? "buggy" : "fixed",
           d.report.c_str(), d.counterpart.c_str(), d.what.c_str());
  return 0;
}

bool open_rig(race::Rig* rig) {
  std::string err;
  if (rig->open(&err)) return true;
  fprintf(stderr, "emu-race: %s\n", err.c_str());
  return false;
}

struct RunArgs {
  CampaignOptions o;
  bool json = false;
  std::string trace;
};

void print_text(const ScenarioDef& d, const RunArgs& a, const CampaignReport& r,
                const std::string& replay_cmd, const std::string& report) {
  double rate = r.seconds > 0 ? r.totals.schedules / r.seconds : 0;
  printf("%s (%s): %s, master seed %s, %" PRIu64 " schedules, %.0f schedules/s\n", d.name.c_str(),
         d.report.c_str(), race::search_name(a.o.search), hex(a.o.master_seed).c_str(),
         r.totals.schedules, rate);
  if (!r.failed) {
    if (race::exhaustive(a.o.search)) {
      const char* unit = a.o.search == race::Search::kDfs ? "preemption" : "delay";
      printf(r.exhausted ? "no failure within %s bound %u\n"
                         : "no failure in the budget (%s bound %u not exhausted)\n",
             unit, a.o.bound);
    } else {
      printf("no failure\n");
    }
    return;
  }
  printf("FAILED: %s at run %" PRIu64 " (seed %s)\n", r.failure.signature.c_str(), r.failing_run,
         hex(r.failing_seed).c_str());
  printf("schedule: %s\n", format_schedule(r.failure.schedule).c_str());
  printf("shrunk:   %s (%zu choices, %u preemptions; %u replays)\n",
         format_schedule(r.shrunk).c_str(), r.shrunk.choices.size(),
         count_preemptions(r.shrunk_run.choices), r.shrink_stats.runs);
  printf("shrunk run's signature: %s, trace hash %s\n", r.shrunk_run.signature.c_str(),
         hex(r.shrunk_run.trace_hash).c_str());
  printf("replay:   %s\n", replay_cmd.c_str());
  printf("what happened (shrunk run; '>' marks a switch):\n%s", report.c_str());
  printf("trace hash of the failing run: %s\n", hex(r.failure.trace_hash).c_str());
  printf("Perfetto trace (shrunk run): %s\n", a.trace.c_str());
}

// Signatures and file names are ours, but a byte that is no UTF-8 must not end the report.
std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void print_json(const ScenarioDef& d, const RunArgs& a, const CampaignReport& r) {
  const double rate = r.seconds > 0 ? r.totals.schedules / r.seconds : 0;
  nlohmann::ordered_json j = {{"scenario", d.name},
                              {"buggy", d.buggy},
                              {"strategy", race::search_name(a.o.search)},
                              {"master_seed", hex(a.o.master_seed)},
                              {"bound", a.o.bound},
                              {"schedules", r.totals.schedules},
                              {"schedules_per_second", uint64_t(rate)},
                              {"failed", r.failed},
                              {"exhausted", r.exhausted}};
  if (r.failed) {
    j["signature"] = r.failure.signature;
    j["run"] = r.failing_run;
    j["seed"] = hex(r.failing_seed);
    j["schedule"] = format_schedule(r.failure.schedule);
    j["trace_hash"] = hex(r.failure.trace_hash);
    j["shrunk"] = format_schedule(r.shrunk);
    j["shrunk_signature"] = r.shrunk_run.signature;
    j["shrunk_preemptions"] = count_preemptions(r.shrunk_run.choices);
    j["shrunk_trace_hash"] = hex(r.shrunk_run.trace_hash);
    j["trace"] = a.trace;
  }
  j["totals"] = nlohmann::ordered_json::parse(format_totals(r.totals));
  printf("%s\n", dump(j).c_str());
}

int run_cmd(const ScenarioDef& d, RunArgs a) {
  race::Rig rig;
  if (!open_rig(&rig)) return 2;
  CampaignReport r = race::run_campaign(d, rig, a.o);
  std::string report, replay_cmd;
  if (r.failed) {
    if (a.trace.empty()) a.trace = "emu-race-" + d.name + ".trace.json";
    std::vector<std::string> races = rig.race_lines();  // the shrunk replay's, the last run
    report = race::describe_run(r.shrunk_run, races);
    if (!race::write_trace(a.trace, r.shrunk_run, races))
      fprintf(stderr, "emu-race: cannot write %s\n", a.trace.c_str());
    replay_cmd =
        "emu-run emu-race replay " + d.name + " --schedule " + format_schedule(r.failure.schedule);
  }
  if (a.json)
    print_json(d, a, r);
  else
    print_text(d, a, r, replay_cmd, report);
  return r.failed ? 1 : 0;
}

int replay_cmd(const ScenarioDef& d, const Schedule& s, uint64_t times) {
  race::Rig rig;
  if (!open_rig(&rig)) return 2;
  uint64_t first = 0;
  bool same = true;
  for (uint64_t t = 0; t < times; ++t) {
    RunResult r = race::replay(d, rig, s);
    printf("replay %" PRIu64 ": %s trace hash %s\n", t,
           r.signature.empty() ? "pass" : r.signature.c_str(), hex(r.trace_hash).c_str());
    if (t == 0) first = r.trace_hash;
    same = same && r.trace_hash == first;
  }
  if (!same) printf("REPLAYS DIFFER\n");
  return same ? 0 : 1;
}

// The "totals" object of one `run --json` line.
bool totals_of(const std::string& line, CampaignTotals* out) {
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("totals") && parse_totals(j["totals"].dump(), out);
}

int merge_cmd(const std::vector<std::string>& files) {
  CampaignTotals all;
  for (const std::string& file : files) {
    std::ifstream f(file);
    std::string line;
    CampaignTotals t;
    if (!std::getline(f, line) || !totals_of(line, &t)) {
      fprintf(stderr, "emu-race: no totals in %s\n", file.c_str());
      return 2;
    }
    if (&file == &files.front()) all.master_seed = t.master_seed;
    if (!merge_totals(t, &all)) {
      fprintf(stderr, "emu-race: %s is of another master seed\n", file.c_str());
      return 2;
    }
  }
  printf("%s\n", format_totals(all).c_str());
  return 0;
}

int bench_cmd(const race::BenchOptions& o) {
  race::Rig rig;
  if (!open_rig(&rig)) return 2;
  return race::run_bench(rig, o);
}

// Checks of the command line's values, each naming what it wanted.
const CLI::Validator kScenario(
    [](const std::string& name) {
      return race::find_scenario(name) ? "" : "no scenario " + name + " (emu-race list)";
    },
    "SCENARIO");
const CLI::Validator kStrategy(
    [](const std::string& name) {
      race::Search s;
      return race::parse_search(name, &s) ? "" : name + " is not random, pct, dfs or delays";
    },
    "random|pct|dfs|delays");
const CLI::Validator kShard(
    [](const std::string& text) {
      Shard s;
      return parse_shard(text, &s) ? "" : text + " is not i/N with i < N";
    },
    "i/N");
const CLI::Validator kSchedule(
    [](const std::string& text) {
      Schedule s;
      return parse_schedule(text, &s) ? "" : text + " is not a schedule (as `run` prints it)";
    },
    "SCHEDULE");

struct CommandLine {
  std::string scenario, strategy = "random", shard, schedule;
  RunArgs run;
  uint64_t times = 1;
  std::vector<std::string> files;
  race::BenchOptions bench;
};

void add_run(CLI::App& app, CommandLine& c) {
  CLI::App* run = app.add_subcommand("run", "search one scenario's schedules for its race");
  run->add_option("scenario", c.scenario, "a scenario of `emu-race list`")
      ->required()
      ->check(kScenario);
  run->add_option("--strategy", c.strategy, "how schedules are chosen")
      ->check(kStrategy)
      ->capture_default_str();
  run->add_option("--seed", c.run.o.master_seed, "the campaign's master seed")
      ->capture_default_str();
  run->add_option("--budget", c.run.o.budget, "schedules at most")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  run->add_option("--bound", c.run.o.bound, "preemption (dfs) or delay (delays) bound")
      ->check(emu::cli::at_least(0))
      ->capture_default_str();
  run->add_option("--shard", c.shard, "run only shard i of N of the campaign's runs")
      ->check(kShard);
  run->add_flag("--keep-going", c.run.o.keep_going, "count every failure, not only the first");
  run->add_flag("--json", c.run.json, "one JSON line instead of text");
  run->add_option("--trace", c.run.trace,
                  "the failing run's Perfetto trace (default "
                  "emu-race-SCENARIO.trace.json)");
  run->add_flag_callback(
      "--no-shrink", [&c] { c.run.o.shrink = false; }, "report the failing schedule as found");
}

void add_others(CLI::App& app, CommandLine& c) {
  app.add_subcommand("list", "the scenarios, buggy and fixed, with what each shows");
  CLI::App* replay = app.add_subcommand("replay", "run one schedule again, exactly");
  replay->add_option("scenario", c.scenario, "a scenario of `emu-race list`")
      ->required()
      ->check(kScenario);
  replay->add_option("--schedule", c.schedule, "the schedule `run` printed")
      ->required()
      ->check(kSchedule);
  replay->add_option("--times", c.times, "replays, each checked against the first's trace hash")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  CLI::App* merge = app.add_subcommand("merge", "add up the totals of one campaign's shards");
  merge->add_option("files", c.files, "the `run --json` outputs of the shards")
      ->required()
      ->check(CLI::ExistingFile);
  CLI::App* bench = app.add_subcommand("bench", "the search strategies' benchmark (markdown)");
  bench->add_option("--seeds", c.bench.seeds, "master seeds per scenario and strategy")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  bench->add_option("--budget", c.bench.budget, "schedules per seed before it counts as a miss")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  bench->add_option("--control", c.bench.control_budget, "schedules of the fixed scenarios")
      ->check(emu::cli::at_least(0))
      ->capture_default_str();
  bench->add_option("scenarios", c.bench.only, "only these scenarios (all by default)")
      ->check(kScenario);
}

// The command that was asked for, its options parsed and checked.
int dispatch(const CLI::App& app, CommandLine& c) {
  if (app.got_subcommand("list")) return list();
  if (app.got_subcommand("merge")) return merge_cmd(c.files);
  if (app.got_subcommand("bench")) return bench_cmd(c.bench);
  const ScenarioDef& d = *race::find_scenario(c.scenario);
  if (app.got_subcommand("replay")) {
    Schedule s;
    parse_schedule(c.schedule, &s);
    return replay_cmd(d, s, c.times);
  }
  race::parse_search(c.strategy, &c.run.o.search);
  if (!c.shard.empty()) parse_shard(c.shard, &c.run.o.shard);
  return run_cmd(d, c.run);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "the known posting races as scenarios: found by a seeded search, replayed "
      "exactly, shrunk and drawn (run it under emu-run)",
      "emu-race");
  app.require_subcommand(1);
  CommandLine c;
  add_run(app, c);
  add_others(app, c);
  const int status = emu::cli::parse(app, argc, argv);
  return status >= 0 ? status : dispatch(app, c);
}
