// SPDX-License-Identifier: BSD-2-Clause
// emu-ctl: controls of the emulated devices from outside any verbs program. It attaches to the
// fabric the programs use (EMU_FABRIC, EMU_SHM_DIR) as one more process and acts through the C++
// control API (emu/control.h), so a test or harness can do the same without this tool.
//
//   emu-ctl port DEV PORT           print the port's state
//   emu-ctl port DEV PORT down|up   take the port down (a cable pull) or bring it back up
//   emu-ctl timers [hold|run]       the transport timers (ACK timeout, RNR timer): held or running
//   emu-ctl census [--json]         every object, its owner process, XRC domains and TGT QPs
//   emu-ctl check                   the segment consistency checker (emu/check.h)
//   emu-ctl heap [--reclaim]        the heap audit: blocks leaked by processes killed mid-change
//   emu-ctl races [--json] [--from N]  the race events the devices recorded
//   emu-ctl faults [set RULES|clear]  the fabric's wire fault rules and counters (emu/faults.h)
//   emu-ctl inject [...]            error injection: rules, async events, QP errors, overruns
//   emu-ctl knobs [--markdown]      every EMU_* variable with its default (docs/knobs.md's table)
//   emu-ctl fabrics                 this user's fabrics in EMU_SHM_DIR: size, processes, kept
//   emu-ctl rm FABRIC [--force]     remove a fabric's segment
//   emu-ctl persist FABRIC on|off   keep a fabric with no process attached, or not
//   emu-ctl help
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "emu/census.h"
#include "emu/check.h"
#include "emu/config.h"
#include "emu/control.h"
#include "emu/fabrics.h"
#include "emu/faults.h"
#include "emu/race_log.h"
#include "emu/segment.h"
#include "emu_ctl_inject.h"

