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
#include <cstring>
#include <string>
#include <string_view>

#include "emu/control.h"
#include "emu/inject.h"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

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

int act(emu::Segment* seg, int argc, char** argv) {
  std::string_view what = argv[1];
  uint32_t obj = 0, port = 0, type = emu::kEvQpFatal;
  if (what == "event" && !emu::inject_event_type(argv[2], &type)) {
    std::fprintf(stderr, "emu-ctl: inject: unknown event '%s'\n", argv[2]);
    return kExitUsage;
  }
  const char* obj_text = what == "event" ? argv[3] : argv[2];
  emu::Status st = event_object(seg, what == "overrun" ? emu::kEvCqErr : type, obj_text, &obj);
  if (st == emu::Status::ok && what == "event" && argc == 5 && !parse_number(argv[4], &port))
    st = emu::Status::invalid;
  if (st == emu::Status::ok) {
    st = what == "overrun"    ? emu::inject_cq_overrun(seg, obj)
         : what == "qp-error" ? emu::inject_qp_error(seg, obj)
                              : emu::inject_event(seg, type, obj, port);
  }
  if (st != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: inject %s %s: %s\n", argv[1], obj_text, emu::status_name(st));
    return kExitFailed;
  }
  return 0;
}

}  // namespace

int emu_ctl_inject(int argc, char** argv, emu::Segment* (*attach)()) {
  std::string_view what = argc > 1 ? argv[1] : "";
  bool ok = argc == 1 || (what == "set" && argc == 3) || (what == "clear" && argc == 2) ||
            (what == "event" && (argc == 4 || argc == 5)) ||
            ((what == "qp-error" || what == "overrun") && argc == 3);
  if (!ok) {
    std::fprintf(stderr,
                 "usage: emu-ctl inject [set RULES | clear | event TYPE OBJ [PORT] | "
                 "qp-error QPN | overrun CQ]\n");
    return kExitUsage;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  if (what == "set") {
    std::string err;
    emu::InjectRules rules;
    if (emu::inject_parse(argv[2], &rules, &err) != emu::Status::ok) {
      std::fprintf(stderr, "emu-ctl: inject: %s\n", err.c_str());
      return kExitUsage;
    }
    emu::inject_set(seg, rules);
  }
  if (what == "clear") emu::inject_clear(seg);
  if (what == "event" || what == "qp-error" || what == "overrun") return act(seg, argc, argv);
  return show(seg);
}
