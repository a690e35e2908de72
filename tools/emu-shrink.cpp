// SPDX-License-Identifier: BSD-2-Clause
// emu-shrink [--budget N] [--goal-preemptions N] [--json FILE] COMMAND [ARGS...]: shrinks the
// failing schedule of an unmodified program run under EMU_SCHEDULE (docs/guides/races.md,
// "Scheduled"). EMU_SCHEDULE names the failing run (a seed, or a replay); COMMAND is how it was run
// (emu-run PROGRAM ...). Each replay is a process of its own in a fabric of its own (removed after
// it), whose outcome comes back through EMU_SCHEDULE_OUT; the shrinking itself is emu-race's
// (emu/sched/shrink.h): only replays that fail with the same signature are kept. Prints the shrunk
// schedule and the command that replays it; exit status 0 when the failure was reproduced, 1 when
// not, 2 on usage.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "emu/cli.h"
#include "emu/config.h"
#include "emu/fabrics.h"
#include "emu/sched/schedule.h"
#include "emu/sched/shrink.h"

namespace {

namespace sched = emu::sched;

struct Options {
  uint32_t budget = 1000;
  uint32_t goal_preemptions = sched::ShrinkOptions::kNoGoal;
  std::string json;
  std::vector<std::string> words;  // COMMAND [ARGS...]
  std::vector<char*> command;      // the same for execvp, null-terminated
};

using nlohmann::json;

// A run's outcome as EMU_SCHEDULE_OUT wrote it: one JSON object; a discarded value when the run
// wrote none (or only part of one: it died while writing).
json outcome_of(const std::string& text) {
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The string value of `key` in the outcome, or "".
std::string json_string(const json& j, const char* key) {
  auto it = j.is_object() ? j.find(key) : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "choice_records": [[chosen, previous or -1, 0|1], ...]
std::vector<sched::ChoiceRecord> json_records(const json& j) {
  std::vector<sched::ChoiceRecord> out;
  auto it = j.is_object() ? j.find("choice_records") : j.end();
  if (it == j.end() || !it->is_array()) return out;
  for (const json& r : *it) {
    if (!r.is_array() || r.size() != 3 || !r[0].is_number_integer() || !r[1].is_number_integer() ||
        !r[2].is_number_integer())
      break;
    const long previous = r[1].get<long>();
    out.push_back({sched::ActorId(r[0].get<long>()),
                   previous < 0 ? sched::kNoActor : sched::ActorId(previous),
                   r[2].get<long>() != 0});
  }
  return out;
}

class Replayer {
 public:
  Replayer(const Options& o, std::string dir) : o_(o), dir_(std::move(dir)) {
    const char* f = std::getenv("EMU_FABRIC");
    fabric_ = std::string(f && *f ? f : "default") + "-shrink-" + std::to_string(getpid());
  }

  // Runs the command once under `spec`; the outcome's JSON (discarded when it wrote none).
  json run(const std::string& spec) {
    const std::string fabric = fabric_ + "-" + std::to_string(runs_++);
    const std::string out = dir_ + "/outcome.json";
    unlink(out.c_str());
    pid_t pid = fork();
    if (pid == 0) {
      setenv("EMU_SCHEDULE", spec.c_str(), 1);
      setenv("EMU_SCHEDULE_OUT", out.c_str(), 1);
      setenv("EMU_FABRIC", fabric.c_str(), 1);
      unsetenv("EMU_SCHEDULE_TRACE");
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execvp(o_.command[0], o_.command.data());
      _exit(127);
    }
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    std::string why;
    emu::remove_fabric(emu::config(), fabric, /*force=*/true, &why);  // the run's process is gone
    std::ifstream in(out);
    std::stringstream text;
    text << in.rdbuf();
    return outcome_of(text.str());
  }

  uint32_t runs() const { return runs_; }

 private:
  const Options& o_;
  std::string dir_, fabric_;
  uint32_t runs_ = 0;
};

// What a run failed with: its signature, or the outcome for a run that did not complete ("" for
// a pass; a process that ended without its report fails as "no report").
std::string signature_of(const json& outcome_json) {
  if (!outcome_json.is_object()) return "no report";
  std::string outcome = json_string(outcome_json, "outcome");
  if (outcome == "ok") return "";
  std::string sig = json_string(outcome_json, "signature");
  return sig.empty() ? outcome : sig;
}

std::string quoted_command(const Options& o) {
  std::string s;
  for (char* a : o.command)
    if (a) s += std::string(s.empty() ? "" : " ") + a;
  return s;
}

void write_json(const Options& o, const std::string& signature, const sched::ShrinkResult& r,
                uint32_t runs) {
  if (o.json.empty()) return;
  const nlohmann::ordered_json j = {{"signature", signature},
                                    {"reproduced", r.stats.reproduced},
                                    {"runs", runs},
                                    {"choices_before", r.stats.choices_before},
                                    {"preemptions_before", r.stats.preemptions_before},
                                    {"choices_after", r.stats.choices_after},
                                    {"preemptions_after", r.stats.preemptions_after},
                                    {"budget_spent", r.stats.budget_exhausted},
                                    {"goal_reached", r.stats.goal_reached},
                                    {"schedule", sched::format_schedule(r.schedule)}};
  std::ofstream(o.json) << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

// The command line: options, then the command (everything from its first word on is its own).
int parse_args(int argc, char** argv, Options* o) {
  CLI::App app(
      "shrinks the failing schedule of a program run under EMU_SCHEDULE (which names "
      "the failing run: a seed or a replay); COMMAND is how it was run",
      "emu-shrink");
  app.prefix_command();
  app.add_option("--budget", o->budget, "replays at most")
      ->check(emu::cli::at_least(1))
      ->capture_default_str();
  app.add_option("--goal-preemptions", o->goal_preemptions,
                 "stop as soon as the schedule fails with at most N preemptions");
  app.add_option("--json", o->json, "also write the result to this file as JSON");
  app.footer(
      "Usage: EMU_SCHEDULE=SPEC emu-shrink [OPTIONS] [--] COMMAND [ARGS...]\n"
      "COMMAND [ARGS...]: the failing run's command line, run as it is");
  const int status = emu::cli::parse(app, argc, argv);
  if (status >= 0) return status;
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  const char* spec = std::getenv("EMU_SCHEDULE");
  if (rest.empty() || !spec || !*spec) {
    std::fprintf(stderr, "emu-shrink: %s\nRun with --help for more information.\n",
                 rest.empty() ? "COMMAND is required" : "EMU_SCHEDULE names no failing run");
    return emu::cli::kExitUsage;
  }
  o->words = std::move(rest);
  for (std::string& w : o->words) o->command.push_back(w.data());
  o->command.push_back(nullptr);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const int status = parse_args(argc, argv, &o);
  if (status >= 0) return status;
  const char* spec = std::getenv("EMU_SCHEDULE");
  char dir[] = "/tmp/emu-shrink-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("emu-shrink: mkdtemp");
    return 2;
  }
  Replayer replayer(o, dir);
  const json first = replayer.run(spec);
  const std::string signature = signature_of(first);
  sched::Schedule failing;
  if (signature.empty() || !sched::parse_schedule(json_string(first, "schedule"), &failing)) {
    std::fprintf(stderr, "emu-shrink: %s: the run %s\n", spec,
                 signature.empty() ? "passed: nothing to shrink" : "left no schedule");
    rmdir(dir);
    return 1;
  }
  std::printf("emu-shrink: %s fails (%s) with %zu decisions, %u preemptions\n", spec,
              signature.c_str(), failing.choices.size(),
              sched::count_preemptions(json_records(first)));
  sched::ScheduleRunner runner = [&](const sched::Schedule& s) {
    const json j = replayer.run("replay:" + sched::format_schedule(s));
    return sched::RunOutcome{signature_of(j), json_records(j)};
  };
  sched::ShrinkResult r = sched::shrink_schedule(
      failing, signature, runner, sched::ShrinkOptions{o.budget, o.goal_preemptions});
  const std::string text = sched::format_schedule(r.schedule);
  std::printf("emu-shrink: %s in %u replays%s: %zu decisions, %u preemptions: %s\n",
              r.stats.reproduced ? "shrunk" : "not reproduced", replayer.runs() - 1,
              r.stats.budget_exhausted ? " (budget spent)"
              : r.stats.goal_reached   ? " (goal reached)"
                                       : "",
              r.stats.choices_after, r.stats.preemptions_after, text.c_str());
  if (r.stats.reproduced)
    std::printf("emu-shrink: replay: EMU_SCHEDULE=replay:%s %s\n", text.c_str(),
                quoted_command(o).c_str());
  write_json(o, signature, r, replayer.runs() - 1);
  unlink((std::string(dir) + "/outcome.json").c_str());
  rmdir(dir);
  return r.stats.reproduced ? 0 : 1;
}