namespace {

constexpr int kExitFailed = 1;  // the control could not be applied
constexpr int kExitUsage = 2;

struct Command {
  const char* name;
  const char* args;
  const char* help;
  int (*run)(int argc, char** argv);  // argv[0] is the command's name
};

int cmd_port(int argc, char** argv);
int cmd_timers(int argc, char** argv);
int cmd_census(int argc, char** argv);
int cmd_races(int argc, char** argv);
int cmd_check(int argc, char** argv);
int cmd_heap(int argc, char** argv);
int cmd_faults(int argc, char** argv);
int cmd_inject(int argc, char** argv);
int cmd_knobs(int argc, char** argv);
int cmd_fabrics(int argc, char** argv);
int cmd_rm(int argc, char** argv);
int cmd_persist(int argc, char** argv);
int cmd_help(int argc, char** argv);

const Command kCommands[] = {
    {"port", "DEV PORT [down|up]",
     "print the state of port PORT (1-based) of device DEV (emu0, ...), or take it down (as a "
     "cable pull: its QPs stop reaching anyone, contexts get IBV_EVENT_PORT_ERR) or up "
     "(IBV_EVENT_PORT_ACTIVE)",
     cmd_port},
    {"timers", "[hold|run]",
     "print whether the fabric's transport timers run, or hold them (no QP's ACK timeout or RNR "
     "timer counts, in any process: a stalled send neither retries nor spends retry_cnt or "
     "rnr_retry, as while a debugger stops its peer) or let them run on from where they stood",
     cmd_timers},
    {"census", "[--json]",
     "every live object of the fabric per device with its owner process (alive or dead), XRC "
     "domains with their inode and use counts, TGT QPs with their handles and holders, orphaned "
     "TGT QPs (creator gone), and the count of objects owned by dead processes that no policy "
     "keeps; as text or JSON. Attaching runs the sweep first: dead processes' objects go",
     cmd_census},
    {"check", "",
     "walk the fabric's segment: every table slot, the rings each object owns, the heap's bitmaps "
     "(each block free or owned by one object), process records and shared locks; prints each "
     "problem and exits 1 if any. Run it on a quiet fabric (no object made or destroyed meanwhile)",
     cmd_check},
    {"heap", "[--reclaim]",
     "the heap audit (docs/design/reliability.md, \"Process death\"): the segment heap's blocks "
     "that "
     "are neither free nor named by an object — left by a process killed inside an allocation "
     "or a free, or by a sweeper killed part way — as `N leaked heap blocks (B bytes)`; "
     "--reclaim gives them back (the sweep of the dead does so too). Waits for objects being "
     "made. Attaching runs the sweep first",
     cmd_heap},
    {"races", "[--json] [--from N]",
     "the race events the devices recorded (torn BlueFlame WQEs, doorbell records going "
     "backwards or ahead, double and stale WQEs, lock-free QPs entered by two threads: "
     "docs/design/doorbells-and-mmio.md), oldest first, each with its kind, device, QP, register, "
     "slot, writer "
     "threads and what the device executed; --from N: events numbered N and later",
     cmd_races},
    {"faults", "[set RULES | clear]",
     "print the fabric's wire fault rules and what they did (packets dropped, duplicated, "
     "reordered, delayed, corrupted; retransmissions, NAKs, ACK timeouts), or replace the rules "
     "(RULES as EMU_FAULTS: docs/design/reliability.md), or remove them",
     cmd_faults},
    {"inject", "[set RULES | clear | event TYPE OBJ [PORT] | qp-error QPN | overrun CQ]",
     "print the fabric's error injection rules and how often each acted, replace them (RULES as "
     "EMU_INJECT: docs/design/reliability.md) or remove them; or act now: raise async event TYPE "
     "(qp_fatal, cq_err, srq_limit_reached, port_err, device_fatal, ...) on OBJ (a QP number, a "
     "CQ or SRQ handle, a device name for port and device events, with PORT) with the state "
     "change hardware makes with it, move QP QPN to ERR (IBV_EVENT_QP_FATAL), or make CQ's next "
     "CQE find it full (IBV_EVENT_CQ_ERR, its QPs to ERR)",
     cmd_inject},
    {"knobs", "[--markdown]",
     "every EMU_* variable with its default and meaning, from the table in the code; --markdown: "
     "as the table of docs/knobs.md (tools/knobs-doc.sh checks the two are the same)",
     cmd_knobs},
    {"fabrics", "",
     "this user's fabrics in $EMU_SHM_DIR: the size each can grow to, the tmpfs it holds, its "
     "live processes, the XRC objects it keeps (policy xrcd/creator) and whether it is "
     "persistent. A fabric with none of these goes at the next attach of any fabric",
     cmd_fabrics},
    {"rm", "FABRIC [--force]",
     "remove FABRIC's segment file; refused while a process is attached (or the file is another "
     "build's) unless --force (attached processes keep their mapping; the next attach makes a "
     "new segment)",
     cmd_rm},
    {"persist", "FABRIC on|off",
     "on: FABRIC's segment stays when no process is attached (made now if absent), as "
     "EMU_FABRIC_PERSIST=1 does; off: it goes with its last process (now, if none is attached "
     "and no XRC domain keeps it)",
     cmd_persist},
    {"help", "", "this text", cmd_help},
};

void usage(FILE* out) {
  std::fprintf(out, "usage: emu-ctl COMMAND [ARGS...]\n\ncommands:\n");
  for (const Command& c : kCommands)
    std::fprintf(out, "  %s %s\n      %s\n", c.name, c.args, c.help);
  std::fprintf(out,
               "\nThe fabric is the one of $EMU_FABRIC (default: default) in $EMU_SHM_DIR, as for "
               "programs run through emu-run.\n");
}

int cmd_help(int, char**) {
  usage(stdout);
  return 0;
}

// The fabric's segment, attached only if some program made it: a control on a fabric nobody uses
// is almost always a wrong EMU_FABRIC, and creating the file would hide that.
emu::Segment* attach() {
  const emu::Config& cfg = emu::config();
  std::string path = cfg.segment_path();
  if (access(path.c_str(), F_OK) != 0) {
    std::fprintf(stderr,
                 "emu-ctl: fabric '%s' has no segment (%s: %s): no program has used emulated "
                 "devices on it; set EMU_FABRIC/EMU_SHM_DIR as for the programs\n",
                 cfg.fabric.c_str(), path.c_str(), std::strerror(errno));
    return nullptr;
  }
  return emu::Segment::get();  // logs why on failure
}

bool parse_port(const char* s, uint32_t* port) {
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(s, &end, 10);
  if (errno || end == s || *end || v == 0 || v > 255) return false;
  *port = static_cast<uint32_t>(v);
  return true;
}

const char* state_name(uint8_t s) { return s == emu::kPortActive ? "PORT_ACTIVE" : "PORT_DOWN"; }
const char* phys_name(uint8_t p) { return p == emu::kPhysLinkUp ? "LINK_UP" : "DISABLED"; }

int cmd_port(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    usage(stderr);
    return kExitUsage;
  }
  uint32_t port = 0;
  if (!parse_port(argv[2], &port)) {
    std::fprintf(stderr, "emu-ctl: bad port number '%s'\n", argv[2]);
    return kExitUsage;
  }
  bool set = argc == 4;
  bool up = false;
  if (set) {
    std::string_view what = argv[3];
    if (what != "down" && what != "up") {
      std::fprintf(stderr, "emu-ctl: port state must be 'down' or 'up', not '%s'\n", argv[3]);
      return kExitUsage;
    }
    up = what == "up";
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  uint32_t dev = 0;
  if (emu::find_device(seg, argv[1], &dev) != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: no device '%s' on fabric '%s'\n", argv[1],
                 emu::config().fabric.c_str());
    return kExitFailed;
  }
  bool changed = false;
  emu::Status st = set ? emu::set_port_state(seg, dev, port, up, &changed) : emu::Status::ok;
  uint8_t state = 0;
  if (st == emu::Status::ok) st = emu::get_port_state(seg, dev, port, &state);
  if (st != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: %s port %u: %s\n", argv[1], port, emu::status_name(st));
    return kExitFailed;
  }
  std::printf("%s port %u: state %s (%u), phys_state %s (%u)%s\n", argv[1], port, state_name(state),
              state, phys_name(emu::port_phys_state(state)), emu::port_phys_state(state),
              set && !changed ? " (unchanged)" : "");
  return 0;
}

