// SPDX-License-Identifier: BSD-2-Clause
#include "scheduler.h"

#include <pybind11/stl.h>

#include <cerrno>
#include <memory>
#include <mutex>

#include "campaign.h"
#include "errors.h"
#include "steps.h"

namespace py = pybind11;

namespace pyh {

namespace {

using emu::sched::Outcome;
using emu::sched::RunResult;

// The rig is one per process (17 QP pairs on emu0) and a run owns it: runs from several Python
// threads take turns.
std::mutex g_rig_lock;

race::Rig& rig_locked() {
  static std::unique_ptr<race::Rig> rig;
  if (!rig) {
    auto r = std::make_unique<race::Rig>();
    std::string err;
    if (!r->open(&err)) throw VerbsError(errno ? errno : ENODEV, "the race rig on emu0: " + err);
    rig = std::move(r);
  }
  return *rig;
}

// A scenario as Python holds it: a built-in one (the table's, never freed) or a step scenario.
struct ScenarioHandle {
  std::shared_ptr<const race::ScenarioDef> def;
};

// One scheduled run as Python sees it, with what its trace needs.
struct Run {
  RunResult r;
  std::vector<std::string> races;  // the device's race events of this run, as text
  std::string outcome() const {
    switch (r.outcome) {
      case Outcome::kOk:
        return "ok";
      case Outcome::kFailed:
        return "failed";
      case Outcome::kDeadlock:
        return "deadlock";
    }
    return "?";
  }
};

struct Campaign {
  race::CampaignReport rep;
  std::shared_ptr<Run> failure, shrunk;  // null unless it failed
};

race::Search search_of(const std::string& s) {
  race::Search out;
  if (!race::parse_search(s, &out))
    throw VerbsError(EINVAL, "unknown strategy '" + s + "' (random, pct, dfs, delays)");
  return out;
}

ScenarioHandle builtin(const std::string& name) {
  const race::ScenarioDef* d = race::find_scenario(name);
  if (!d) throw VerbsError(ENOENT, "no built-in scenario '" + name + "'");
  return {std::shared_ptr<const race::ScenarioDef>(d, [](const race::ScenarioDef*) {})};
}

race::StepOp op_of(const std::string& s) {
  if (s == "post") return race::StepOp::kPost;
  if (s == "poll") return race::StepOp::kPoll;
  if (s == "flush") return race::StepOp::kFlush;
  if (s == "yield") return race::StepOp::kYield;
  throw VerbsError(EINVAL, "unknown step '" + s + "' (post, poll, flush, yield)");
}

using PyStep = std::tuple<std::string, uint32_t, uint32_t>;  // op, endpoint, length
using PyActor = std::pair<std::string, std::vector<PyStep>>;

ScenarioHandle step_scenario(const std::string& name, const std::vector<PyActor>& actors,
                             const std::vector<uint32_t>& pairs, const std::string& thread_mode,
                             const std::string& mmio, const std::string& profile, bool wc) {
  race::StepSpec spec{name, pairs, thread_mode, mmio, profile, wc, {}};
  for (const PyActor& a : actors) {
    race::StepActor sa{a.first, {}};
    for (const PyStep& s : a.second)
      sa.steps.push_back({op_of(std::get<0>(s)), std::get<1>(s), std::get<2>(s)});
    spec.actors.push_back(std::move(sa));
  }
  std::string err;
  if (!race::validate(spec, &err)) throw VerbsError(EINVAL, name + ": " + err);
  return {std::make_shared<const race::ScenarioDef>(race::step_scenario(spec))};
}

std::shared_ptr<Run> run_of(RunResult r, race::Rig& rig) {
  return std::make_shared<Run>(Run{std::move(r), rig.race_lines()});
}

std::shared_ptr<Run> replay(const ScenarioHandle& h, const std::string& schedule) {
  emu::sched::Schedule s;
  if (!emu::sched::parse_schedule(schedule, &s))
    throw VerbsError(EINVAL, "not a schedule: '" + schedule + "'");
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> g(g_rig_lock);
  race::Rig& rig = rig_locked();
  return run_of(race::replay(*h.def, rig, s), rig);
}

std::shared_ptr<Campaign> run(const ScenarioHandle& h, const std::string& strategy, uint64_t seed,
                              uint64_t budget, uint32_t bound, bool shrink, bool keep_going) {
  const race::CampaignOptions o{.search = search_of(strategy),
                                .master_seed = seed,
                                .budget = budget,
                                .bound = bound,
                                .shard = {},
                                .keep_going = keep_going,
                                .shrink = shrink};
  py::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> g(g_rig_lock);
  race::Rig& rig = rig_locked();
  auto c = std::make_shared<Campaign>();
  c->rep = race::run_campaign(*h.def, rig, o);
  if (c->rep.failed) {
    // The last run was the shrunk schedule's replay: the rig's race events are its.
    c->shrunk = run_of(c->rep.shrunk_run, rig);
    c->failure = std::make_shared<Run>(Run{c->rep.failure, {}});
  }
  return c;
}

void write_trace(const Run& r, const std::string& path) {
  if (!race::write_trace(path, r.r, r.races)) throw VerbsError(errno ? errno : EIO, path);
}

void bind_scenarios(py::module_& m) {
  py::class_<race::ScenarioDef, std::shared_ptr<race::ScenarioDef>>(m, "ScenarioInfo")
      .def_readonly("name", &race::ScenarioDef::name)
      .def_readonly("report", &race::ScenarioDef::report)
      .def_readonly("link", &race::ScenarioDef::link)
      .def_readonly("buggy", &race::ScenarioDef::buggy)
      .def_readonly("counterpart", &race::ScenarioDef::counterpart)
      .def_readonly("signatures", &race::ScenarioDef::signatures)
      .def_readonly("pairs", &race::ScenarioDef::pairs)
      .def_readonly("what", &race::ScenarioDef::what);
  py::class_<ScenarioHandle>(m, "Scenario")
      .def_property_readonly(
          "info",
          [](const ScenarioHandle& h) { return std::make_shared<race::ScenarioDef>(*h.def); })
      .def_property_readonly("name", [](const ScenarioHandle& h) { return h.def->name; });
  m.def("builtin_scenarios", [] {
    std::vector<std::string> names;
    for (const race::ScenarioDef& d : race::scenarios()) names.push_back(d.name);
    return names;
  });
  m.def("builtin", &builtin, py::arg("name"));
  m.def("step_scenario", &step_scenario, py::arg("name"), py::arg("actors"), py::arg("pairs"),
        py::arg("thread_mode"), py::arg("mmio"), py::arg("profile"), py::arg("write_combining"));
}

void bind_runs(py::module_& m) {
  py::class_<Run, std::shared_ptr<Run>>(m, "Run")
      .def_property_readonly("outcome", &Run::outcome)
      .def_property_readonly("signature", [](const Run& r) { return r.r.signature; })
      .def_property_readonly("steps", [](const Run& r) { return r.r.steps; })
      .def_property_readonly("trace_hash", [](const Run& r) { return r.r.trace_hash; })
      .def_property_readonly("schedule",
                             [](const Run& r) { return emu::sched::format_schedule(r.r.schedule); })
      .def_property_readonly("choices", [](const Run& r) { return r.r.choices.size(); })
      .def_property_readonly(
          "preemptions", [](const Run& r) { return emu::sched::count_preemptions(r.r.choices); })
      .def_property_readonly("actors",
                             [](const Run& r) {
                               std::vector<std::string> names;
                               for (const auto& p : r.r.positions) names.push_back(p.name);
                               return names;
                             })
      .def_readonly("races", &Run::races)
      .def("describe", [](const Run& r) { return race::describe_run(r.r, r.races); })
      .def("write_trace", &write_trace, py::arg("path"));
  py::class_<Campaign, std::shared_ptr<Campaign>>(m, "Campaign")
      .def_property_readonly("failed", [](const Campaign& c) { return c.rep.failed; })
      .def_property_readonly("schedules", [](const Campaign& c) { return c.rep.totals.schedules; })
      .def_property_readonly("failures", [](const Campaign& c) { return c.rep.totals.failures; })
      .def_property_readonly("failing_run", [](const Campaign& c) { return c.rep.failing_run; })
      .def_property_readonly("failing_seed", [](const Campaign& c) { return c.rep.failing_seed; })
      .def_property_readonly("exhausted", [](const Campaign& c) { return c.rep.exhausted; })
      .def_readonly("failure", &Campaign::failure)
      .def_readonly("shrunk", &Campaign::shrunk)
      .def_property_readonly("shrink_runs",
                             [](const Campaign& c) { return c.rep.shrink_stats.runs; });
  m.def("run", &run, py::arg("scenario"), py::arg("strategy") = "random", py::arg("seed") = 1,
        py::arg("budget") = 1000, py::arg("bound") = 2, py::arg("shrink") = true,
        py::arg("keep_going") = false);
  m.def("replay", &replay, py::arg("scenario"), py::arg("schedule"));
}

}  // namespace

void register_scheduler(py::module_& m) {
  bind_scenarios(m);
  bind_runs(m);
}

}  // namespace pyh
