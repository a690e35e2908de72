// SPDX-License-Identifier: BSD-2-Clause
// emu-ctl inject: error injection on a running fabric (emu/inject.h, docs/design/reliability.md).
//   emu-ctl inject                      the rules and how often each acted
//   emu-ctl inject set RULES | clear    replace the rules (EMU_INJECT's grammar) or remove them
//   emu-ctl inject event TYPE OBJ [PORT]  an async event with its state change (OBJ: a QP number,
//                                       a CQ or SRQ handle, or a device name for port and device
//                                       events)
//   emu-ctl inject qp-error QPN         the QP to ERR with IBV_EVENT_QP_FATAL
//   emu-ctl inject overrun CQ           the CQ's next CQE finds it full
#include "emu_ctl_inject.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "emu/cli.h"
#include "emu/control.h"
#include "emu/inject.h"

namespace {

constexpr int kExitFailed = 1;

bool parse_number(const char* s, uint32_t* v) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(s, &end, 0);
  if (errno || end == s || *end || x > 0xffffffffull) return false;
  *v = static_cast<uint32_t>(x);
  return true;
}

int show(emu::Segment* seg) {
  emu::InjectRules rules = emu::inject_get(seg);
  uint32_t fired[emu::kMaxInjectRules];
  emu::inject_fired(seg, fired);
  std::printf("rules %s\n", rules.n ? emu::inject_format(rules).c_str() : "none");
  for (uint32_t i = 0; i < rules.n; ++i) std::printf("fired %u %u\n", i, fired[i]);
  return 0;
}

// OBJ of an event: a device name for port and device events, else a number.
emu::Status event_object(emu::Segment* seg, uint32_t type, const char* text, uint32_t* obj) {
  bool by_device = type == emu::kEvDeviceFatal ||
                   (type >= emu::kEvPortActive && type <= emu::kEvSmChange) ||
                   type == emu::kEvClientReregister || type == emu::kEvGidChange;
  if (by_device) return emu::find_device(seg, text, obj);
  return parse_number(text, obj) ? emu::Status::ok : emu::Status::invalid;
}

int act(emu::Segment* seg, const std::string& what, const InjectArgs& a) {
  uint32_t obj = 0, type = emu::kEvQpFatal;
  if (what == "event") emu::inject_event_type(a.type.c_str(), &type);  // checked on the line
  emu::Status st = event_object(seg, what == "overrun" ? emu::kEvCqErr : type, a.obj.c_str(), &obj);
  if (st == emu::Status::ok) {
    st = what == "overrun"    ? emu::inject_cq_overrun(seg, obj)
         : what == "qp-error" ? emu::inject_qp_error(seg, obj)
                              : emu::inject_event(seg, type, obj, a.port);
  }
  if (st != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: inject %s %s: %s\n", what.c_str(), a.obj.c_str(),
                 emu::status_name(st));
    return kExitFailed;
  }
  return 0;
}

// Checks of the line's values, each naming what it wanted.
const CLI::Validator kEventType(
    [](const std::string& name) {
      uint32_t type = 0;
      return emu::inject_event_type(name.c_str(), &type) ? "" : "unknown event " + name;
    },
    "TYPE");
const CLI::Validator kNumber(
    [](const std::string& text) {
      uint32_t v = 0;
      return parse_number(text.c_str(), &v) ? "" : text + " is not a 32-bit number";
    },
    "NUMBER");

}  // namespace

void add_inject_commands(CLI::App* inject, InjectArgs& a) {
  inject->require_subcommand(0, 1);
  inject->add_subcommand("set", "replace the rules")
      ->add_option("RULES", a.rules, "as EMU_INJECT")
      ->required();
  inject->add_subcommand("clear", "remove the rules");
  CLI::App* event = inject->add_subcommand("event", "raise an async event with its state change");
  event->add_option("TYPE", a.type, "qp_fatal, cq_err, srq_limit_reached, port_err, ...")
      ->required()
      ->check(kEventType);
  event->add_option("OBJ", a.obj, "a QP number, a CQ or SRQ handle, or a device name")->required();
  event->add_option("PORT", a.port, "the port of a port event")->check(kNumber);
  inject->add_subcommand("qp-error", "move a QP to ERR (IBV_EVENT_QP_FATAL)")
      ->add_option("QPN", a.obj, "the QP's number")
      ->required()
      ->check(kNumber);
  inject->add_subcommand("overrun", "the CQ's next CQE finds it full (IBV_EVENT_CQ_ERR)")
      ->add_option("CQ", a.obj, "the CQ's handle")
      ->required()
      ->check(kNumber);
}

int emu_ctl_inject(const CLI::App& inject, const InjectArgs& a, emu::Segment* (*attach)()) {
  const auto chosen = inject.get_subcommands();
  const std::string what = chosen.empty() ? "" : chosen.front()->get_name();
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  if (what == "set") {
    std::string err;
    emu::InjectRules rules;
    if (emu::inject_parse(a.rules.c_str(), &rules, &err) != emu::Status::ok) {
      std::fprintf(stderr, "emu-ctl: inject: %s\n", err.c_str());
      return emu::cli::kExitUsage;
    }
    emu::inject_set(seg, rules);
  }
  if (what == "clear") emu::inject_clear(seg);
  if (what == "event" || what == "qp-error" || what == "overrun") return act(seg, what, a);
  return show(seg);
}
