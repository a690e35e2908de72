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
//   emu-ctl help                    (or --help; `emu-ctl COMMAND --help` for one command)
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "emu/census.h"
#include "emu/check.h"
#include "emu/cli.h"
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

// What the command line gave, for whichever command it named.
struct Args {
  std::string dev, state, fabric, rules;
  uint32_t port = 0;
  bool json = false, reclaim = false, markdown = false, force = false;
  uint64_t from = 0;
  InjectArgs inject;
};

struct Command {
  const char* name;
  const char* summary;  // a line, for the list of commands
  const char* help;     // the whole story, under the command's own --help
  void (*options)(CLI::App* cmd, Args& a);
  int (*run)(const CLI::App& cmd, const Args& a);
};

int cmd_port(const CLI::App& cmd, const Args& a);
int cmd_timers(const CLI::App& cmd, const Args& a);
int cmd_census(const CLI::App& cmd, const Args& a);
int cmd_races(const CLI::App& cmd, const Args& a);
int cmd_check(const CLI::App& cmd, const Args& a);
int cmd_heap(const CLI::App& cmd, const Args& a);
int cmd_faults(const CLI::App& cmd, const Args& a);
int cmd_inject(const CLI::App& cmd, const Args& a);
int cmd_knobs(const CLI::App& cmd, const Args& a);
int cmd_fabrics(const CLI::App& cmd, const Args& a);
int cmd_rm(const CLI::App& cmd, const Args& a);
int cmd_persist(const CLI::App& cmd, const Args& a);
int cmd_help(const CLI::App& cmd, const Args& a);

void no_options(CLI::App*, Args&) {}

