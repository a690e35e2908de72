// SPDX-License-Identifier: BSD-2-Clause
// emu-shrink [--budget N] [--json FILE] COMMAND [ARGS...]: shrinks the failing schedule of an
// unmodified program run under EMU_SCHEDULE (docs/guides/races.md, "Scheduled"). EMU_SCHEDULE
// names the failing run (a seed, or a replay); COMMAND is how it was run (emu-run PROGRAM ...).
// Each replay is a process of its own in a fabric of its own (removed after it), whose outcome
// comes back through EMU_SCHEDULE_OUT; the shrinking itself is emu-race's (emu/sched/shrink.h):
// only replays that fail with the same signature are kept. Prints the shrunk schedule and the
// command that replays it; exit status 0 when the failure was reproduced, 1 when not, 2 on usage.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "emu/config.h"
#include "emu/fabrics.h"
#include "emu/sched/schedule.h"
#include "emu/sched/shrink.h"

namespace {

namespace sched = emu::sched;

struct Options {
  uint32_t budget = 1000;
  std::string json;
  std::vector<char*> command;
};

// The string value of "key" in the outcome's one JSON object (our own writer's: no escapes in
// the values read here but \" and \\).
std::string json_string(const std::string& j, const std::string& key) {
  size_t at = j.find("\"" + key + "\": \"");
  if (at == std::string::npos) return {};
  std::string out;
  for (size_t i = at + key.size() + 5; i < j.size() && j[i] != '"'; ++i) {
    if (j[i] == '\\' && i + 1 < j.size()) ++i;
    out += j[i];
  }
  return out;
}

// "choice_records": [[chosen, previous or -1, 0|1], ...]
std::vector<sched::ChoiceRecord> json_records(const std::string& j) {
  std::vector<sched::ChoiceRecord> out;
  size_t at = j.find("\"choice_records\": [");
  if (at == std::string::npos) return out;
  const char* p = j.c_str() + at + 19;
  long chosen, previous, enabled;
  int used = 0;
  while (std::sscanf(p, " [%ld,%ld,%ld]%n", &chosen, &previous, &enabled, &used) == 3) {
    out.push_back({sched::ActorId(chosen),
                   previous < 0 ? sched::kNoActor : sched::ActorId(previous), enabled != 0});
    p += used;
    if (*p == ',') ++p;
  }
  return out;
}

class Replayer {
 public:
  Replayer(const Options& o, std::string dir) : o_(o), dir_(std::move(dir)) {
    const char* f = std::getenv("EMU_FABRIC");
    fabric_ = std::string(f && *f ? f : "default") + "-shrink-" + std::to_string(getpid());
  }

  // Runs the command once under `spec`; the outcome's JSON, or "" when it wrote none.
  std::string run(const std::string& spec) {
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
    return text.str();
  }

  uint32_t runs() const { return runs_; }

 private:
  const Options& o_;
  std::string dir_, fabric_;
  uint32_t runs_ = 0;
};

// What a run failed with: its signature, or the outcome for a run that did not complete ("" for
// a pass; a process that ended without its report fails as "no report").
std::string signature_of(const std::string& outcome_json) {
  if (outcome_json.empty()) return "no report";
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

bool parse_args(int argc, char** argv, Options* o) {
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    if (!std::strcmp(argv[i], "--budget") && i + 1 < argc)
      o->budget = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc)
      o->json = argv[++i];
    else if (!std::strcmp(argv[i], "--"))
      break;
    else
      return false;
  }
  if (i < argc && !std::strcmp(argv[i], "--")) ++i;
  for (; i < argc; ++i) o->command.push_back(argv[i]);
  o->command.push_back(nullptr);
  return o->command.size() > 1 && o->budget > 0;
}

void write_json(const Options& o, const std::string& signature, const sched::ShrinkResult& r,
                uint32_t runs) {
  if (o.json.empty()) return;
  std::ofstream f(o.json);
  f << "{\"signature\": \"" << signature
    << "\", \"reproduced\": " << (r.stats.reproduced ? "true" : "false") << ", \"runs\": " << runs
    << ", \"choices_before\": " << r.stats.choices_before
    << ", \"preemptions_before\": " << r.stats.preemptions_before
    << ", \"choices_after\": " << r.stats.choices_after
    << ", \"preemptions_after\": " << r.stats.preemptions_after << ", \"schedule\": \""
    << sched::format_schedule(r.schedule) << "\"}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* spec = std::getenv("EMU_SCHEDULE");
  if (!parse_args(argc, argv, &o) || !spec || !*spec) {
    std::fprintf(stderr,
                 "usage: EMU_SCHEDULE=SPEC emu-shrink [--budget N] [--json FILE] COMMAND "
                 "[ARGS...]\n");
    return 2;
  }
  char dir[] = "/tmp/emu-shrink-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("emu-shrink: mkdtemp");
    return 2;
  }
  Replayer replayer(o, dir);
  const std::string first = replayer.run(spec);
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
    std::string j = replayer.run("replay:" + sched::format_schedule(s));
    return sched::RunOutcome{signature_of(j), json_records(j)};
  };
  sched::ShrinkResult r =
      sched::shrink_schedule(failing, signature, runner, sched::ShrinkOptions{o.budget});
  const std::string text = sched::format_schedule(r.schedule);
  std::printf("emu-shrink: %s in %u replays%s: %zu decisions, %u preemptions: %s\n",
              r.stats.reproduced ? "shrunk" : "not reproduced", replayer.runs() - 1,
              r.stats.budget_exhausted ? " (budget spent)" : "", r.stats.choices_after,
              r.stats.preemptions_after, text.c_str());
  if (r.stats.reproduced)
    std::printf("emu-shrink: replay: EMU_SCHEDULE=replay:%s %s\n", text.c_str(),
                quoted_command(o).c_str());
  write_json(o, signature, r, replayer.runs() - 1);
  unlink((std::string(dir) + "/outcome.json").c_str());
  rmdir(dir);
  return r.stats.reproduced ? 0 : 1;
}