int cmd_timers(int argc, char** argv) {
  bool set = argc == 2;
  std::string_view what = set ? argv[1] : "";
  if (argc > 2 || (set && what != "hold" && what != "run")) {
    std::fprintf(stderr, "usage: emu-ctl timers [hold|run]\n");
    return kExitUsage;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  bool changed = false;
  if (set) emu::set_transport_timers_held(seg, what == "hold", &changed);
  std::printf("transport timers: %s%s\n", emu::transport_timers_held(seg) ? "held" : "running",
              set && !changed ? " (unchanged)" : "");
  return 0;
}

// No segment file: no process is attached and nothing is kept (the last process removed it), so
// the census and the race log are empty rather than an error (and say nothing else: callers parse
// the output with stderr merged in).
bool fabric_is_empty() {
  return access(emu::config().segment_path().c_str(), F_OK) != 0 && errno == ENOENT;
}

int cmd_census(int argc, char** argv) {
  bool json = argc >= 2 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 2 || (argc == 2 && !json)) {
    std::fprintf(stderr, "usage: emu-ctl census [--json]\n");
    return kExitUsage;
  }
  emu::Census c;
  if (fabric_is_empty()) {
    c.fabric = emu::config().fabric;
    c.leaked_heap_blocks = 0;
    c.race_counts.assign(emu::config().num_devices, std::vector<uint64_t>(emu::kRaceKinds, 0));
    std::fputs((json ? emu::census_json(c) : emu::census_text(c)).c_str(), stdout);
    return 0;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  c = emu::take_census(seg);
  std::fputs((json ? emu::census_json(c) : emu::census_text(c)).c_str(), stdout);
  return 0;
}

int cmd_check(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: emu-ctl check\n");
    return kExitUsage;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  emu::CheckReport r = emu::check_segment(seg);
  std::fputs(emu::check_text(r).c_str(), stdout);
  return r.ok() ? 0 : kExitFailed;
}

int cmd_inject(int argc, char** argv) { return emu_ctl_inject(argc, argv, attach); }

int cmd_heap(int argc, char** argv) {
  bool reclaim = argc == 2 && std::strcmp(argv[1], "--reclaim") == 0;
  if (argc > 2 || (argc == 2 && !reclaim)) {
    std::fprintf(stderr, "usage: emu-ctl heap [--reclaim]\n");
    return kExitUsage;
  }
  if (fabric_is_empty()) {
    std::printf("0 leaked heap blocks (0 bytes): no segment\n");
    return 0;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  emu::HeapAudit a = seg->audit_heap(reclaim, true);
  if (!a.done) {
    std::fprintf(stderr, "emu-ctl: the heap audit could not run\n");
    return kExitFailed;
  }
  std::printf("%llu leaked heap blocks (%llu bytes)%s\n",
              static_cast<unsigned long long>(a.leaked_blocks),
              static_cast<unsigned long long>(a.leaked_bytes),
              reclaim && a.leaked_blocks ? ", given back" : "");
  return 0;
}

int cmd_faults(int argc, char** argv) {
  bool set = argc >= 3 && std::strcmp(argv[1], "set") == 0;
  bool clear = argc == 2 && std::strcmp(argv[1], "clear") == 0;
  if (argc > 1 && !set && !clear) {
    std::fprintf(stderr, "emu-ctl: faults takes no argument, 'set RULES' or 'clear'\n");
    return kExitUsage;
  }
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  if (set) {
    std::string err;
    if (emu::faults_set(seg, argv[2], &err) != emu::Status::ok) {
      std::fprintf(stderr, "emu-ctl: faults: %s\n", err.c_str());
      return kExitUsage;
    }
  }
  if (clear) emu::faults_clear(seg);
  emu::FaultRules rules = emu::faults_get(seg);
  emu::FaultCounters c = emu::faults_counters(seg);
  std::printf("rules %s\n", rules.n ? emu::faults_format(rules).c_str() : "none");
  for (int k = emu::kFaultDrop; k < emu::kFaultKinds; ++k)
    std::printf("%s %llu\n", emu::fault_name(static_cast<emu::FaultKind>(k)),
                static_cast<unsigned long long>(c.injected[k]));
  std::printf("retransmitted %llu\nnaks %llu\ntimeouts %llu\n",
              static_cast<unsigned long long>(c.retransmitted),
              static_cast<unsigned long long>(c.naks), static_cast<unsigned long long>(c.timeouts));
  return 0;
}

int cmd_races(int argc, char** argv) {
  bool json = false;
  uint64_t from = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
      from = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: emu-ctl races [--json] [--from N]\n");
      return kExitUsage;
    }
  }
  bool empty = fabric_is_empty();
  emu::Segment* seg = empty ? nullptr : attach();
  if (!seg && !empty) return kExitFailed;
  std::vector<emu::RaceRecord> ev;
  if (seg) ev = emu::read_races(seg, from ? from - 1 : 0);
  if (json) {
    std::string o = "[";
    for (size_t i = 0; i < ev.size(); ++i) o += (i ? ",\n " : "") + emu::race_json(ev[i]);
    std::printf("%s]\n", o.c_str());
    return 0;
  }
  std::printf("%llu race events recorded on fabric '%s'\n",
              static_cast<unsigned long long>(seg ? emu::races_recorded(seg) : 0),
              emu::config().fabric.c_str());
  for (const emu::RaceRecord& e : ev)
    std::printf(
        "#%llu %s emu%u qp 0x%06x ctx %d reg %d slot %u threads %u,%u (pid %d) values %u,%u: %s\n",
        static_cast<unsigned long long>(e.seq), emu::race_kind_name(e.kind), e.dev, e.qpn,
        e.ctx == 0xffffffffu ? -1 : static_cast<int>(e.ctx),
        e.reg == 0xffff ? -1 : static_cast<int>(e.reg), e.slot, e.writers[0], e.writers[1], e.pid,
        e.value[0], e.value[1], emu::race_action_name(e.action));
  return 0;
}

