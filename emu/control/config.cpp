#include "emu/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace emu {
namespace {

// The one source of docs/knobs.md's table (`emu-ctl knobs --markdown`; a test compares the two).
const KnobDoc kKnobs[] = {
    {"EMU_FABRIC", "default",
     "Name of the fabric: processes with the same user and fabric share devices and can connect."},
    {"EMU_SHM_DIR", "/dev/shm", "Directory of the shared segment file (a tmpfs)."},
    {"EMU_SHM_SIZE", "4G",
     "The most a fabric's shared segment can grow to (suffix K/M/G; at least 8M): the size of "
     "its mapping, address space only. Its tmpfs pages are taken as the fabric grows (the 0.6 "
     "MiB header and under 0.1 MiB of heap bookkeeping when it is made, then each ring as it is "
     "allocated and 1/50 of each MiB the heap grows by) and given back as rings are freed; a full "
     "tmpfs fails the verb that needed the room with ENOMEM and a message. Lower it where "
     "address space is limited (ulimit -v), or for a program that locks all its memory "
     "(mlockall(MCL_FUTURE) would take the whole size from the tmpfs at attach)."},
    {"EMU_SHM_LIMIT", "0",
     "Emulates a tmpfs of this size (suffix K/M/G) in EMU_SHM_DIR: a reservation that would take "
     "this user's segment files there past it fails as a full tmpfs would (ENOMEM at the verb, "
     "with a message). 0: only the tmpfs's own size counts."},
    {"EMU_FABRIC_PERSIST", "0",
     "1: the process marks its fabric persistent when it attaches (as `emu-ctl persist FABRIC "
     "on`): the segment stays when its last process detaches, until `emu-ctl persist FABRIC off` "
     "or `emu-ctl rm FABRIC`. Otherwise the last process to detach removes it, unless an XRC "
     "domain under policy xrcd or creator keeps it."},
    {"EMU_DEVICES", "1", "Number of emulated devices: emu0, emu1, ... (at most 8)."},
    {"EMU_PORTS", "1", "Ports per device (1 to 4)."},
    {"EMU_UARS", "16",
     "Doorbell/BlueFlame registers per context (1 to 64); QPs beyond this number share "
     "registers."},
    {"EMU_TD_UARS", "16",
     "Registers per context kept for thread domains (ibv_alloc_td; 0 to 64): each domain gets one "
     "of its own; past this number ibv_alloc_td fails with ENOMEM."},
    {"EMU_SINGLE_THREADED", "0",
     "1: the provider takes none of its locks — a QP's send and receive locks, the doorbell "
     "registers' locks, CQ and SRQ locks — as MLX5_SINGLE_THREADED does, for programs that use "
     "each context from one thread. Every QP and SRQ then has the ownership checker that "
     "thread-domain QPs have: a queue entered by a second thread while another is inside it is a "
     "race event (`owner_conflict`), and the post goes on unlocked, as on hardware."},
    {"EMU_BLUEFLAME", "auto",
     "Which of the provider's own posts go through BlueFlame (a lone WQE of up to 256 bytes "
     "copied through the register, which the device then executes from that copy). `auto`: those "
     "on a register without a lock (a thread domain's own, every register under "
     "EMU_SINGLE_THREADED), where two writers can tear a copy and the device's BlueFlame checks "
     "have something to find; a locked register rings the 8-byte doorbell, as mlx5 does under "
     "MLX5_SHUT_UP_BF=1 — the lock leaves a torn copy nothing to come from, and on emu0 BlueFlame "
     "saves no latency (the device reads the ring from the same memory) while its emulation "
     "costs a fifth of a small message's work. `always`: every lone small WQE (mlx5's default). "
     "`never`: none. Programs writing BlueFlame themselves (emudv.h) are not affected."},
    {"EMU_RACE_LOG", "0",
     "1: print each race event the device records (torn BlueFlame WQE, doorbell record moving "
     "backwards or ahead, double or stale WQE, lock-free QP entered by two threads) to stderr as "
     "JSON. Events are recorded whether or not this is set (emu-ctl races)."},
    {"EMU_ENGINE", "inline",
     "Who drives the device engine: `inline` (the posting thread, right after it rings the "
     "doorbell) or `thread` (one device thread per process, woken by doorbells through a futex "
     "only when it sleeps, asynchronous to the posting threads; it also retries stalled sends "
     "when nobody polls). Any other value means `inline`."},
    {"EMU_SCHEDULE", "",
     "Unset: no scheduling. Set, `emu-run` also preloads libemu_sched.so and the program runs as "
     "one deterministic scheduled run (docs/architecture.md, \"The scheduler\"): its threads are "
     "actors that move one at a time at the scheduling points, chosen by `pct:seed=S` (PCT; "
     "`,depth=1..3`, `,k=` the expected steps, default 2000), `random:seed=S` (a random walk) or "
     "`replay:<schedule>` (the `s1:...` text a run prints). The engine then runs inline whatever "
     "EMU_ENGINE says. At exit the run writes strategy, steps, decisions, schedule, trace hash, "
     "race events and a replay command to stderr."},
    {"EMU_SCHEDULE_OUT", "",
     "With EMU_SCHEDULE: a file the run's outcome is also written to, as one JSON object "
     "(`schedule`, `trace_hash`, `races`, `replay`, ...)."},
    {"EMU_FAULTS", "",
     "Wire fault rules for the fabric (docs/reliability.md): `seed=S;KIND[:KEY=VALUE,...];...` "
     "with KIND drop, dup, reorder, delay or corrupt and KEYs p (probability), nth (the Nth packet "
     "of a QP), times, qp, dev, op (send, write, read, atomic, ack, ud). Set in the segment by the "
     "first engine of each process that has it; `emu-ctl faults` changes them on a running "
     "fabric. While rules are set, messages travel as packets and RC recovers as the IBTA says."},
    {"EMU_INJECT", "",
     "Error injection rules for the fabric (docs/reliability.md, \"Error injection\"): "
     "`wc:status=S[,qp=N][,op=send|write|read|atomic][,nth=K]` completes the Kth matching send WR "
     "with ibv_wc_status S (vendor_err 0xe1) and its QP goes to ERR; "
     "`fail:verb=reg_mr|create_qp|create_cq|create_srq|alloc_pd,errno=E[,nth=K]` fails the Kth "
     "call with errno E. Rules separated by ';'; set in the segment when a process opens its first "
     "device; `emu-ctl inject` changes them on a running fabric."},
    {"EMU_ACK_TIMEOUT_SCALE", "1",
     "Factor on every QP's local ACK timeout (4.096 us x 2^timeout): a retry after a lost packet "
     "or a missing answer waits this much of it (e.g. 0.01 for tests of retries)."},
    {"EMU_PCAP", "",
     "A pcapng file this process appends every packet its engines put on the wire to: RoCE v2 "
     "frames on Ethernet ports, InfiniBand packets (LRH first) on InfiniBand ports, injected "
     "faults and retransmissions in packet comments. Several processes may name the same file; "
     "it is created when missing (remove it before a run for a fresh capture)."},
    {"EMU_KILL_AT", "",
     "Process death at a chosen point (docs/reliability.md, \"Process death\"): `POINT[:N]` "
     "SIGKILLs the process the Nth time (default 1) it passes POINT: doorbell, qp_lock, cq_lock, "
     "srq_lock, bf_copy, heap_alloc, heap_grow, slot_create, slot_destroy, engine_lock, recv_lock, "
     "cm_req_sent, cm_established. `random:SEED[:MAXN]` draws the point and an N in [1, MAXN] "
     "(default 64) from SEED. The process writes `rdmaemu: EMU_KILL_AT: pid P killed at POINT "
     "#N` first."},
    {"EMU_PCAP_SNAPLEN", "65535", "Bytes of each packet EMU_PCAP keeps (at least 64)."},
    {"EMU_PCAP_LIMIT", "100000",
     "Packets a process writes to EMU_PCAP at most; past it the capture stops (logged once)."},
    {"EMU_LOG", "0",
     "1: log device-side events (errors, retries, races, port changes, lost events) to stderr."},
    {"EMU_SHARED_BACKING", "1",
     "1: ibv_reg_mr recognises a region inside a shared, writable file mapping (POSIX or SysV "
     "shm, a memfd, a tmpfs or disk file, MAP_SHARED|MAP_ANONYMOUS where the mapping can be "
     "opened) and keeps a descriptor of the file, so that engines in other processes map it and "
     "copy with memcpy instead of a system call per message. Nothing is re-backed. 0: such "
     "memory takes the process_vm_* path like private memory."},
    {"EMU_DMA_RUNS", "1",
     "1: a run of plain RDMA WRITEs, or of RDMA READs, waiting at the head of a send queue is "
     "executed with one DMA call (one process_vm_writev/readv for another process's private "
     "memory). 0: every WQE on its own (for A/B measurements)."},
    {"EMU_SHARED_MR", "1",
     "1: while an MR covers them, the whole pages of private anonymous memory (heap, anonymous "
     "mmap) inside it are moved into the process's registration file (a memfd; same addresses, "
     "same bytes; stores made meanwhile wait and are kept), so that engines in other processes map "
     "them and copy with memcpy instead of a system call per message; they move back to private "
     "memory when the last MR covering them goes, and a child of fork() gets private copies. 0: "
     "private memory stays where it is and is reached with process_vm_* (and receive staging), "
     "and registration costs no copy: a program that registers and deregisters per message "
     "(each move copies the resident pages: about 2 ms per MiB there and back) may prefer it."},
    {"EMU_STAGING", "256K",
     "Size of the receive staging area a CQ takes from the segment the first time a SEND of more "
     "than 32 bytes comes to it from another process (docs/architecture.md, \"Staging of two-sided "
     "payloads\"): the sender's engine leaves the payload there and the receiver's poll copies it "
     "into its buffers, with no system call per message. Rounded up to a power of two in "
     "[64K, 4M]; a payload of at most 8 KiB is staged while the area has room, anything else is "
     "placed directly (process_vm_writev). 0: no staging."},
    {"EMU_VENDOR_PART_ID", "4123",
     "vendor_part_id that ibv_query_device reports (vendor_id is 0xffffff, no IEEE vendor, as "
     "soft-RoCE reports). 4123 makes perftest treat "
     "emu0 as a ConnectX-6-class device and use its default ibv_wr_* post path and inline sizes; "
     "0 makes it use the legacy ibv_post_send path."},
    {"EMU_LINK_LAYER", "ib",
     "Link layer of the ports: `ib` (InfiniBand: LID routing, GID 0 = subnet prefix + port GUID, "
     "gid_tbl_len 4) or `eth` (RoCE: lid 0 and no SM, GIDs from the EMU_ROCE_NETDEV interface's "
     "addresses as soft-RoCE lists them, active_mtu capped by its MTU; QPs must address their "
     "peer with a GRH, `is_global` and a destination GID). A comma-separated list gives ports 1, "
     "2, ... in turn (`ib,eth`); the last entry stands for the remaining ports. An unknown word "
     "is reported and taken as `ib`."},
    {"EMU_ROCE_NETDEV", "auto",
     "Interface a RoCE port is bound to, as soft-RoCE binds to a netdev. `auto` (or empty): the "
     "UP non-loopback interface with an IPv4 address and the lowest index, else `lo`. A "
     "comma-separated list gives ports 1, 2, ... in turn. The interface is read with libnl-route "
     "by the process that creates the segment; later address changes are not followed (use a new "
     "fabric). A RoCE port whose interface is down is DOWN; one whose interface cannot be read is "
     "DOWN with an empty GID table."},
    {"EMU_CM_IB_ADDRS", "",
     "IPoIB-style IPv4 addresses of InfiniBand ports for the RDMA CM (librdmacm programs under "
     "emu-run): `emuD:P=ADDR,...`. A port not listed answers to 127.0.D.P, so emu0 port 1 is "
     "127.0.0.1 and `rping -a 127.0.0.1` works out of the box. RoCE ports answer to their "
     "interface's addresses (their GID table)."},
    {"EMU_CM_TIMEOUT_MS", "10000",
     "RDMA CM: how long a connection request waits for any answer (a listener that does not "
     "run, or never reads its requests) before RDMA_CM_EVENT_UNREACHABLE with -ETIMEDOUT, as "
     "the kernel's CM reports a REQ that exhausted its retries."},
    {"EMU_CM_TIMEWAIT_MS", "1000",
     "RDMA CM: how long after DISCONNECTED an id reports RDMA_CM_EVENT_TIMEWAIT_EXIT (the IB "
     "CM's time-wait)."},
    {"EMU_XRC_POLICY", "kernel",
     "Lifetime rule of the TGT QPs of an XRC domain, fixed when the domain is created (read then, "
     "so one process can create domains under different rules): `kernel` (today's Linux: a TGT "
     "QP lives while any process holds a handle to it), `xrcd` (the 2011 proposal 2a: it lives "
     "until destroyed explicitly or until its domain goes; processes exiting do not take it), "
     "`creator` (2b: the creator chooses per QP with EMU_XRC_TGT_LIFETIME). An unknown word is "
     "reported and taken as `kernel`. See docs/xrc.md."},
    {"EMU_XRC_TGT_LIFETIME", "process",
     "Under EMU_XRC_POLICY=creator, what a TGT QP created now is bound to: `process` (the kernel "
     "rule: it goes with its last handle) or `xrcd` (it stays until destroyed or its domain "
     "goes); any other value means `process`. Read at each TGT QP creation."},
};

const char* env_or(const char* name, const char* dflt) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : dflt;
}