const Command kCommands[] = {
    {"port", "print a port's state, or take it down or up",
     "print the state of port PORT (1-based) of device DEV (emu0, ...), or take it down (as a "
     "cable pull: its QPs stop reaching anyone, contexts get IBV_EVENT_PORT_ERR) or up "
     "(IBV_EVENT_PORT_ACTIVE)",
     [](CLI::App* c, Args& a) {
       c->add_option("DEV", a.dev, "a device: emu0, ...")->required();
       c->add_option("PORT", a.port, "its port, 1-based")
           ->required()
           ->check(emu::cli::in_range(1, 255));
       c->add_option("STATE", a.state, "down (a cable pull) or up")
           ->check(CLI::IsMember({"down", "up"}));
     },
     cmd_port},
    {"timers", "the transport timers: held or running",
     "print whether the fabric's transport timers run, or hold them (no QP's ACK timeout or RNR "
     "timer counts, in any process: a stalled send neither retries nor spends retry_cnt or "
     "rnr_retry, as while a debugger stops its peer) or let them run on from where they stood",
     [](CLI::App* c, Args& a) {
       c->add_option("STATE", a.state, "hold or run")->check(CLI::IsMember({"hold", "run"}));
     },
     cmd_timers},
    {"census", "every object, its owner process, XRC domains and TGT QPs",
     "every live object of the fabric per device with its owner process (alive or dead), XRC "
     "domains with their inode and use counts, TGT QPs with their handles and holders, orphaned "
     "TGT QPs (creator gone), and the count of objects owned by dead processes that no policy "
     "keeps; as text or JSON. Attaching runs the sweep first: dead processes' objects go",
     [](CLI::App* c, Args& a) { c->add_flag("--json", a.json, "as JSON"); }, cmd_census},
    {"check", "the segment consistency checker",
     "walk the fabric's segment: every table slot, the rings each object owns, the heap's bitmaps "
     "(each block free or owned by one object), process records and shared locks; prints each "
     "problem and exits 1 if any. Run it on a quiet fabric (no object made or destroyed meanwhile)",
     no_options, cmd_check},
    {"heap", "the heap audit: blocks leaked by processes killed mid-change",
     "the heap audit (docs/design/reliability.md, \"Process death\"): the segment heap's blocks "
     "that "
     "are neither free nor named by an object — left by a process killed inside an allocation "
     "or a free, or by a sweeper killed part way — as `N leaked heap blocks (B bytes)`; "
     "--reclaim gives them back (the sweep of the dead does so too). Waits for objects being "
     "made. Attaching runs the sweep first",
     [](CLI::App* c, Args& a) {
       c->add_flag("--reclaim", a.reclaim, "give the leaked blocks back");
     },
     cmd_heap},
    {"races", "the race events the devices recorded",
     "the race events the devices recorded (torn BlueFlame WQEs, doorbell records going "
     "backwards or ahead, double and stale WQEs, lock-free QPs entered by two threads: "
     "docs/design/doorbells-and-mmio.md), oldest first, each with its kind, device, QP, register, "
     "slot, writer "
     "threads and what the device executed; --from N: events numbered N and later",
     [](CLI::App* c, Args& a) {
       c->add_flag("--json", a.json, "as JSON");
       c->add_option("--from", a.from, "events numbered N and later")
           ->type_name("N")
           ->check(emu::cli::at_least(0));
     },
     cmd_races},
    {"faults", "the fabric's wire fault rules and counters",
     "print the fabric's wire fault rules and what they did (packets dropped, duplicated, "
     "reordered, delayed, corrupted; retransmissions, NAKs, ACK timeouts), or replace the rules "
     "(RULES as EMU_FAULTS: docs/design/reliability.md), or remove them",
     [](CLI::App* c, Args& a) {
       c->require_subcommand(0, 1);
       c->add_subcommand("set", "replace the rules")
           ->add_option("RULES", a.rules, "as EMU_FAULTS")
           ->required();
       c->add_subcommand("clear", "remove the rules");
     },
     cmd_faults},
    {"inject", "error injection: rules, async events, QP errors, overruns",
     "print the fabric's error injection rules and how often each acted, replace them (RULES as "
     "EMU_INJECT: docs/design/reliability.md) or remove them; or act now: raise async event TYPE "
     "(qp_fatal, cq_err, srq_limit_reached, port_err, device_fatal, ...) on OBJ (a QP number, a "
     "CQ or SRQ handle, a device name for port and device events, with PORT) with the state "
     "change hardware makes with it, move QP QPN to ERR (IBV_EVENT_QP_FATAL), or make CQ's next "
     "CQE find it full (IBV_EVENT_CQ_ERR, its QPs to ERR)",
     [](CLI::App* c, Args& a) { add_inject_commands(c, a.inject); }, cmd_inject},
    {"knobs", "every EMU_* variable with its default",
     "every EMU_* variable with its default and meaning, from the table in the code; --markdown: "
     "as the table of docs/knobs.md (tools/knobs-doc.sh checks the two are the same)",
     [](CLI::App* c, Args& a) {
       c->add_flag("--markdown", a.markdown, "as docs/knobs.md's table");
     },
     cmd_knobs},
    {"fabrics", "this user's fabrics in EMU_SHM_DIR: size, processes, kept",
     "this user's fabrics in $EMU_SHM_DIR: the size each can grow to, the tmpfs it holds, its "
     "live processes, the XRC objects it keeps (policy xrcd/creator) and whether it is "
     "persistent. A fabric with none of these goes at the next attach of any fabric",
     no_options, cmd_fabrics},
    {"rm", "remove a fabric's segment",
     "remove FABRIC's segment file; refused while a process is attached (or the file is another "
     "build's) unless --force (attached processes keep their mapping; the next attach makes a "
     "new segment)",
     [](CLI::App* c, Args& a) {
       c->add_option("FABRIC", a.fabric, "a fabric of `emu-ctl fabrics`")->required();
       c->add_flag("--force", a.force, "even while processes are attached");
     },
     cmd_rm},
    {"persist", "keep a fabric with no process attached, or not",
     "on: FABRIC's segment stays when no process is attached (made now if absent), as "
     "EMU_FABRIC_PERSIST=1 does; off: it goes with its last process (now, if none is attached "
     "and no XRC domain keeps it)",
     [](CLI::App* c, Args& a) {
       c->add_option("FABRIC", a.fabric, "a fabric's name")->required();
       c->add_option("STATE", a.state, "on or off")
           ->required()
           ->check(CLI::IsMember({"on", "off"}));
     },
     cmd_persist},
    {"help", "this text", "this text", no_options, cmd_help},
};

// The text of a command's own --help: its story, wrapped.
std::string wrapped(const char* text, size_t width = 96) {
  std::string out, line;
  for (const char* p = text; *p;) {
    const char* end = p;
    while (*end && *end != ' ') ++end;
    const std::string word(p, end);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    p = *end ? end + 1 : end;
  }
  return out + line;
}