// A table cell: a '|' in the text would end the cell.
std::string markdown_cell(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (*p == '|') out += '\\';
    out += *p;
  }
  return out;
}

int cmd_knobs(int argc, char** argv) {
  bool markdown = argc == 2 && std::strcmp(argv[1], "--markdown") == 0;
  if (argc > 2 || (argc == 2 && !markdown)) {
    std::fprintf(stderr, "usage: emu-ctl knobs [--markdown]\n");
    return kExitUsage;
  }
  int n = 0;
  const emu::KnobDoc* knobs = emu::knob_docs(&n);
  if (markdown) std::printf("| variable | default | values | meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < n; ++i) {
    const emu::KnobDoc& k = knobs[i];
    std::string values = emu::knob_allowed(k);
    if (markdown)
      std::printf("| %s | %s | %s | %s |\n", k.name, k.default_value,
                  markdown_cell(values.c_str()).c_str(), markdown_cell(k.doc).c_str());
    else
      std::printf("%s (default %s; %s)\n    %s\n", k.name, k.default_value, values.c_str(), k.doc);
  }
  return 0;
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

int cmd_fabrics(int argc, char**) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: emu-ctl fabrics\n");
    return kExitUsage;
  }
  const emu::Config& cfg = emu::config();
  std::vector<emu::FabricInfo> fabrics = emu::list_fabrics(cfg);
  std::printf("%zu fabric(s) of uid %u in %s\n", fabrics.size(), getuid(), cfg.shm_dir.c_str());
  if (fabrics.empty()) return 0;
  std::printf("%-24s %8s %9s %6s %5s %s\n", "FABRIC", "SIZE", "RESERVED", "PROCS", "KEPT",
              "PERSISTENT");
  for (const emu::FabricInfo& f : fabrics) {
    if (!f.readable) {
      std::printf("%-24s %8s %9s %6s %5s %s\n", f.name.c_str(), mib(f.size).c_str(),
                  mib(f.reserved).c_str(), "?", "?", "? (another build's layout)");
      continue;
    }
    std::printf("%-24s %8s %9s %6u %5u %s\n", f.name.c_str(), mib(f.size).c_str(),
                mib(f.reserved).c_str(), f.live_procs, f.kept_objects, f.persistent ? "yes" : "no");
  }
  return 0;
}

