// SPDX-License-Identifier: BSD-2-Clause
// emu-race: the known posting races as scenarios, found by a seeded search, replayed exactly,
// shrunk and drawn. Runs under emu-run (the provider is the device).
//   emu-race list
//   emu-race run NAME [--strategy random|pct|dfs|delays] [--seed S] [--budget N] [--bound B]
//                     [--shard i/N] [--keep-going] [--json] [--trace FILE] [--no-shrink]
//   emu-race replay NAME --schedule S [--times N]
//   emu-race merge FILE...      (the --json outputs of the shards of one campaign)
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "campaign.h"

namespace {

using namespace emu::sched;
using race::CampaignOptions;
using race::CampaignReport;
using race::ScenarioDef;

int usage() {
  fprintf(stderr,
          "usage: emu-race list\n"
          "       emu-race run NAME [--strategy random|pct|dfs|delays] [--seed S] [--budget N] "
          "[--bound B] [--shard i/N] [--keep-going] [--json] [--trace FILE] [--no-shrink]\n"
          "       emu-race replay NAME --schedule S [--times N]\n"
          "       emu-race merge FILE...\n"
          "       emu-race bench [--seeds N] [--budget N] [--control N] [NAME...]\n");
  return 2;
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

std::string quoted(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o + "\"";
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

bool parse_run_args(int argc, char** argv, int i, RunArgs* a) {
  for (; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (k == "--json")
      a->json = true;
    else if (k == "--no-shrink")
      a->o.shrink = false;
    else if (k == "--keep-going")
      a->o.keep_going = true;
    else if (k == "--strategy") {
      if (!val(&v) || !race::parse_search(v, &a->o.search)) return false;
    } else if (k == "--seed") {
      if (!val(&v)) return false;
      a->o.master_seed = strtoull(v.c_str(), nullptr, 0);
    } else if (k == "--budget") {
      if (!val(&v)) return false;
      a->o.budget = strtoull(v.c_str(), nullptr, 0);
    } else if (k == "--bound") {
      if (!val(&v)) return false;
      a->o.bound = static_cast<uint32_t>(strtoul(v.c_str(), nullptr, 0));
    } else if (k == "--shard") {
      if (!val(&v) || !parse_shard(v, &a->o.shard)) return false;
    } else if (k == "--trace") {
      if (!val(&a->trace)) return false;
    } else {
      return false;
    }
  }
  return true;
}

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

void print_json(const ScenarioDef& d, const RunArgs& a, const CampaignReport& r) {
  double rate = r.seconds > 0 ? r.totals.schedules / r.seconds : 0;
  std::ostringstream j;
  j << "{\"scenario\":" << quoted(d.name) << ",\"buggy\":" << (d.buggy ? "true" : "false")
    << ",\"strategy\":\"" << race::search_name(a.o.search) << "\",\"master_seed\":\""
    << hex(a.o.master_seed) << "\",\"bound\":" << a.o.bound
    << ",\"schedules\":" << r.totals.schedules << ",\"schedules_per_second\":" << uint64_t(rate)
    << ",\"failed\":" << (r.failed ? "true" : "false")
    << ",\"exhausted\":" << (r.exhausted ? "true" : "false");
  if (r.failed) {
    j << ",\"signature\":" << quoted(r.failure.signature) << ",\"run\":" << r.failing_run
      << ",\"seed\":\"" << hex(r.failing_seed)
      << "\",\"schedule\":" << quoted(format_schedule(r.failure.schedule)) << ",\"trace_hash\":\""
      << hex(r.failure.trace_hash) << "\",\"shrunk\":" << quoted(format_schedule(r.shrunk))
      << ",\"shrunk_signature\":" << quoted(r.shrunk_run.signature)
      << ",\"shrunk_preemptions\":" << count_preemptions(r.shrunk_run.choices)
      << ",\"shrunk_trace_hash\":\"" << hex(r.shrunk_run.trace_hash)
      << "\",\"trace\":" << quoted(a.trace);
  }
  j << ",\"totals\":" << format_totals(r.totals) << "}";
  printf("%s\n", j.str().c_str());
}

int run_cmd(const ScenarioDef& d, int argc, char** argv) {
  RunArgs a;
  if (!parse_run_args(argc, argv, 3, &a)) return usage();
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

int replay_cmd(const ScenarioDef& d, int argc, char** argv) {
  Schedule s;
  bool have = false;
  uint64_t times = 1;
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--schedule" && parse_schedule(argv[i + 1], &s))
      have = true;
    else if (k == "--times")
      times = strtoull(argv[i + 1], nullptr, 0);
    else
      return usage();
  }
  if (!have || (argc - 3) % 2) return usage();
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
  size_t at = line.find("\"totals\":");
  if (at == std::string::npos) return false;
  at = line.find('{', at);
  int depth = 0;
  for (size_t i = at; i < line.size(); ++i) {
    depth += line[i] == '{' ? 1 : line[i] == '}' ? -1 : 0;
    if (depth == 0) return parse_totals(line.substr(at, i + 1 - at), out);
  }
  return false;
}

int merge_cmd(int argc, char** argv) {
  CampaignTotals all;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i]);
    std::string line;
    CampaignTotals t;
    if (!std::getline(f, line) || !totals_of(line, &t)) {
      fprintf(stderr, "emu-race: no totals in %s\n", argv[i]);
      return 2;
    }
    if (i == 2) all.master_seed = t.master_seed;
    if (!merge_totals(t, &all)) {
      fprintf(stderr, "emu-race: %s is of another master seed\n", argv[i]);
      return 2;
    }
  }
  printf("%s\n", format_totals(all).c_str());
  return 0;
}

}  // namespace

int bench_cmd(int argc, char** argv) {
  race::BenchOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    bool has_value = i + 1 < argc;
    if (k == "--seeds" && has_value)
      o.seeds = static_cast<uint32_t>(strtoul(argv[++i], nullptr, 0));
    else if (k == "--budget" && has_value)
      o.budget = strtoull(argv[++i], nullptr, 0);
    else if (k == "--control" && has_value)
      o.control_budget = strtoull(argv[++i], nullptr, 0);
    else if (race::find_scenario(k))
      o.only.push_back(k);
    else
      return usage();
  }
  race::Rig rig;
  if (!open_rig(&rig)) return 2;
  return race::run_bench(rig, o);
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  if (cmd == "list") return list();
  if (cmd == "merge") return argc > 2 ? merge_cmd(argc, argv) : usage();
  if (cmd == "bench") return bench_cmd(argc, argv);
  if (argc < 3) return usage();
  const ScenarioDef* d = race::find_scenario(argv[2]);
  if (!d) {
    fprintf(stderr, "emu-race: no scenario %s (emu-race list)\n", argv[2]);
    return 2;
  }
  if (cmd == "run") return run_cmd(*d, argc, argv);
  if (cmd == "replay") return replay_cmd(*d, argc, argv);
  return usage();
}
