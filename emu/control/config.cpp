// SPDX-License-Identifier: BSD-2-Clause
#include "emu/config.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "emu/faults.h"
#include "emu/inject.h"
#include "emu/kill_point.h"
#include "emu/sched/program.h"

namespace emu {
namespace {

constexpr KnobDoc knob(const char* name, const char* dflt, const char* doc, KnobKind kind,
                       uint64_t lo = 0, uint64_t hi = 0, const char* words = nullptr,
                       bool (*check)(const char*, std::string*) = nullptr, bool zero_ok = false) {
  return KnobDoc{name, dflt, doc, kind, lo, hi, words, check, zero_ok};
}

// The knobs with a grammar of their own are checked by the parser that reads them, so that what
// is accepted here is exactly what their reader takes.
constexpr const char* kScheduleGrammar =
    "pct:seed=S[,depth=1..3][,k=N], random:seed=S or replay:<schedule>";
constexpr const char* kFaultsGrammar =
    "seed=S;KIND[:KEY=VALUE,...];... (KIND drop|dup|reorder|delay|corrupt; KEY "
    "p|nth|times|qp|dev|op)";
constexpr const char* kInjectGrammar =
    "wc:status=S[,qp=N][,op=send|write|read|atomic][,nth=K] or "
    "fail:verb=reg_mr|create_qp|create_cq|create_srq|alloc_pd,errno=E[,nth=K], ';'-separated";
constexpr const char* kKillAtGrammar = "POINT[:N] (N >= 1) or random:SEED[:MAXN]";
constexpr const char* kCmIbAddrsGrammar = "emuD:P=IPv4[,emuD:P=IPv4...]";

bool check_schedule(const char* v, std::string* why) {
  sched::program::Spec spec;
  return sched::program::parse_spec(v, &spec, why);
}
bool check_faults(const char* v, std::string* why) {
  FaultRules rules;
  return faults_parse(v, &rules, why) == Status::ok;
}
bool check_inject(const char* v, std::string* why) {
  InjectRules rules;
  return inject_parse(v, &rules, why) == Status::ok;
}
bool check_kill_at(const char* v, std::string*) {
  KillTarget t;
  return parse_kill_at(v, &t);
}
// As ib_port_has_addr (verbs_provider/cm/addr.cpp) reads it: emuD:P=A.B.C.D, comma-separated.
bool check_cm_ib_addrs(const char* v, std::string* why) {
  std::string list(v);
  for (size_t at = 0; at <= list.size();) {
    size_t end = std::min(list.find(',', at), list.size());
    std::string item = list.substr(at, end - at);
    unsigned d = 0, p = 0;
    int used = 0;
    in_addr ia{};
    size_t eq = item.find('=');
    if (std::sscanf(item.c_str(), "emu%u:%u=%n", &d, &p, &used) != 2 || eq == std::string::npos ||
        static_cast<size_t>(used) != eq + 1 || item.find_first_of(" \t+-") != std::string::npos ||
        inet_pton(AF_INET, item.c_str() + eq + 1, &ia) != 1) {
      *why = "'" + item + "' is not emuD:P=IPv4";
      return false;
    }
    at = end + 1;
  }
  return true;
}

// The one source of docs/knobs.md's table (`emu-ctl knobs --markdown`; a test compares the two),
// and of every knob's kind and bounds (the strict parsers below).
const KnobDoc kKnobs[] = {
    knob("EMU_FABRIC", "default",
         "Name of the fabric: processes with the same user and fabric share devices and can "
         "connect.",
         KnobKind::name),
    knob("EMU_SHM_DIR", "/dev/shm", "Directory of the shared segment file (a tmpfs).",
         KnobKind::dir),
    knob(
        "EMU_SHM_SIZE", "4G",
        "The most a fabric's shared segment can grow to (suffix K/M/G/T; 8M to 1T): the size of "
        "its mapping, address space only. Its tmpfs pages are taken as the fabric grows (the 0.6 "
        "MiB header and under 0.1 MiB of heap bookkeeping when it is made, then each ring as it is "
        "allocated and 1/50 of each MiB the heap grows by) and given back as rings are freed; a "
        "full "
        "tmpfs fails the verb that needed the room with ENOMEM and a message. Lower it where "
        "address space is limited (ulimit -v), or for a program that locks all its memory "
        "(mlockall(MCL_FUTURE) would take the whole size from the tmpfs at attach).",
        KnobKind::size, 8ull << 20, 1ull << 40),
    knob("EMU_SHM_LIMIT", "0",
         "Emulates a tmpfs of this size (suffix K/M/G/T) in EMU_SHM_DIR: a reservation that would "
         "take "
         "this user's segment files there past it fails as a full tmpfs would (ENOMEM at the verb, "
         "with a message). 0: only the tmpfs's own size counts.",
         KnobKind::size, 0, 1ull << 50),
    knob("EMU_FABRIC_PERSIST", "0",
         "1: the process marks its fabric persistent when it attaches (as `emu-ctl persist FABRIC "
         "on`): the segment stays when its last process detaches, until `emu-ctl persist FABRIC "
         "off` "
         "or `emu-ctl rm FABRIC`. Otherwise the last process to detach removes it, unless an XRC "
         "domain under policy xrcd or creator keeps it.",
         KnobKind::flag),
    knob("EMU_DEVICES", "1", "Number of emulated devices: emu0, emu1, ... (0 to 8).",
         KnobKind::integer, 0, 8),
    knob("EMU_PORTS", "1", "Ports per device (1 to 4).", KnobKind::integer, 1, 4),
    knob("EMU_UARS", "16",
         "Doorbell/BlueFlame registers per context (1 to 64); QPs beyond this number share "
         "registers.",
         KnobKind::integer, 1, 64),
    knob("EMU_TD_UARS", "16",
         "Registers per context kept for thread domains (ibv_alloc_td; 0 to 64): each domain gets "
         "one "
         "of its own; past this number ibv_alloc_td fails with ENOMEM.",
         KnobKind::integer, 0, 64),
    knob("EMU_SINGLE_THREADED", "0",
         "1: the provider takes none of its locks — a QP's send and receive locks, the doorbell "
         "registers' locks, CQ and SRQ locks — as MLX5_SINGLE_THREADED does, for programs that use "
         "each context from one thread. Every QP and SRQ then has the ownership checker that "
         "thread-domain QPs have: a queue entered by a second thread while another is inside it is "
         "a "
         "race event (`owner_conflict`), and the post goes on unlocked, as on hardware.",
         KnobKind::flag),
    knob(
        "EMU_BLUEFLAME", "auto",
        "Which of the provider's own posts go through BlueFlame (a lone WQE of up to 256 bytes "
        "copied through the register, which the device then executes from that copy). `auto`: "
        "those "
        "on a register without a lock (a thread domain's own, every register under "
        "EMU_SINGLE_THREADED), where two writers can tear a copy and the device's BlueFlame checks "
        "have something to find; a locked register rings the 8-byte doorbell, as mlx5 does under "
        "MLX5_SHUT_UP_BF=1 — the lock leaves a torn copy nothing to come from, and on emu0 "
        "BlueFlame "
        "saves no latency (the device reads the ring from the same memory) while its emulation "
        "costs a fifth of a small message's work. `always`: every lone small WQE (mlx5's default). "
        "`never`: none. Programs writing BlueFlame themselves (emudv.h) are not affected.",
        KnobKind::word, 0, 0, "auto|always|never"),
    knob("EMU_PERSONALITY", "emu",
         "Which hardware the emulated devices present to code written for one. `emu`: emu0's own "
         "(emudv.h); mlx5dv_is_supported says no, so UCX and others take their verbs paths. "
         "`mlx5`: a ConnectX part to mlx5dv (docs/design/mlx5-personality.md): "
         "mlx5dv_is_supported says yes, the PCI directory of the device says vendor 0x15b3 and "
         "ibv_query_device vendor_id 0x2c9; mlx5dv_open_device answers EOPNOTSUPP (no DEVX), as "
         "libmlx5 does for a device it does not drive; mlx5dv_create_cq/_qp and mlx5dv_init_obj "
         "hand out the queues in mlx5's form, CQs keep mlx5's doorbell record and the trapped "
         "register pages a ConnectX UAR's layout.",
         KnobKind::word, 0, 0, "emu|mlx5"),
    knob("EMU_MMIO", "trap",
         "How a program's own stores to the doorbell registers emudv_init_qp hands out reach the "
         "device. `trap`: the registers are pages mapped without write permission, and each plain "
         "store to them (any width: 8-byte doorbell, BlueFlame by 8/16/32/64-byte or string "
         "stores) faults into the provider, which makes the store and hands the bytes to the "
         "device, as a hypervisor's emulated device gets an MMIO exit (docs/design/"
         "doorbells-and-mmio.md); the program's own SIGSEGV and SIGTRAP handlers keep their "
         "faults. `call`: the registers are plain memory the device reads only through the "
         "emudv_* MMIO calls. The provider's own posts are the same under both.",
         KnobKind::word, 0, 0, "trap|call"),
    knob("EMU_RACE_LOG", "0",
         "1: print each race event the device records (torn BlueFlame WQE, doorbell record moving "
         "backwards or ahead, double or stale WQE, lock-free QP entered by two threads) to stderr "
         "as "
         "JSON. Events are recorded whether or not this is set (emu-ctl races).",
         KnobKind::flag),
    knob("EMU_ENGINE", "inline",
         "Who drives the device engine: `inline` (the posting thread, right after it rings the "
         "doorbell) or `thread` (one device thread per process, woken by doorbells through a futex "
         "only when it sleeps, asynchronous to the posting threads; it also retries stalled sends "
         "when nobody polls).",
         KnobKind::word, 0, 0, "inline|thread"),
    knob(
        "EMU_SCHEDULE", "",
        "Unset: no scheduling. Set, `emu-run` also preloads libemu_sched.so and the program runs "
        "as "
        "one deterministic scheduled run (docs/design/scheduler.md, \"The scheduler\"): its "
        "threads "
        "are "
        "actors that move one at a time at the scheduling points, chosen by `pct:seed=S` (PCT; "
        "`,depth=1..3`, `,k=` the expected steps, default 2000), `random:seed=S` (a random walk) "
        "or "
        "`replay:<schedule>` (the `s1:...` text a run prints). The engine then runs inline "
        "whatever "
        "EMU_ENGINE says. At exit the run writes strategy, steps, decisions, schedule, trace hash, "
        "race events, its last 40 steps (naming the function of each store to a device register) "
        "and a replay command to stderr; an exit status other than 0, `_exit` and `abort` (a "
        "failed assertion) fail the run (`exit N`, `abort`).",
        KnobKind::grammar, 0, 0, kScheduleGrammar, check_schedule),
    knob("EMU_SCHEDULE_OUT", "",
         "With EMU_SCHEDULE: a file the run's outcome is also written to, as one JSON object "
         "(`schedule`, `trace_hash`, `races`, `replay`, ...).",
         KnobKind::file),
    knob("EMU_SCHEDULE_TRACE", "",
         "With EMU_SCHEDULE: a file the run is also written to as a Chrome/Perfetto trace (open "
         "it at ui.perfetto.dev): a track per thread and one for the device's steps, each "
         "scheduling point a slice, the race events and a failure as instants.",
         KnobKind::file),
    knob(
        "EMU_FAULTS", "",
        "Wire fault rules for the fabric (docs/design/reliability.md): "
        "`seed=S;KIND[:KEY=VALUE,...];...` "
        "with KIND drop, dup, reorder, delay or corrupt and KEYs p (probability), nth (the Nth "
        "packet "
        "of a QP), times, qp, dev, op (send, write, read, atomic, ack, ud). Set in the segment by "
        "the "
        "first engine of each process that has it; `emu-ctl faults` changes them on a running "
        "fabric. While rules are set, messages travel as packets and RC recovers as the IBTA says.",
        KnobKind::grammar, 0, 0, kFaultsGrammar, check_faults),
    knob("EMU_INJECT", "",
         "Error injection rules for the fabric (docs/design/reliability.md, \"Error injection\"): "
         "`wc:status=S[,qp=N][,op=send|write|read|atomic][,nth=K]` completes the Kth matching send "
         "WR "
         "with ibv_wc_status S (vendor_err 0xe1) and its QP goes to ERR; "
         "`fail:verb=reg_mr|create_qp|create_cq|create_srq|alloc_pd,errno=E[,nth=K]` fails the Kth "
         "call with errno E. Rules separated by ';'; set in the segment when a process opens its "
         "first "
         "device; `emu-ctl inject` changes them on a running fabric.",
         KnobKind::grammar, 0, 0, kInjectGrammar, check_inject),
    knob("EMU_ACK_TIMEOUT_SCALE", "1",
         "Factor on every QP's local ACK timeout (4.096 us x 2^timeout): a retry after a lost "
         "packet "
         "or a missing answer waits this much of it (e.g. 0.01 for tests of retries).",
         KnobKind::number),
    knob("EMU_PCAP", "",
         "A pcapng file this process appends every packet its engines put on the wire to: RoCE v2 "
         "frames on Ethernet ports, InfiniBand packets (LRH first) on InfiniBand ports, injected "
         "faults and retransmissions in packet comments. Several processes may name the same file; "
         "it is created when missing (remove it before a run for a fresh capture).",
         KnobKind::file),
    knob("EMU_KILL_AT", "",
         "Process death at a chosen point (docs/design/reliability.md, \"Process death\"): "
         "`POINT[:N]` "
         "SIGKILLs the process the Nth time (default 1) it passes POINT: doorbell, qp_lock, "
         "cq_lock, "
         "srq_lock, bf_copy, heap_alloc, heap_grow, slot_create, slot_destroy, engine_lock, "
         "recv_lock, "
         "cm_req_sent, cm_established, recv_cqe_slot, recv_cqe, event_raise. `random:SEED[:MAXN]` "
         "draws the "
         "point and an N in [1, MAXN] "
         "(default 64) from SEED. The process writes `rdmaemu: EMU_KILL_AT: pid P killed at POINT "
         "#N` first.",
         KnobKind::grammar, 0, 0, kKillAtGrammar, check_kill_at),
    knob("EMU_PCAP_SNAPLEN", "65535", "Bytes of each packet EMU_PCAP keeps (at least 64).",
         KnobKind::integer, 64, UINT32_MAX),
    knob("EMU_PCAP_LIMIT", "100000",
         "Packets a process writes to EMU_PCAP at most; past it the capture stops (logged once).",
         KnobKind::integer, 0, UINT64_MAX),
    knob("EMU_LOG", "0",
         "1: log device-side events (errors, retries, races, port changes, lost events) to stderr.",
         KnobKind::flag),
    knob(
        "EMU_SHARED_BACKING", "1",
        "1: ibv_reg_mr recognises a region inside a shared, writable file mapping (POSIX or SysV "
        "shm, a memfd, a tmpfs or disk file, MAP_SHARED|MAP_ANONYMOUS where the mapping can be "
        "opened) and keeps a descriptor of the file, so that engines in other processes map it and "
        "copy with memcpy instead of a system call per message. Nothing is re-backed. 0: such "
        "memory takes the process_vm_* path like private memory.",
        KnobKind::flag),
    knob("EMU_DMA_RUNS", "1",
         "1: a run of plain RDMA WRITEs, or of RDMA READs, waiting at the head of a send queue is "
         "executed with one DMA call (one process_vm_writev/readv for another process's private "
         "memory). 0: every WQE on its own (for A/B measurements).",
         KnobKind::flag),
    knob(
        "EMU_SHARED_MR", "1",
        "1: while an MR covers them, the whole pages of private anonymous memory (heap, anonymous "
        "mmap) inside it are moved into the process's registration file (a memfd; same addresses, "
        "same bytes; stores made meanwhile wait and are kept), so that engines in other processes "
        "map "
        "them and copy with memcpy instead of a system call per message; they move back to private "
        "memory when the last MR covering them goes, and a child of fork() gets private copies. 0: "
        "private memory stays where it is and is reached with process_vm_* (and receive staging), "
        "and registration costs no copy: a program that registers and deregisters per message "
        "(each move copies the resident pages: about 2 ms per MiB there and back) may prefer it.",
        KnobKind::flag),
    knob("EMU_STAGING", "256K",
         "Size of the receive staging area a CQ takes from the segment the first time a SEND of "
         "more "
         "than 32 bytes comes to it from another process (docs/design/registered-memory.md, "
         "\"Staging of "
         "two-sided "
         "payloads\"): the sender's engine leaves the payload there and the receiver's poll copies "
         "it "
         "into its buffers, with no system call per message. 64K to 4M, rounded up to a power of "
         "two; a payload of at most 8 KiB is staged while the area has room, anything else is "
         "placed directly (process_vm_writev). 0: no staging.",
         KnobKind::size, 64ull << 10, 4ull << 20, nullptr, nullptr, true),
    knob("EMU_VENDOR_PART_ID", "4123",
         "vendor_part_id that ibv_query_device reports (vendor_id is 0xffffff, no IEEE vendor, as "
         "soft-RoCE reports). 4123 makes perftest treat "
         "emu0 as a ConnectX-6-class device and use its default ibv_wr_* post path and inline "
         "sizes; "
         "0 makes it use the legacy ibv_post_send path.",
         KnobKind::integer, 0, UINT32_MAX),
    knob(
        "EMU_LINK_LAYER", "ib",
        "Link layer of the ports: `ib` (InfiniBand: LID routing, GID 0 = subnet prefix + port "
        "GUID, "
        "gid_tbl_len 4) or `eth` (RoCE: lid 0 and no SM, GIDs from the EMU_ROCE_NETDEV interface's "
        "addresses as soft-RoCE lists them, active_mtu capped by its MTU; QPs must address their "
        "peer with a GRH, `is_global` and a destination GID). A comma-separated list gives ports "
        "1, "
        "2, ... in turn (`ib,eth`); the last entry stands for the remaining ports.",
        KnobKind::words, 0, 0, "ib|eth"),
    knob(
        "EMU_ROCE_NETDEV", "auto",
        "Interface a RoCE port is bound to, as soft-RoCE binds to a netdev. `auto` (or empty): the "
        "UP non-loopback interface with an IPv4 address and the lowest index, else `lo`. A "
        "comma-separated list gives ports 1, 2, ... in turn. The interface is read with "
        "libnl-route "
        "by the process that creates the segment; later address changes are not followed (use a "
        "new "
        "fabric). A RoCE port whose interface is down is DOWN; one whose interface cannot be read "
        "is "
        "DOWN with an empty GID table.",
        KnobKind::ifnames),
    knob("EMU_CM_IB_ADDRS", "",
         "IPoIB-style IPv4 addresses of InfiniBand ports for the RDMA CM (librdmacm programs under "
         "emu-run): `emuD:P=ADDR,...`. A port not listed answers to 127.0.D.P, so emu0 port 1 is "
         "127.0.0.1 and `rping -a 127.0.0.1` works out of the box. RoCE ports answer to their "
         "interface's addresses (their GID table).",
         KnobKind::grammar, 0, 0, kCmIbAddrsGrammar, check_cm_ib_addrs),
    knob("EMU_CM_TIMEOUT_MS", "10000",
         "RDMA CM: how long a connection request waits for any answer (a listener that does not "
         "run, or never reads its requests) before RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT, as "
         "the kernel's CM reports a REQ that exhausted its retries (at least 1).",
         KnobKind::integer, 1, UINT32_MAX),
    knob("EMU_CM_TIMEWAIT_MS", "1000",
         "RDMA CM: how long after DISCONNECTED an id reports RDMA_CM_EVENT_TIMEWAIT_EXIT (the IB "
         "CM's time-wait).",
         KnobKind::integer, 0, UINT32_MAX),
    knob("EMU_XRC_POLICY", "kernel",
         "Lifetime rule of the TGT QPs of an XRC domain, fixed when the domain is created (read "
         "then, "
         "so one process can create domains under different rules): `kernel` (today's Linux: a TGT "
         "QP lives while any process holds a handle to it), `xrcd` (the 2011 proposal 2a: it lives "
         "until destroyed explicitly or until its domain goes; processes exiting do not take it), "
         "`creator` (2b: the creator chooses per QP with EMU_XRC_TGT_LIFETIME). Another word set "
         "after the program started fails ibv_open_xrcd with EINVAL. See docs/design/xrc.md.",
         KnobKind::word, 0, 0, "kernel|xrcd|creator"),
    knob("EMU_XRC_TGT_LIFETIME", "process",
         "Under EMU_XRC_POLICY=creator, what a TGT QP created now is bound to: `process` (the "
         "kernel "
         "rule: it goes with its last handle) or `xrcd` (it stays until destroyed or its domain "
         "goes). Read at each TGT QP creation; another word set after the program started fails "
         "that creation with EINVAL.",
         KnobKind::word, 0, 0, "process|xrcd"),
};

const char* env_or(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : dflt;
}

const KnobDoc* find_knob(const char* name) {
  for (const KnobDoc& k : kKnobs)
    if (std::strcmp(k.name, name) == 0) return &k;
  return nullptr;
}

// Decimal digits, or 0x and hex digits; all of s, no sign, no space, no overflow.
bool parse_uint(const char* s, uint64_t* out, const char** rest = nullptr) {
  int base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) base = 16, s += 2;
  uint64_t v = 0;
  const char* p = s;
  for (;; ++p) {
    int d;
    if (*p >= '0' && *p <= '9')
      d = *p - '0';
    else if (base == 16 && *p >= 'a' && *p <= 'f')
      d = *p - 'a' + 10;
    else if (base == 16 && *p >= 'A' && *p <= 'F')
      d = *p - 'A' + 10;
    else
      break;
    if (v > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) return false;
    v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
  }
  if (p == s) return false;
  if (rest)
    *rest = p;
  else if (*p)
    return false;
  *out = v;
  return true;
}

// An integer with an optional K, M, G or T suffix (powers of 1024).
bool parse_size(const char* s, uint64_t* out) {
  const char* rest = nullptr;
  uint64_t v = 0;
  if (!parse_uint(s, &v, &rest)) return false;
  unsigned shift = 0;
  if (*rest) {
    switch (*rest) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      default:
        return false;
    }
    if (rest[1]) return false;
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

bool parse_number(const char* s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  // strtod takes leading space, "inf" and "nan": a knob takes none of them.
  if (end == s || *end || std::isspace(static_cast<unsigned char>(*s)) || !std::isfinite(v) ||
      !(v > 0))
    return false;
  *out = v;
  return true;
}

// Which of `words` ('|'-separated) `w` is, or -1.
int word_index(const char* words, const std::string& w) {
  int i = 0;
  for (const char* p = words;; ++i) {
    const char* bar = std::strchr(p, '|');
    size_t n = bar ? static_cast<size_t>(bar - p) : std::strlen(p);
    if (w.size() == n && w.compare(0, n, p, n) == 0) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

std::string list_words(const char* words) {
  std::string out;
  for (const char* p = words; *p; ++p) out += *p == '|' ? std::string(", ") : std::string(1, *p);
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// As the kernel's dev_valid_name: 1 to 15 bytes, not . or .., no '/', ':' or white space.
bool valid_ifname(const std::string& n) {
  if (n.empty() || n.size() > 15 || n == "." || n == "..") return false;
  for (char ch : n)
    if (ch == '/' || ch == ':' || std::isspace(static_cast<unsigned char>(ch))) return false;
  return true;
}

std::string size_text(uint64_t v) {
  if (v && v % (1ull << 40) == 0) return std::to_string(v >> 40) + "T";
  if (v && v % (1ull << 30) == 0) return std::to_string(v >> 30) + "G";
  if (v && v % (1ull << 20) == 0) return std::to_string(v >> 20) + "M";
  if (v && v % (1ull << 10) == 0) return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

}  // namespace

std::string knob_allowed(const KnobDoc& k) {
  switch (k.kind) {
    case KnobKind::name:
      return "a name of 1 to 128 characters from A-Z a-z 0-9 . _ -";
    case KnobKind::dir:
      return "an absolute path (starting with '/')";
    case KnobKind::file:
      return "a file path (not ending in '/')";
    case KnobKind::flag:
      return "0 or 1";
    case KnobKind::integer:
      return "an integer from " + std::to_string(k.lo) + " to " + std::to_string(k.hi) +
             " (decimal, or 0x and hex digits)";
    case KnobKind::size:
      return std::string(k.zero_ok ? "0 or " : "") + "a size from " + size_text(k.lo) + " to " +
             size_text(k.hi) + " (digits with an optional K, M, G or T suffix)";
    case KnobKind::number:
      return "a decimal number above 0";
    case KnobKind::word:
      return "one of " + list_words(k.words);
    case KnobKind::words:
      return "a comma-separated list of " + list_words(k.words);
    case KnobKind::ifnames:
      return "a comma-separated list of interface names (1 to 15 characters, no '/', ':' or "
             "spaces) or auto";
    case KnobKind::grammar:
      return k.words;
  }
  return "";
}

namespace {

// Whether v is well formed for k; *why may say what is wrong beyond "not what k allows".
bool well_formed(const KnobDoc& k, const char* v, std::string* why) {
  uint64_t n = 0;
  switch (k.kind) {
    case KnobKind::name: {
      size_t len = std::strlen(v);
      if (len > 128) return false;
      for (const char* p = v; *p; ++p)
        if (!std::isalnum(static_cast<unsigned char>(*p)) && !std::strchr("._-", *p)) return false;
      return true;
    }
    case KnobKind::dir:
      return v[0] == '/';
    case KnobKind::file:
      return v[std::strlen(v) - 1] != '/';
    case KnobKind::flag:
      return std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0;
    case KnobKind::integer:
      return parse_uint(v, &n) && n >= k.lo && n <= k.hi;
    case KnobKind::size:
      return parse_size(v, &n) && ((n >= k.lo && n <= k.hi) || (k.zero_ok && n == 0));
    case KnobKind::number: {
      double d;
      return parse_number(v, &d);
    }
    case KnobKind::word:
      return word_index(k.words, v) >= 0;
    case KnobKind::words:
      for (const std::string& w : split_commas(v))
        if (word_index(k.words, w) < 0) {
          *why = "'" + w + "' is not one of them";
          return false;
        }
      return true;
    case KnobKind::ifnames:
      for (const std::string& w : split_commas(v))
        if (!w.empty() && w != "auto" && !valid_ifname(w)) {
          *why = "'" + w + "' is not an interface name";
          return false;
        }
      return true;
    case KnobKind::grammar:
      return k.check(v, why);
  }
  return false;
}

// The knob's value if it is set and well formed, else its default (a malformed value is refused
// at the first verb: knobs_refused).
const char* value_of(const KnobDoc& k) {
  const char* v = std::getenv(k.name);
  if (!v || !*v) return k.default_value;
  std::string why;
  return well_formed(k, v, &why) ? v : k.default_value;
}

const char* value_of(const char* name) { return value_of(*find_knob(name)); }

uint32_t u32_of(const char* name) { return static_cast<uint32_t>(knob_uint(name)); }

std::vector<PortLinkLayer> parse_link_layers(const char* s) {
  std::vector<PortLinkLayer> out;
  for (const std::string& t : split_commas(s))
    out.push_back(t == "eth" ? PortLinkLayer::ethernet : PortLinkLayer::infiniband);
  return out;
}

}  // namespace

std::string knob_error(const char* name, const char* value) {
  const KnobDoc* k = find_knob(name);
  if (!k) return std::string("rdmaemu: ") + name + ": not a knob of this version";
  if (!value || !*value) return "";
  std::string why;
  if (well_formed(*k, value, &why)) return "";
  std::string msg = std::string("rdmaemu: ") + name + "=" + value + ": ";
  if (!why.empty()) msg += why + "; ";
  return msg + "expected " + knob_allowed(*k);
}

std::string knob_errors_in_env() {
  std::string out;
  for (const KnobDoc& k : kKnobs)
    if (std::string e = knob_error(k.name, std::getenv(k.name)); !e.empty()) out += e + "\n";
  return out;
}

bool knobs_refused() {
  static const bool refused = [] {
    std::string errors = knob_errors_in_env();
    if (errors.empty()) return false;
    std::fputs(errors.c_str(), stderr);
    std::fputs("rdmaemu: refusing to start (docs/knobs.md lists every knob and its values)\n",
               stderr);
    return true;
  }();
  return refused;
}

bool knob_flag(const char* name) { return std::strcmp(value_of(name), "1") == 0; }

uint64_t knob_uint(const char* name) {
  const KnobDoc& k = *find_knob(name);
  uint64_t v = 0;
  if (k.kind == KnobKind::size ? parse_size(value_of(k), &v) : parse_uint(value_of(k), &v))
    return v;
  return 0;
}

double knob_number(const char* name) {
  double v = 1;
  parse_number(value_of(name), &v);
  return v;
}

PortLinkLayer Config::link_layer(uint32_t port) const {
  if (link_layers.empty()) return PortLinkLayer::infiniband;
  return link_layers[std::min<size_t>(port ? port - 1 : 0, link_layers.size() - 1)];
}

std::string Config::roce_netdev(uint32_t port) const {
  if (roce_netdevs.empty()) return "";
  size_t i = std::min<size_t>(port ? port - 1 : 0, roce_netdevs.size() - 1);
  const std::string& n = roce_netdevs[i];
  return n == "auto" ? "" : n;
}

Config config_from_env() {
  Config c;
  c.fabric = value_of("EMU_FABRIC");
  c.shm_dir = value_of("EMU_SHM_DIR");
  c.shm_size = knob_uint("EMU_SHM_SIZE");
  c.shm_limit = knob_uint("EMU_SHM_LIMIT");
  c.persist = knob_flag("EMU_FABRIC_PERSIST");
  c.num_devices = u32_of("EMU_DEVICES");
  c.ports_per_dev = u32_of("EMU_PORTS");
  c.uar_regs = u32_of("EMU_UARS");
  c.td_uar_regs = u32_of("EMU_TD_UARS");
  c.single_threaded = knob_flag("EMU_SINGLE_THREADED");
  std::string bf = value_of("EMU_BLUEFLAME");
  c.blueflame = bf == "always"  ? BlueFlameUse::always
                : bf == "never" ? BlueFlameUse::never
                                : BlueFlameUse::unlocked_registers;
  c.mmio_trap = std::string(value_of("EMU_MMIO")) != "call";
  c.personality_mlx5 = std::string(value_of("EMU_PERSONALITY")) == "mlx5";
  std::string engine = value_of("EMU_ENGINE");
  // A scheduled program's device is the engine inline in its posters: their steps are its points.
  // A device thread would be a second device, outside the run.
  const char* scheduled = std::getenv("EMU_SCHEDULE");
  bool thread = engine == "thread" && !(scheduled && *scheduled);
  c.engine = thread ? EngineMode::progress_thread : EngineMode::inline_on_doorbell;
  c.log = knob_flag("EMU_LOG");
  c.vendor_part_id = u32_of("EMU_VENDOR_PART_ID");
  c.staging = knob_uint("EMU_STAGING");
  c.link_layers = parse_link_layers(value_of("EMU_LINK_LAYER"));
  c.roce_netdevs = split_commas(value_of("EMU_ROCE_NETDEV"));
  return c;
}

// Read at each use: a value set after the process started is checked here, and the verb fails.
bool xrc_policy_now(uint32_t* policy) {
  const char* v = std::getenv("EMU_XRC_POLICY");
  if (std::string e = knob_error("EMU_XRC_POLICY", v); !e.empty()) {
    std::fprintf(stderr, "%s\n", e.c_str());
    return false;
  }
  *policy = static_cast<uint32_t>(
      word_index(find_knob("EMU_XRC_POLICY")->words, env_or("EMU_XRC_POLICY", "kernel")));
  return true;
}

bool xrc_tgt_dies_with_xrcd_now(bool* dies_with_xrcd) {
  const char* v = std::getenv("EMU_XRC_TGT_LIFETIME");
  if (std::string e = knob_error("EMU_XRC_TGT_LIFETIME", v); !e.empty()) {
    std::fprintf(stderr, "%s\n", e.c_str());
    return false;
  }
  *dies_with_xrcd = std::string(env_or("EMU_XRC_TGT_LIFETIME", "process")) == "xrcd";
  return true;
}

const Config& config() {
  // Never destroyed (docs/design/verbs-provider.md, "Exit"): read by verbs on any thread, also
  // while another thread's exit() runs the static destructors.
  static const Config& c = *new Config(config_from_env());
  return c;
}

std::string Config::segment_name() const {
  return "rdmaemu-" + std::to_string(getuid()) + "-" + fabric;
}

std::string Config::segment_path() const { return shm_dir + "/" + segment_name(); }

const KnobDoc* knob_docs(int* count) {
  *count = static_cast<int>(sizeof(kKnobs) / sizeof(kKnobs[0]));
  return kKnobs;
}

void log(const char* fmt, ...) {
  if (!config().log) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "rdmaemu[%d]: %s\n", getpid(), buf);
}

}  // namespace emu