int cmd_help(const CLI::App& cmd, const Args&) {
  // App::help() would show the help of the command chosen (this one): the whole list instead.
  const CLI::App* app = cmd.get_parent();
  std::fputs(
      app->get_formatter()->make_help(app, app->get_name(), CLI::AppFormatMode::Normal).c_str(),
      stdout);
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

const char* state_name(uint8_t s) { return s == emu::kPortActive ? "PORT_ACTIVE" : "PORT_DOWN"; }
const char* phys_name(uint8_t p) { return p == emu::kPhysLinkUp ? "LINK_UP" : "DISABLED"; }

int cmd_port(const CLI::App&, const Args& a) {
  const bool set = !a.state.empty(), up = a.state == "up";
  const uint32_t port = a.port;
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  uint32_t dev = 0;
  if (emu::find_device(seg, a.dev.c_str(), &dev) != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: no device '%s' on fabric '%s'\n", a.dev.c_str(),
                 emu::config().fabric.c_str());
    return kExitFailed;
  }
  bool changed = false;
  emu::Status st = set ? emu::set_port_state(seg, dev, port, up, &changed) : emu::Status::ok;
  uint8_t state = 0;
  if (st == emu::Status::ok) st = emu::get_port_state(seg, dev, port, &state);
  if (st != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: %s port %u: %s\n", a.dev.c_str(), port, emu::status_name(st));
    return kExitFailed;
  }
  std::printf("%s port %u: state %s (%u), phys_state %s (%u)%s\n", a.dev.c_str(), port,
              state_name(state), state, phys_name(emu::port_phys_state(state)),
              emu::port_phys_state(state), set && !changed ? " (unchanged)" : "");
  return 0;
}

int cmd_timers(const CLI::App&, const Args& a) {
  const bool set = !a.state.empty();
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  bool changed = false;
  if (set) emu::set_transport_timers_held(seg, a.state == "hold", &changed);
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

int cmd_census(const CLI::App&, const Args& a) {
  const bool json = a.json;
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

int cmd_check(const CLI::App&, const Args&) {
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  emu::CheckReport r = emu::check_segment(seg);
  std::fputs(emu::check_text(r).c_str(), stdout);
  return r.ok() ? 0 : kExitFailed;
}

int cmd_inject(const CLI::App& cmd, const Args& a) { return emu_ctl_inject(cmd, a.inject, attach); }

int cmd_heap(const CLI::App&, const Args& args) {
  const bool reclaim = args.reclaim;
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

int cmd_faults(const CLI::App& cmd, const Args& a) {
  const bool set = cmd.got_subcommand("set"), clear = cmd.got_subcommand("clear");
  emu::Segment* seg = attach();
  if (!seg) return kExitFailed;
  if (set) {
    std::string err;
    if (emu::faults_set(seg, a.rules.c_str(), &err) != emu::Status::ok) {
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

int cmd_races(const CLI::App&, const Args& a) {
  const bool json = a.json;
  const uint64_t from = a.from;
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

int cmd_knobs(const CLI::App&, const Args& a) {
  const bool markdown = a.markdown;
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

int cmd_fabrics(const CLI::App&, const Args&) {
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

int cmd_rm(const CLI::App&, const Args& a) {
  std::string why;
  if (emu::remove_fabric(emu::config(), a.fabric, a.force, &why) != emu::Status::ok) {
    std::fprintf(stderr, "emu-ctl: %s\n", why.c_str());
    return kExitFailed;
  }
  std::printf("fabric '%s' removed\n", a.fabric.c_str());
  return 0;
}

int cmd_persist(const CLI::App&, const Args& a) {
  const bool on = a.state == "on";
  // This process attaches as one of FABRIC's: its exit then removes the segment if off left it
  // unused.
  setenv("EMU_FABRIC", a.fabric.c_str(), 1);
  if (!on && access(emu::config().segment_path().c_str(), F_OK) != 0) {
    std::printf("fabric '%s': not persistent (no segment)\n", a.fabric.c_str());
    return 0;
  }
  emu::Segment* seg = emu::Segment::get();  // logs why on failure
  if (!seg) return kExitFailed;
  emu::set_persistent(seg, on);
  std::printf("fabric '%s': %s\n", a.fabric.c_str(), on ? "persistent" : "not persistent");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("controls of the emulated devices from outside any verbs program", "emu-ctl");
  app.require_subcommand(1);
  app.footer(
      "The fabric is the one of $EMU_FABRIC (default: default) in $EMU_SHM_DIR, as for programs "
      "run through emu-run.");
  Args a;
  for (const Command& c : kCommands) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    sub->footer(wrapped(c.help));
    c.options(sub, a);
  }
  const int status = emu::cli::parse(app, argc, argv);
  if (status >= 0) return status;
  const CLI::App& sub = *app.get_subcommands().front();
  for (const Command& c : kCommands) {
    if (sub.get_name() != c.name) continue;
    // A malformed knob (said on stderr) would point a command at a default fabric or directory
    // the caller did not name; only the knob listing itself runs regardless.
    if (std::strcmp(c.name, "knobs") != 0 && emu::knobs_refused()) return kExitFailed;
    return c.run(sub, a);
  }
  return kExitUsage;
}
