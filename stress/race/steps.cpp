// SPDX-License-Identifier: BSD-2-Clause
#include "steps.h"

#include "emu/sched/visibility.h"
#include "run_state.h"

namespace race {

namespace {

using emu::sched::Actor;
using emu::sched::Scenario;

// The messages a step actor posts, in the order the spec lists them: message m of the run is the
// m-th post step over all actors, so its slot and fill do not depend on the schedule.
struct Plan {
  std::vector<std::vector<size_t>> msg_of_step;  // [actor][step] -> message (posts only)
};

Plan plan_messages(const StepSpec& spec, RunState& s) {
  Plan p;
  for (const StepActor& a : spec.actors) {
    p.msg_of_step.emplace_back(a.steps.size(), 0);
    for (size_t i = 0; i < a.steps.size(); ++i)
      if (a.steps[i].op == StepOp::kPost) {
        s.add(spec.pairs[a.steps[i].ep], a.steps[i].len);
        p.msg_of_step.back()[i] = s.msgs.size() - 1;
      }
  }
  return p;
}

void run_step(const Shared& s, const Step& st, size_t msg) {
  switch (st.op) {
    case StepOp::kPost:
      uct_post(s, st.ep, msg, /*note_first=*/true);
      break;
    case StepOp::kPoll:
      s->poll_ep(st.ep);  // its CQE reads are the points; an empty CQ is not waited on
      break;
    case StepOp::kFlush:
      RawQp::flush();
      break;
    case StepOp::kYield:
      emu::sched::point(emu::sched::kPointYield);
      break;
  }
}

Scenario make(Rig& rig, const StepSpec& spec) {
  Shared s = start(rig, spec.pairs);
  uctlite::WorkerConfig wc;
  wc.api = uctlite::Api::direct;
  wc.thread_mode = *uctlite::parse_thread_mode(spec.thread_mode);
  wc.mmio = *uctlite::parse_mmio(spec.mmio);
  std::string err;
  s->worker = rig.worker(wc, spec.pairs, &s->eps, &err);
  if (!s->worker) {
    Scenario sc;
    sc.final_check = [err] { return "rig: " + err; };
    return sc;
  }
  Plan plan = plan_messages(spec, *s);
  std::vector<Actor> actors;
  for (size_t a = 0; a < spec.actors.size(); ++a) {
    const StepActor& act = spec.actors[a];
    std::vector<size_t> msgs = plan.msg_of_step[a];
    actors.push_back({act.name, [s, act, msgs] {
                        for (size_t i = 0; i < act.steps.size(); ++i)
                          run_step(s, act.steps[i], msgs[i]);
                      }});
  }
  emu::sched::Visibility profile;
  emu::sched::parse_visibility(spec.profile.c_str(), &profile);
  if (profile == emu::sched::Visibility::kSc) return finish(s, std::move(actors));
  s->buffers = std::make_unique<emu::sched::StoreBuffers>(profile, spec.write_combining);
  Scenario sc;
  s->buffers->add_posters(sc, std::move(actors));
  sc.actors.push_back(rig.device().actor());
  sc.final_check = [s] { return s->check(); };
  return sc;
}

}  // namespace

bool validate(const StepSpec& spec, std::string* err) {
  emu::sched::Visibility v;
  if (!uctlite::parse_thread_mode(spec.thread_mode))
    *err = "unknown thread mode '" + spec.thread_mode + "' (single, serialized)";
  else if (!uctlite::parse_mmio(spec.mmio))
    *err = "unknown mmio mode '" + spec.mmio + "' (bf_post, bf_post_mt, db_lock)";
  else if (!emu::sched::parse_visibility(spec.profile.c_str(), &v))
    *err = "unknown profile '" + spec.profile + "' (sc, x86, weak)";
  else if (spec.pairs.empty() || spec.actors.empty())
    *err = "a scenario needs at least one pair and one actor";
  if (!err->empty()) return false;
  std::vector<uint32_t> slots(kRigQps, 0);
  for (uint32_t p : spec.pairs)
    if (p >= kRigQps) *err = "pair " + std::to_string(p) + " is not a rig pair (0..16)";
  for (const StepActor& a : spec.actors)
    for (const Step& st : a.steps) {
      if (st.op != StepOp::kPost && st.op != StepOp::kPoll) continue;
      if (st.ep >= spec.pairs.size()) {
        *err = a.name + ": endpoint " + std::to_string(st.ep) + " out of range";
      } else if (st.op == StepOp::kPost) {
        if (st.len == 0 || st.len > 200) *err = a.name + ": a message is 1..200 bytes";
        if (++slots[spec.pairs[st.ep]] > kSlotsPerQp)
          *err = "more than " + std::to_string(kSlotsPerQp) + " messages on one pair";
      }
    }
  return err->empty();
}

ScenarioDef step_scenario(const StepSpec& spec) {
  ScenarioDef d;
  d.name = spec.name;
  d.report = "a step scenario";
  d.buggy = false;
  d.pairs = spec.pairs;
  d.what = "given as steps";
  d.make = [spec](Rig& r) { return make(r, spec); };
  return d;
}

}  // namespace race