int cmd_rm(int argc, char** argv) {
  bool force = argc == 3 && std::strcmp(argv[2], "--force") == 0;
  if (argc < 2 || argc > 3 || (argc == 3 && !force)) {
    std::fprintf(stderr, "usage: emu-ctl rm FABRIC [--force]\n");
    return kExitUsage;
  }
  std::string why;
  if (emu::remove_fabric(emu::config(), argv[1], force, &why) != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: %s\n", why.c_str());
    return kExitFailed;
  }
  std::printf("fabric '%s' removed\n", argv[1]);
  return 0;
}

int cmd_persist(int argc, char** argv) {
  bool on = argc == 3 && std::strcmp(argv[2], "on") == 0;
  if (argc != 3 || (!on && std::strcmp(argv[2], "off") != 0)) {
    std::fprintf(stderr, "usage: emu-ctl persist FABRIC on|off\n");
    return kExitUsage;
  }
  // This process attaches as one of FABRIC's: its exit then removes the segment if off left it
  // unused.
  setenv("EMU_FABRIC", argv[1], 1);
  if (!on && access(emu::config().segment_path().c_str(), F_OK) != 0) {
    std::printf("fabric '%s': not persistent (no segment)\n", argv[1]);
    return 0;
  }
  emu::Segment* seg = emu::Segment::get();  // logs why on failure
  if (!seg) return kExitFailed;
  emu::set_persistent(seg, on);
  std::printf("fabric '%s': %s\n", argv[1], on ? "persistent" : "not persistent");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return kExitUsage;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    // A malformed knob (said on stderr) would point a command at a default fabric or directory
    // the caller did not name; only the knob listing itself runs regardless.
    if (std::strcmp(c.name, "knobs") != 0 && emu::knobs_refused()) return kExitFailed;
    return c.run(argc - 1, argv + 1);
  }
  if (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)
    return cmd_help(0, nullptr);
  std::fprintf(stderr, "emu-ctl: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return kExitUsage;
}
