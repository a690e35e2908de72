// SPDX-License-Identifier: BSD-2-Clause
// libemu_sched.so: what a program-wide run's report shows of the run itself: the listing of its
// last steps (who did what, and which function's instruction made each register store) and the
// Perfetto trace (EMU_SCHEDULE_TRACE).
#include <dlfcn.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "emu/sched/trace.h"
#include "libc.h"

namespace {

namespace sched = emu::sched;

// "uct_rc_mlx5_ep_am_short+0x1c4 (libuct_ib.so.0)", or the address alone where no dynamic symbol
// covers it.
std::string function_at(uint64_t insn) {
  char buf[256];
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(insn), &info) && info.dli_sname) {
    const char* lib = info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
    std::snprintf(buf, sizeof buf, "%s+0x%" PRIx64 " (%s)", info.dli_sname,
                  insn - reinterpret_cast<uint64_t>(info.dli_saddr),
                  lib ? lib + 1 : (info.dli_fname ? info.dli_fname : "?"));
  } else {
    std::snprintf(buf, sizeof buf, "0x%" PRIx64, insn);
  }
  return buf;
}

std::string actor_name(const sched::RunResult& r, sched::ActorId a) {
  return a < r.positions.size() ? r.positions[a].name : "actor " + std::to_string(a);
}

std::string step_line(const sched::RunResult& r, const sched::TraceEvent& e, bool switched) {
  char head[96];
  std::snprintf(head, sizeof head, "emu-sched:   %6u %s%-9s %-12s", e.step, switched ? "> " : "  ",
                actor_name(r, e.actor).c_str(), e.label ? e.label : "user");
  std::string line = head;
  char what[64];
  std::snprintf(what, sizeof what, " 0x%" PRIx64, e.addr);
  line += what;
  if (e.kind == sched::kPointMmioStore) line += " by " + function_at(e.value);
  return line + "\n";
}

bool device_step(uint16_t kind) {
  return kind >= sched::kPointDevDoorbell && kind <= sched::kPointDevCqe;
}

}  // namespace

std::string emu_sched::last_steps(const sched::RunResult& r, size_t n) {
  if (r.trace.empty()) return {};
  size_t from = r.trace.size() > n ? r.trace.size() - n : 0;
  std::string out = "emu-sched: the run's last " + std::to_string(r.trace.size() - from) +
                    " steps (> a switch; register stores name their instruction's function):\n";
  for (size_t i = from; i < r.trace.size(); ++i)
    out += step_line(r, r.trace[i], i > 0 && r.trace[i - 1].actor != r.trace[i].actor);
  return out;
}

bool emu_sched::write_program_trace(const std::string& path, const sched::RunResult& r,
                                    const std::vector<std::string>& races) {
  std::vector<std::string> names;
  for (const sched::ActorPosition& p : r.positions) names.push_back(p.name);
  const auto device = static_cast<sched::ActorId>(names.size());
  names.push_back("device (inline)");
  std::vector<sched::TraceEvent> events = r.trace;
  for (sched::TraceEvent& e : events)
    if (device_step(e.kind)) e.actor = device;
  std::vector<sched::TraceInstant> instants;
  uint32_t end = r.trace.empty() ? 0 : r.trace.back().step;
  for (const std::string& race : races) instants.push_back({end, device, "race", race});
  if (!r.signature.empty()) instants.push_back({end, device, r.signature, r.describe()});
  return sched::write_trace_json(path, sched::TraceInput{events, names, instants});
}