uint64_t parse_size(const char* s) {
  char* end = nullptr;
  uint64_t v = std::strtoull(s, &end, 0);
  switch (end && *end ? *end : 0) {
    case 'k':
    case 'K':
      v <<= 10;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      break;
    default:
      break;
  }
  return v;
}

uint32_t parse_u32(const char* name, const char* dflt, uint32_t lo, uint32_t hi) {
  long v = std::strtol(env_or(name, dflt), nullptr, 0);
  if (v < static_cast<long>(lo)) v = lo;
  if (v > static_cast<long>(hi)) v = hi;
  return static_cast<uint32_t>(v);
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

// A misspelt link layer would silently give InfiniBand ports to a test meant for RoCE: say so.
std::vector<PortLinkLayer> parse_link_layers(const char* s) {
  std::vector<PortLinkLayer> out;
  for (const std::string& t : split_commas(s)) {
    if (t == "eth") {
      out.push_back(PortLinkLayer::ethernet);
    } else {
      if (t != "ib")
        std::fprintf(stderr, "rdmaemu: EMU_LINK_LAYER: unknown '%s', using ib\n", t.c_str());
      out.push_back(PortLinkLayer::infiniband);
    }
  }
  return out;
}

}  // namespace

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
  c.fabric = env_or("EMU_FABRIC", "default");
  c.shm_dir = env_or("EMU_SHM_DIR", "/dev/shm");
  c.shm_size = parse_size(env_or("EMU_SHM_SIZE", "4G"));
  if (c.shm_size < (8u << 20)) c.shm_size = 8u << 20;
  c.shm_limit = parse_size(env_or("EMU_SHM_LIMIT", "0"));
  c.persist = std::atoi(env_or("EMU_FABRIC_PERSIST", "0")) != 0;
  c.num_devices = parse_u32("EMU_DEVICES", "1", 0, 8);
  c.ports_per_dev = parse_u32("EMU_PORTS", "1", 1, 4);
  c.uar_regs = parse_u32("EMU_UARS", "16", 1, 64);
  c.td_uar_regs = parse_u32("EMU_TD_UARS", "16", 0, 64);
  c.single_threaded = std::atoi(env_or("EMU_SINGLE_THREADED", "0")) != 0;
  std::string bf = env_or("EMU_BLUEFLAME", "auto");
  c.blueflame = bf == "always" || bf == "1"  ? BlueFlameUse::always
                : bf == "never" || bf == "0" ? BlueFlameUse::never
                                             : BlueFlameUse::unlocked_registers;
  if (bf != "auto" && bf != "always" && bf != "1" && bf != "never" && bf != "0")
    std::fprintf(stderr, "rdmaemu: EMU_BLUEFLAME: unknown '%s', using auto\n", bf.c_str());
  std::string engine = env_or("EMU_ENGINE", "inline");
  // A scheduled program's device is the engine inline in its posters: their steps are its points.
  // A device thread would be a second device, outside the run.
  const char* scheduled = std::getenv("EMU_SCHEDULE");
  bool thread = engine == "thread" && !(scheduled && *scheduled);
  c.engine = thread ? EngineMode::progress_thread : EngineMode::inline_on_doorbell;
  c.log = std::atoi(env_or("EMU_LOG", "0")) != 0;
  c.vendor_part_id =
      static_cast<uint32_t>(std::strtoul(env_or("EMU_VENDOR_PART_ID", "4123"), nullptr, 0));
  c.staging = parse_size(env_or("EMU_STAGING", "256K"));
  c.link_layers = parse_link_layers(env_or("EMU_LINK_LAYER", "ib"));
  c.roce_netdevs = split_commas(env_or("EMU_ROCE_NETDEV", "auto"));
  return c;
}

uint32_t xrc_policy_now() {
  std::string p = env_or("EMU_XRC_POLICY", "kernel");
  if (p == "xrcd") return 1;
  if (p == "creator") return 2;
  if (p != "kernel")
    std::fprintf(stderr, "rdmaemu: EMU_XRC_POLICY: unknown '%s', using kernel\n", p.c_str());
  return 0;
}

bool xrc_tgt_dies_with_xrcd_now() {
  return std::string(env_or("EMU_XRC_TGT_LIFETIME", "process")) == "xrcd";
}

const Config& config() {
  // Never destroyed (docs/architecture.md, "Exit"): read by verbs on any thread, also while
  // another thread's exit() runs the static destructors.
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
