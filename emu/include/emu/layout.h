// SPDX-License-Identifier: BSD-2-Clause
// The shared segment's layout: one Header per user and fabric, holding every device, port, attached
// process and object table. Everything here is plain data reachable from any process that maps the
// segment at any address: references are table indices or segment offsets, never pointers.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "emu/inject_layout.h"
#include "emu/raw_layout.h"
#include "emu/shm_lock.h"
#include "emu/wire_layout.h"

namespace emu {

// The segment heap's state (its allocator is emu/shm/shm_heap.h, private to emu/).
struct ShmHeapHeader {
  uint64_t heap_off;      // first byte of the heap (page aligned), from the segment base
  uint64_t heap_blocks;   // in kHeapMinBlock units
  uint64_t order_off;     // uint8_t[heap_blocks]: 1 + order of an allocated block's head, else 0
  uint64_t free_off[32];  // per order: uint64_t bitmap words, bit i = block i of that order free
  uint32_t max_order;
  uint32_t rsvd;
  // The heap's first blocks that have bookkeeping (pages taken, bits live): the heap grows by
  // 2^kHeapGrowOrder blocks at a time as allocations need, up to heap_blocks. Written under the
  // allocator's lock, release; the blocks a step adds are given back only after it is stored.
  uint64_t grown_blocks;
};

constexpr uint64_t kHeapMinBlock = 64;
constexpr uint32_t kHeapGrowOrder = 14;  // a growth step: 2^14 blocks of 64 B, 1 MiB of heap

constexpr uint64_t kMagic = 0x30554d45414d4452ull;  // "RDMAEMU0"
constexpr uint32_t kLayoutVersion = 40;             // bump with every change to a shared struct

constexpr uint32_t kMaxDevices = 8;
constexpr uint32_t kMaxPorts = 4;
// GID table entries a port holds: an InfiniBand port uses the first kIbGidTableLen (it reports
// that length, as before RoCE ports existed), a RoCE port all of them (its interface's addresses,
// two entries each).
constexpr uint32_t kGidTableLen = 16;
constexpr uint32_t kIbGidTableLen = 4;
constexpr uint32_t kMaxProcs = 128;
constexpr uint32_t kMaxContexts = 256;
// The object tables below live in heap chunks (SlotDir): a limit costs its directory (8 bytes per
// kChunkSlots slots) until slots are used.
constexpr uint32_t kMaxPds = 16384;
constexpr uint32_t kMaxMrs = 65536;  // an MR key is index << 8 | generation
constexpr uint32_t kMaxCqs = 65536;
// A QPN is 24 bits: the slot index below, a generation (1..255) above, so a stale number finds
// nothing until the slot has been reused 255 times.
constexpr uint32_t kQpIndexBits = 16;
constexpr uint32_t kMaxQps = 1u << kQpIndexBits;
constexpr uint32_t kSrqIndexBits = 12;
constexpr uint32_t kMaxSrqs = 1u << kSrqIndexBits;
constexpr uint32_t kMaxXrcds = 64;
constexpr uint32_t kMaxXrcHandles = 4096;
constexpr uint32_t kMaxMcastPerQp = 8;      // multicast groups one UD QP can join
constexpr uint16_t kMcastLidBase = 0xc000;  // IB multicast LIDs: 0xc000 .. 0xfffe
constexpr uint32_t kMcastQpn = 0xffffff;    // the destination QPN of a multicast send
constexpr uint32_t kUarRegsMax = 128;       // shared + thread-domain registers per context
constexpr uint32_t kBfBufSize = 256;        // each register has two BlueFlame buffers of this size
// A destroyed object is dying until no engine can still be using it (see EngineSlot): it cannot be
// found by number or key, and its slot is not handed out again.
enum SlotState : uint32_t { kSlotFree = 0, kSlotLive = 1, kSlotDying = 2 };

// QP states use ibv_qp_state's numbering so the verbs edge needs no table.
enum QpState : uint32_t { kQpsReset, kQpsInit, kQpsRtr, kQpsRts, kQpsSqd, kQpsSqe, kQpsErr };
enum QpType : uint8_t {
  kQptRc = 2,
  kQptUc = 3,
  kQptUd = 4,
  kQptRaw = 8,  // raw packet: whole Ethernet frames (emu/raw.h); also an RSS QP's receive WQs
  kQptXrcSend = 9,
  kQptXrcRecv = 10,
  // mlx5's dynamically connected transport (the mlx5 personality, mlx5dv_create_qp): a DCI sends
  // reliably to any DCT, named per WQE by its address vector (the DCT's number and access key);
  // a DCT receives from any DCI that presents its key, into its SRQ.
  kQptDci = 12,
  kQptDct = 13
};

// Access flags use ibv_access_flags' numbering.
enum Access : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
  kAccessMwBind = 16,
  kAccessZeroBased = 32,
};

// Async event types use ibv_event_type's numbering.
enum AsyncEvent : uint32_t {
  kEvCqErr = 0,
  kEvQpFatal = 1,
  kEvQpReqErr = 2,
  kEvQpAccessErr = 3,
  kEvCommEst = 4,
  kEvSqDrained = 5,
  kEvPathMig = 6,
  kEvPathMigErr = 7,
  kEvDeviceFatal = 8,
  kEvPortActive = 9,
  kEvPortErr = 10,
  kEvLidChange = 11,
  kEvPkeyChange = 12,
  kEvSmChange = 13,
  kEvSrqErr = 14,
  kEvSrqLimit = 15,
  kEvLastWqe = 16,
  kEvClientReregister = 17,
  kEvGidChange = 18,
};

// Link layers and GID types use the numbering of IBV_LINK_LAYER_* and ibv_gid_type.
enum LinkLayer : uint8_t { kLinkLayerIb = 1, kLinkLayerEthernet = 2 };
enum GidType : uint8_t { kGidTypeIb = 0, kGidTypeRoceV1 = 1, kGidTypeRoceV2 = 2 };

struct PortState {
  uint16_t lid;         // 0 on Ethernet: RoCE routes by GID
  uint8_t state;        // ibv_port_state numbering (4 = ACTIVE)
  uint8_t link_layer;   // LinkLayer
  uint8_t active_mtu;   // ibv_mtu numbering (1 = 256 ... 5 = 4096)
  uint8_t gid_count;    // valid entries at the head of gid[]; the rest of the table is empty
  uint8_t gid_tbl_len;  // what ibv_query_port reports (at most kGidTableLen)
  uint8_t rsvd;
  uint64_t gid_prefix;  // host order
  uint64_t port_guid;   // host order
  // RoCE: the interface the port is bound to (its addresses were read when the segment was made).
  uint32_t ndev_ifindex;
  char ndev_name[16];              // IFNAMSIZ
  uint8_t gid_type[kGidTableLen];  // GidType
  uint8_t gid[kGidTableLen][16];   // network byte order, as ibv_gid
};

struct DeviceState {
  char name[32];
  uint64_t node_guid;
  uint32_t num_ports;
  uint32_t rsvd;
  PortState ports[kMaxPorts];
};

enum ProcState : uint32_t { kProcFree = 0, kProcAlive = 1, kProcDead = 2 };

struct ProcRecord {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> stalled_qps;  // this process's QPs whose head WQE waits for a retry
  int32_t pid;
  // 1: the process ran its exit handler (Segment::detach_at_exit) and no longer counts as using the
  // fabric; its objects stay until the sweep finds it gone.
  std::atomic<uint32_t> detached;
  uint64_t start_time;  // /proc/<pid>/stat field 22: tells a recycled pid from the original
};

struct ContextSlot {
  std::atomic<uint32_t> state;
  uint32_t owner;
  uint32_t dev;
  int32_t async_wfd;  // write end of the async-event pipe, in the owner
  uint64_t uid;
  uint64_t uar_off;  // UarReg array
  uint32_t uar_count;
  uint32_t rsvd;
};

constexpr uint32_t kBfChunks = kBfBufSize / 64;  // 64-byte write-combining chunks per buffer

// A doorbell register (mlx5's UAR page: an 8-byte doorbell and two BlueFlame buffers), with what
// the device recorded of the writes that reached it. A NIC sees only the bytes; the emulator also
// knows which thread made each write (a tag: writer tid << 32 | that thread's burst number), which
// is what lets it tell a torn BlueFlame WQE from a whole one (emu/device/doorbell.h,
// docs/design/doorbells-and-mmio.md).
struct alignas(64) UarReg {
  uint64_t doorbell;                  // the 8-byte doorbell register
  std::atomic<uint32_t> device_busy;  // the device takes one write to this register at a time
  uint32_t ctx;                       // which register this is, for race reports: context slot,
  uint16_t index;                     // index in the context (dedicated ones after the shared)
  uint16_t dev;
  std::atomic<uint32_t> db_writer;  // tid of the last 8-byte doorbell write
  // Per BlueFlame buffer, the last two distinct threads whose plain stores reached it
  // (emu/mmio.h, "Plain stores"): [0] the latest. A torn WQE assembled only from the chunks of
  // one thread's writes had another thread's stores break into them: this names it.
  std::atomic<uint32_t> bf_store_writers[2][2];
  uint8_t pad[24];
  std::atomic<uint64_t> bf_tag[2][kBfChunks];  // per chunk: the write that last filled it
  uint64_t bf_taken[2][kBfChunks];  // per chunk: the tag the device last took (device only)
  uint8_t bf[2][kBfBufSize];        // BlueFlame buffers, alternated per post
};
static_assert(sizeof(UarReg) == 64 + 64 + 64 + 2 * kBfBufSize);
static_assert(offsetof(UarReg, bf_tag) == 64 && offsetof(UarReg, bf) == 192);

// The device's record of the stores to one send block (the driver's ring-copy helper writes it;
// code posting on its own may, through emudv_sq_write). What lets the device name the threads
// behind a double write and a doorbell record that runs ahead of the ring.
struct WqeWriteRec {
  std::atomic<uint32_t> pos;          // ring position (block counter) last written here
  std::atomic<uint32_t> writer;       // tid of the last writer
  std::atomic<uint32_t> prev_writer;  // tid of the writer before it
  std::atomic<uint32_t> unfetched;    // WQE starts written here since the device last fetched it
};
static_assert(sizeof(WqeWriteRec) == 16);

// The WQE a BlueFlame write delivered, kept until the device reaches its index: a NIC executes the
// copy it received, not the ring (so a torn copy reaches the wire). Written only by the register's
// intake (one at a time; `seq` odd while it writes, +2 per copy), taken by the send queue's runner,
// which marks the copy's seq `consumed` (a plain store: no read-modify-write per message). There
// is a copy to take while seq != consumed.
struct alignas(64) BfStash {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> consumed;
  std::atomic<uint32_t> index;  // the WQE index (16 bits) | kStashBad if it did not parse
  uint32_t writers[2];          // the threads whose chunks it holds
  uint32_t torn;                // 1: assembled from more than one write
  uint32_t rsvd[10];
  uint8_t bytes[kBfBufSize];
};
constexpr uint32_t kStashBad = 1u << 16;
// Whether the device has a BlueFlame copy it has not taken yet (a zeroed slot has none).
inline bool stash_pending(const BfStash& s) {
  return s.seq.load(std::memory_order_acquire) != s.consumed.load(std::memory_order_relaxed);
}

// Race events (emu/race_log.h): what the device saw that only concurrent, unordered or
// unsynchronised driver stores produce.
enum RaceKind : uint8_t {
  kRaceNone = 0,
  kRaceBfTorn = 1,          // a BlueFlame buffer's chunks came from more than one write
  kRaceDbrecBackwards = 2,  // the send doorbell record moved backwards
  kRaceDbrecAhead = 3,      // the send doorbell record counts blocks the ring was not given
  kRaceDoubleWrite = 4,     // two WQEs written into one slot before the device fetched it
  kRaceStaleWqe = 5,        // the device reached a slot not written since the last wrap
  kRaceOwner = 6,  // a lock-free (thread-domain / single-threaded) QP entered by two threads
  kRaceKinds = 7,
};
// What the device did with what it saw.
enum RaceAction : uint8_t {
  kActNone = 0,          // nothing to do (the ownership checker reports; the post goes on)
  kActExecutedBf = 1,    // executed the BlueFlame copy as the WQE at `slot`
  kActExecutedRing = 2,  // executed the WQE in the ring at `slot`
  kActLocalQpOpErr = 3,  // completed `slot` with a local QP operation error (QP to ERR)
  kActIgnored = 4,       // took nothing from it (already fetched / stale copy / kept furthest)
  kActDropped = 5,       // the write named no QP of this register's context
};

struct RaceBody {
  uint8_t kind;    // RaceKind
  uint8_t action;  // RaceAction
  uint16_t reg;    // register index in its context (0xffff: none)
  uint32_t dev;
  uint32_t qpn;
  uint32_t ctx;         // context slot (0xffffffff: unknown)
  uint32_t slot;        // WQE index (16 bits), or the BlueFlame buffer for kRaceBfTorn
  int32_t pid;          // the process the writer threads belong to
  uint32_t writers[2];  // writer thread ids (0: not known)
  uint32_t value[2];    // kind-specific: doorbell record before/after; chunk mask
  uint64_t time_ns;     // CLOCK_MONOTONIC when the device saw it
};

struct RaceEvent {
  std::atomic<uint64_t> seq;  // 1 + its number in the log once complete; 0 while written
  RaceBody body;
};

constexpr uint32_t kRaceLogLen = 1024;
struct RaceLog {
  std::atomic<uint64_t> next;                             // events ever recorded
  std::atomic<uint64_t> counts[kMaxDevices][kRaceKinds];  // per device and kind
  RaceEvent ring[kRaceLogLen];                            // the last kRaceLogLen events
};

struct PdSlot {
  std::atomic<uint32_t> state;
  uint32_t owner;
  uint32_t dev;
  uint32_t ctx;
};

struct MrSlot {
  std::atomic<uint32_t> state;
  uint32_t key;  // lkey == rkey: index << 8 | generation
  uint32_t pd;
  uint32_t owner;
  uint32_t dev;
  uint32_t access;  // ibv_access_flags
  uint64_t addr;    // in the owner's address space
  uint64_t length;
  uint64_t iova;  // what remote keys address
  // The MR's pages as a window of a file the owner keeps open (its registration file, where moved
  // private pages lie at their own address, or a shared file the region was found in), so engines
  // in other processes map it and copy without a system call. share_len 0: not so.
  int32_t share_fd;   // in the owner
  uint32_t mw_type;   // 0: an MR; 1 or 2: a memory window (ibv_alloc_mw) in this slot
  uint64_t share_va;  // page-aligned start, in the owner's address space
  uint64_t share_len;
  uint64_t share_off;  // offset of share_va in the file
  uint64_t share_uid;  // names the file (several MRs may share one)
  // A memory window: bound into the MR of this key (its addr/length/iova/access are the window's),
  // and for type 2 through the QP of this number, the only one remote access may come through.
  uint32_t mw_mr_key;
  uint32_t mw_qpn;
  uint32_t mw_bound;  // 1 while bound (a key of 0 is a valid MR key)
  uint32_t mw_rsvd;
};

// What a CQ's completion channel waits for (ibv_req_notify_cq): the driver arms, the device disarms
// as it raises the event (one event per arm).
enum CqArm : uint32_t { kCqArmNone = 0, kCqArmNext = 1, kCqArmSolicited = 2 };

// Fields are grouped by who writes them, one cache line each, so that a producer in one process
// and the consumer in another do not bounce one line on every completion.
struct CqSlot {
  std::atomic<uint32_t> state;
  uint32_t owner;
  uint32_t dev;
  uint32_t ctx;
  uint32_t cqe_cnt;  // power of two
  uint32_t log_cqe_cnt;
  uint64_t buf_off;  // Cqe64[cqe_cnt]
  uint64_t uid;      // names the CQ in event records
  uint32_t index;    // its slot index (a slot's address does not give it: chunks, SlotDir)
  uint32_t format;   // CqFormat: the entries' size and how the owner reads the ring
  int32_t chan_wfd;  // write end of the completion channel in the owner, -1 if none
  uint32_t stamp;    // 1: CQEs carry a timestamp (a CQ made to report one)
  uint64_t chan_uid;
  // The ring producers write: buf_off | log_cqe_cnt in one word (buf_off is 4096-aligned), read
  // once per CQE so that a resize (resize_cq, emu/objects.h) is never seen half-done. The fields
  // above describe the same ring for the consumer and the sweep; resize_cq changes this word
  // first and those only once no engine still holds the old one.
  std::atomic<uint64_t> ring;
  // Producers (engines, any process).
  alignas(64) std::atomic<uint32_t> pi;  // next CQE to produce (reserved by fetch_add)
  std::atomic<uint32_t> ci_seen;         // the consumer index as producers last read it
  // The consumer (the driver in the owner).
  alignas(64) std::atomic<uint32_t> ci;  // consumer index: the CQ doorbell record's first word
  // Its second word: under kCqFormatMlx5 the arm record a driver written for mlx5 stores before it
  // arms the CQ through its register (the arm itself comes with that store); read by nothing here.
  std::atomic<uint32_t> arm_record;
  // Rarely written.
  alignas(64) std::atomic<uint32_t> arm;  // CqArm
  std::atomic<uint32_t> overrun;          // CqOverrun
  std::atomic<uint32_t> stalled_qps;      // QPs completing here whose head WQE waits for a retry
  // The process (slot + 1) that took the arm and has its completion event still to write (0:
  // none). The owner's waiting thread delivers the event itself if that process died meanwhile
  // (recover_lost_events in the provider's cq.cpp).
  std::atomic<uint32_t> raiser;
  // The receive staging area (emu/staging.h), 0 until the owner's poll makes one: set once, by
  // the owner, and freed with the CQ (free_rings).
  std::atomic<uint64_t> staging_off;
};

// CqSlot::format.
// kCqFormatMlx5: the owner may read the ring from memory, as code written for mlx5 does once
//   mlx5dv_init_obj hands it the CQ (the mlx5 personality): `ci` holds the consumer index as
//   mlx5's CQ doorbell record does (big-endian, 24 bits), and no CQE leaves its payload for the
//   owner's poll to move into the receive buffer (scatter to CQE, staging).
// kCqFormatCqe128: entries of 128 bytes, the CQE in the second half (mlx5dv_create_cq's cqe_size
//   128; the first half is mlx5's scatter-to-CQE area, which the device leaves alone).
// kCqFormatIgnoreOverrun: made with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: the device never checks
//   for an overrun (a full CQ's oldest CQEs are overwritten; its consumer may never store its
//   index, as UCX built without assertions does not).
enum CqFormat : uint32_t { kCqFormatMlx5 = 1, kCqFormatCqe128 = 2, kCqFormatIgnoreOverrun = 4 };
inline uint32_t cq_log_entry(uint32_t format) { return format & kCqFormatCqe128 ? 7 : 6; }
// The consumer index as a 32-bit count from mlx5's 24 bits: the count nearest `ref` (an index of
// the same CQ, within 2^23 of it) that has those low bits.
inline uint32_t cq_index_near(uint32_t low24, uint32_t ref) {
  return ref + static_cast<uint32_t>(static_cast<int32_t>((low24 - ref) << 8) >> 8);
}
// What the record `ci` holds for consumer index ci.
inline uint32_t cq_record_of(uint32_t format, uint32_t ci) {
  return format & kCqFormatMlx5 ? __builtin_bswap32(ci & 0xffffff) : ci;
}
// The consumer index the record holds, near ref.
inline uint32_t cq_consumer_index(const CqSlot& cq, uint32_t ref) {
  uint32_t rec = cq.ci.load(std::memory_order_acquire);
  return cq.format & kCqFormatMlx5 ? cq_index_near(__builtin_bswap32(rec) & 0xffffff, ref) : rec;
}

// CqSlot::ring: a ring's offset (4096-aligned), its log2 CQE count in bits 0-5 and, in bits 6-11,
// the log2 of how many CQEs producers may have outstanding (the ring's count, except while a
// shrink is under way: resize_cq).
constexpr uint64_t kCqRingLowBits = 4095;
inline uint64_t cq_ring_word(uint64_t buf_off, uint32_t log_cqe_cnt, uint32_t log_capacity) {
  return buf_off | log_cqe_cnt | uint64_t{log_capacity} << 6;
}
inline uint64_t cq_ring_off(uint64_t w) { return w & ~kCqRingLowBits; }
inline uint32_t cq_ring_log(uint64_t w) { return static_cast<uint32_t>(w & 63); }
inline uint32_t cq_ring_log_capacity(uint64_t w) { return static_cast<uint32_t>(w >> 6 & 63); }

// A receive completion being placed (QpSlot::rq_owed, SrqSlot::owed): the CQ slot taken for it
// and the QP it names, so that whoever next holds the queue's lock after a holder that died there
// can finish it (Engine::settle_owed). 0: none.
constexpr uint64_t kRecvOwed = uint64_t{1} << 63;
inline uint64_t recv_owed(uint32_t cq_pi, uint32_t qpn) {
  return kRecvOwed | uint64_t{qpn & 0xffffff} << 32 | cq_pi;
}
inline uint32_t recv_owed_pi(uint64_t v) { return static_cast<uint32_t>(v); }
inline uint32_t recv_owed_qpn(uint64_t v) { return static_cast<uint32_t>(v >> 32) & 0xffffff; }

// Requester stall reasons: the head WQE waits for a receive (RNR) or for an answer that does not
// come.
enum SqStall : uint32_t { kStallNone = 0, kStallRnr = 1, kStallRetry = 2 };

struct QpSlot {
  std::atomic<uint32_t> state;
  uint32_t qpn;
  uint32_t owner;
  uint32_t dev;
  uint32_t ctx;
  uint8_t port;
  uint8_t type;
  uint8_t sq_sig_all;
  uint8_t rsvd0;
  std::atomic<uint32_t> qp_state;
  uint32_t pd;
  uint32_t send_cq;
  uint32_t recv_cq;
  uint64_t uid;
  // Path and transport attributes (set by modify).
  uint32_t dest_qpn;
  uint16_t dlid;
  uint8_t path_mtu;
  uint8_t sl;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t min_rnr_timer;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t is_global;
  uint8_t sgid_index;
  uint8_t dgid[16];
  uint32_t access;
  uint16_t pkey_index;
  uint16_t uar_index;  // the doorbell register the QP's driver rings (for race reports)
  uint32_t qkey;
  uint64_t dc_key;  // a DCT: the access key a DCI's WQE must carry
  // Rings.
  uint64_t sq_off;
  uint32_t sq_bbs;      // send ring size in 64-byte blocks (power of two)
  uint32_t rq_wqe_cnt;  // power of two
  uint64_t rq_off;
  uint32_t rq_stride;  // bytes per receive WQE (16 * max receive SGEs, power of two)
  uint32_t rss_ref;    // raw packet: 1 + the RssSlot of an RSS QP (it receives on WQs); 0: none
  uint64_t dbrec_off;  // be32[2]: [0] receive counter, [1] send counter
  uint64_t wrec_off;   // WqeWriteRec[sq_bbs]: the device's record of the driver's ring stores
  std::atomic<uint32_t> incarnation;  // bumped by every move to RESET; stamped on each CQE
  // Device-side requester state (written per message by the requester's engine).
  alignas(64) ShmLock sq_engine;
  uint32_t sq_ci;  // next send block the device fetches
  uint32_t sq_psn;
  std::atomic<uint32_t> stall;
  uint32_t stall_attempts;
  std::atomic<uint32_t> retry_now;  // try the stalled head WQE at once (a receive was posted)
  uint64_t stall_delay_us;          // the wait before the stalled head WQE is tried again
  uint64_t stall_since_ns;
  uint64_t peer_checked_ns;  // when the responder's process was last seen alive (shared mappings)
  // Race detection (emu/device/doorbell.h), the device's view of the driver's stores. The first two
  // are written by the driver per post: here, on the line its own engine uses, not among the
  // attributes above that a peer's engine reads per message.
  std::atomic<uint32_t> wrec_tracked;  // 1 once a ring store was recorded (else: not checked)
  std::atomic<uint32_t> dbrec_writer;  // tid of the last send doorbell record store
  std::atomic<uint32_t> dbrec_other;   // the last other thread that stored it (0: none yet)
  uint32_t dbrec_seen;                 // furthest send doorbell record value read (16 bits)
  uint32_t dbrec_seen_writer;
  uint32_t dbrec_ahead_at;  // doorbell record value already reported as ahead
  uint32_t dbrec_last_raw;  // the raw value read last (a backwards value is reported once)
  // The responder the requester's packets reached last (engine_detail::responder_of): its slot's
  // offset (0: none found) and the Header::route_gen it was found under. Its path checks hold
  // while the generation stays; what else makes a responder one is asked again per message.
  uint64_t resp_off;
  uint64_t resp_gen;
  // Device-side responder state (written per message by the engine of whoever sends to us).
  alignas(64) ShmLock rq_lock;
  uint32_t rq_ci;
  uint32_t rq_psn;
  // The receive doorbell record's value when the device last read it: WQEs below it are known
  // posted, so the record (a line the receiver writes per post) is read again only when rq_ci
  // reaches it, as a NIC caches the producer index it fetched.
  uint32_t rq_pi_seen;
  // A receive completion being placed (RecvOwed): set between the CQE's slot being taken and the
  // WQE being consumed, under rq_lock. Found set by the lock's next holder, the holder died there.
  std::atomic<uint64_t> rq_owed;
  // Written only when a requester parks on our empty receive queue; read by every post_recv, so
  // it has a line of its own (beside rq_lock, each receive would pull the line the sender writes).
  alignas(64) std::atomic<uint32_t> rnr_waiter;  // qpn + 1 of a requester stalled on our empty RQ
  // Rarely written.
  uint32_t srq_ref;                // 1 + the SrqSlot index it receives from; 0: its own RQ
  std::atomic<uint32_t> comm_est;  // IBV_EVENT_COMM_EST raised since the last RESET
  std::atomic<uint32_t> last_wqe;  // IBV_EVENT_QP_LAST_WQE_REACHED raised since the last RESET
  // XRC TGT QPs (type kQptXrcRecv): the domain, and the handles (XrcHandle) that keep it alive.
  uint32_t xrcd_ref;              // 1 + the XrcdSlot index; 0: not an XRC TGT QP
  std::atomic<uint32_t> handles;  // open handles in every process (ibv_create_qp / ibv_open_qp)
  uint8_t dies_with_xrcd;         // lives on when its last handle goes with a process (2a/2b)
  uint8_t rsvd4[3];
  int32_t creator_pid;     // who created it (a TGT QP outlives it: "orphaned")
  uint64_t creator_start;  // the creator's start time (tells a recycled pid apart)
  uint32_t n_mcast;        // UD: multicast groups joined
  struct {
    uint8_t gid[16];
    uint16_t lid;
  } mcast[kMaxMcastPerQp];
  BfStash bf_stash;  // the last BlueFlame WQE delivered, until the device uses it
};

// XRC domain lifetime policies (docs/design/xrc.md). kernel: today's Linux rule, a TGT QP lives
// while a handle to it exists, in any process. xrcd: the 2011 proposal (2a), a TGT QP lives until
// it is destroyed explicitly or its domain goes. creator: (2b) the creator chooses per TGT QP.
enum XrcPolicy : uint32_t { kXrcPolicyKernel = 0, kXrcPolicyXrcd = 1, kXrcPolicyCreator = 2 };

// An XRC domain: shared by the processes that open the same file (its inode) on one device; use
// count = opens + objects, and the slot is freed when both are 0.
struct XrcdSlot {
  std::atomic<uint32_t> state;
  uint32_t owner;  // the process that created it (for the census)
  uint32_t dev;
  uint32_t policy;     // XrcPolicy, fixed at creation
  uint64_t inode_dev;  // st_dev of the file; 0 with inode 0: a private domain (fd -1)
  uint64_t inode;      // st_ino
  uint64_t uid;
  std::atomic<uint32_t> opens;    // ibv_open_xrcd handles (XrcHandle), every process
  std::atomic<uint32_t> objects;  // TGT QPs and XRC SRQs on it
};

// A process's reference to a shared XRC object: an ibv_open_xrcd, or a handle to a TGT QP
// (ibv_create_qp or ibv_open_qp). A process's exit releases its references, as a file close does.
enum XrcHandleKind : uint32_t { kHandleXrcd = 1, kHandleTgtQp = 2 };

struct XrcHandle {
  std::atomic<uint32_t> state;
  uint32_t owner;   // the process holding it
  uint32_t kind;    // XrcHandleKind
  uint32_t object;  // XrcdSlot or QpSlot index
  uint32_t ctx;     // the context it was made on (a TGT QP's events go there)
  uint32_t rsvd;
  uint64_t uid;  // names the handle (its ibv_qp) in the holder's event records
};

// A shared receive queue, in mlx5's layout: each WQE is a next segment (the index of the WQE that
// follows it in a list) then data segments. The driver posts at the list's head and appends the
// WQEs it frees at its tail; the device takes WQEs in list order. Consumed by the engines of every
// QP attached to it, in any process.
struct SrqSlot {
  std::atomic<uint32_t> state;
  uint32_t owner;
  uint32_t dev;
  uint32_t ctx;
  uint32_t pd;
  uint32_t srqn;     // generation << kSrqIndexBits | index
  uint32_t wqe_cnt;  // power of two
  uint32_t stride;   // bytes per WQE: next segment + 16 * max SGEs, power of two
  uint64_t buf_off;
  uint64_t dbrec_off;  // be32 [0]: WQEs posted (16-bit counter)
  uint64_t uid;
  std::atomic<uint32_t> attached_qps;  // destroy is refused (EBUSY) while QPs use it
  uint32_t xrcd_ref;                   // XRC SRQs: 1 + the XrcdSlot index; 0 for a basic SRQ
  uint32_t cq;                         // XRC and TM SRQs: the CqSlot its completions go to
  uint32_t tm_tags;                    // TM SRQs: entries of the tag list; 0: not a TM SRQ
  uint64_t tm_off;                     // TM SRQs: TmListHead, then tm_tags TmTag entries
  // Device side (the engines of senders, any process).
  alignas(64) ShmLock lock;
  uint32_t ci;                  // WQEs consumed
  uint32_t head;                // the WQE the device takes next
  std::atomic<uint32_t> limit;  // armed limit, 0 when not armed: SRQ_LIMIT_REACHED below it
  uint32_t pi_seen;            // the doorbell record's value when last read (as QpSlot::rq_pi_seen)
  std::atomic<uint64_t> owed;  // a receive completion being placed (as QpSlot::rq_owed)
  // Written when a requester parks on the empty SRQ; read by every post.
  alignas(64) std::atomic<uint32_t> rnr_waiter;
};

// A tag matching SRQ's tag list (ibv_create_srq_ex(3) IBV_SRQT_TM), written by the device only:
// list operations (ibv_post_srq_ops) and incoming tagged messages, both under the SRQ's lock.
struct TmListHead {
  uint32_t unexpected;  // messages the device found no tag for (its phase count)
  uint32_t synced;      // the count software last reported (IBV_OPS_TM_SYNC)
  uint32_t seq;         // ADDs executed: a tag's age, so the oldest match wins (MPI order)
  uint32_t rsvd[13];
};
static_assert(sizeof(TmListHead) == 64);

enum TmTagState : uint32_t {
  kTmTagFree = 0,
  kTmTagPosted = 1,  // matched against incoming messages
  kTmTagStale = 2,   // added while software was behind the device: not matched until a SYNC
  kTmTagRndv = 3,    // matched by a rendezvous header: the read is still to be made
};

struct TmTag {
  uint32_t state;  // TmTagState
  uint32_t seq;    // TmListHead::seq when added
  uint64_t tag;
  uint64_t mask;  // a message matches when (its tag & mask) == tag
  uint64_t addr;  // the tagged buffer (one SGE, as mlx5's max_sge)
  uint32_t length;
  uint32_t lkey;
  // A rendezvous in flight (kTmTagRndv): the sender's buffer and its header for the FIN.
  uint64_t rndv_va;
  uint32_t rndv_rkey;
  uint32_t rndv_len;
  uint64_t msg_tag;
  uint32_t app_ctx;
  uint32_t rsvd;
};
static_assert(sizeof(TmTag) == 72);

// Engine sections, for reclamation: a thread running the engine marks its slot odd while inside
// (it may hold pointers to any object's slot, rings and memory), even when out. Destroying an
// object first makes it unfindable, then waits until every slot that was odd has moved on — only
// then are its rings freed (or, for an MR, does ibv_dereg_mr return: no DMA after that).
constexpr uint32_t kEngineSlots = 32;  // per process; more engine threads share an overflow count

struct alignas(64) EngineSlot {
  std::atomic<uint64_t> seq;  // odd: inside the engine
  std::atomic<uint32_t> owner_tid;
};

struct EngineSlots {
  EngineSlot slot[kEngineSlots];
  alignas(64) std::atomic<uint32_t> overflow_inside;  // threads beyond kEngineSlots, inside now
  std::atomic<uint32_t> next;                         // slots handed out
};

// A table of slots in heap chunks of kChunkSlots, found through this directory in the header. A
// chunk is allocated (zeroed, its tmpfs pages reserved) when the first slot of it is handed out,
// under table_lock, and kept while the fabric lives: a slot's address never changes. Chunks are
// allocated in order, so the allocated ones are a prefix: scans stop at table_end(). Readers
// without the lock (an engine finding a QP by number) load a chunk's offset with acquire; it is
// stored with release after the chunk is zeroed.
constexpr uint32_t kChunkShift = 8;
constexpr uint32_t kChunkSlots = 1u << kChunkShift;

template <uint32_t Max>
struct SlotDir {
  static constexpr uint32_t kMax = Max;
  std::atomic<uint32_t> chunks;  // chunks allocated: slots [0, chunks * kChunkSlots) exist
  uint32_t next;                 // where the next search for a free slot begins (table_lock)
  std::atomic<uint64_t> chunk[Max / kChunkSlots];  // segment offset of each chunk; 0: none yet
};

struct Header {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_size;
  uint64_t segment_size;
  ShmLock table_lock;   // object table allocation (slow path)
  ShmLock atomic_lock;  // serialises remote atomics: IBV_ATOMIC_HCA semantics
  ShmLock xrc_lock;     // XRC domains and handles (emu/xrc/xrc.cpp; after table_lock)
  std::atomic<uint64_t> next_uid;
  std::atomic<uint32_t> generation;
  // 1: kept when no process is attached (emu-ctl persist, EMU_FABRIC_PERSIST), as an XRC domain
  // under policy xrcd keeps it; 0: removed by the last process to detach
  // (docs/design/segment-and-heap.md).
  std::atomic<uint32_t> persistent;
  ShmHeapHeader heap;  // the allocator of rings and buffers (emu/shm/shm_heap.h)
  uint32_t num_devices;
  DeviceState devices[kMaxDevices];
  ProcRecord procs[kMaxProcs];
  ContextSlot ctxs[kMaxContexts];
  SlotDir<kMaxPds> pd_dir;    // PdSlot chunks
  SlotDir<kMaxMrs> mr_dir;    // MrSlot chunks
  SlotDir<kMaxCqs> cq_dir;    // CqSlot chunks
  SlotDir<kMaxQps> qp_dir;    // QpChunk chunks: a QP's slot and its wire state
  SlotDir<kMaxSrqs> srq_dir;  // SrqSlot chunks
  XrcdSlot xrcds[kMaxXrcds];
  XrcHandle xrc_handles[kMaxXrcHandles];
  EngineSlots engines[kMaxProcs];
  RaceLog races;
  FaultTable faults;   // wire faults (emu/faults.h)
  InjectTable inject;  // error injection rules (emu/inject.h)
  RawSteering raw;     // raw packet QPs' flow rules and RSS (emu/raw.h)
  // Bumped after every change to what decides where a connected QP's packets go: a QP's path or
  // destination (ibv_modify_qp) and a port's state (device_routes_changed, emu/device.h). Read per
  // message by engines in every process, written only by those changes: a line of its own.
  alignas(64) std::atomic<uint64_t> route_gen;
  // The transport timers' hold (set_transport_timers_held, emu/control.h): while held_since is
  // set (CLOCK_MONOTONIC of the hold), every QP's ACK timeout and RNR timer stop counting; held_ns
  // is the time all past holds lasted. The engines' timer clock is the monotonic clock less both
  // (Engine::timer_now). Written under table_lock: held_ns before held_since returns to 0.
  alignas(64) std::atomic<uint64_t> timers_held_since;
  std::atomic<uint64_t> timers_held_ns;
};

// A QP table chunk: the slots, then per slot its head message on the packet wire (emu/wire/).
struct QpChunk {
  QpSlot slot[kChunkSlots];
  WireQp wire[kChunkSlots];
};

// Slot i of a table, or nullptr if i is out of range or its chunk is not allocated (a number from
// outside, e.g. a QPN on the wire). The header is the segment's first byte: offsets are from it.
template <class Chunk, uint32_t Max>
inline Chunk* table_chunk(const Header* h, const SlotDir<Max>& d, uint32_t i) {
  if (i >= Max) return nullptr;
  uint64_t off = d.chunk[i >> kChunkShift].load(std::memory_order_acquire);
  if (!off) return nullptr;
  return reinterpret_cast<Chunk*>(reinterpret_cast<char*>(const_cast<Header*>(h)) + off);
}
template <class T, uint32_t Max>
inline T* table_slot(const Header* h, const SlotDir<Max>& d, uint32_t i) {
  T* c = table_chunk<T>(h, d, i);
  return c ? c + (i & (kChunkSlots - 1)) : nullptr;
}
// Slots that exist: indices below this (a prefix of the table).
template <uint32_t Max>
inline uint32_t table_end(const SlotDir<Max>& d) {
  return d.chunks.load(std::memory_order_acquire) * kChunkSlots;
}

// One accessor per table. *_at: a number from outside (nullptr if no such slot exists). *_slot:
// an index the caller knows was handed out (a slot's field, a loop below table_end).
inline PdSlot* pd_at(const Header* h, uint32_t i) { return table_slot<PdSlot>(h, h->pd_dir, i); }
inline MrSlot* mr_at(const Header* h, uint32_t i) { return table_slot<MrSlot>(h, h->mr_dir, i); }
inline CqSlot* cq_at(const Header* h, uint32_t i) { return table_slot<CqSlot>(h, h->cq_dir, i); }
inline SrqSlot* srq_at(const Header* h, uint32_t i) {
  return table_slot<SrqSlot>(h, h->srq_dir, i);
}
inline QpSlot* qp_at(const Header* h, uint32_t i) {
  QpChunk* c = table_chunk<QpChunk>(h, h->qp_dir, i);
  return c ? &c->slot[i & (kChunkSlots - 1)] : nullptr;
}
// The slot of an index known handed out: no check (the fast path's lookup).
template <class Chunk, uint32_t Max>
inline Chunk& chunk_ref(const Header* h, const SlotDir<Max>& d, uint32_t i) {
  uint64_t off = d.chunk[i >> kChunkShift].load(std::memory_order_acquire);
  return *reinterpret_cast<Chunk*>(reinterpret_cast<char*>(const_cast<Header*>(h)) + off);
}
template <class T, uint32_t Max>
inline T& table_ref(const Header* h, const SlotDir<Max>& d, uint32_t i) {
  return (&chunk_ref<T>(h, d, i))[i & (kChunkSlots - 1)];
}
inline PdSlot& pd_slot(const Header* h, uint32_t i) { return table_ref<PdSlot>(h, h->pd_dir, i); }
inline MrSlot& mr_slot(const Header* h, uint32_t i) { return table_ref<MrSlot>(h, h->mr_dir, i); }
inline CqSlot& cq_slot(const Header* h, uint32_t i) { return table_ref<CqSlot>(h, h->cq_dir, i); }
inline SrqSlot& srq_slot(const Header* h, uint32_t i) {
  return table_ref<SrqSlot>(h, h->srq_dir, i);
}
inline QpSlot& qp_slot(const Header* h, uint32_t i) {
  return chunk_ref<QpChunk>(h, h->qp_dir, i).slot[i & (kChunkSlots - 1)];
}
inline WireQp& wire_slot(const Header* h, uint32_t i) {
  return chunk_ref<QpChunk>(h, h->qp_dir, i).wire[i & (kChunkSlots - 1)];
}
// Every slot that exists (allocated chunks only), in index order: fn(slot).
template <class T, uint32_t Max, class Fn>
inline void table_each(const Header* h, const SlotDir<Max>& d, T* (*at)(const Header*, uint32_t),
                       Fn&& fn) {
  for (uint32_t i = 0, end = table_end(d); i < end; ++i) fn(*at(h, i));
}
template <class Fn>
inline void each_pd(const Header* h, Fn&& fn) {
  table_each(h, h->pd_dir, pd_at, fn);
}
template <class Fn>
inline void each_mr(const Header* h, Fn&& fn) {
  table_each(h, h->mr_dir, mr_at, fn);
}
template <class Fn>
inline void each_cq(const Header* h, Fn&& fn) {
  table_each(h, h->cq_dir, cq_at, fn);
}
template <class Fn>
inline void each_srq(const Header* h, Fn&& fn) {
  table_each(h, h->srq_dir, srq_at, fn);
}
template <class Fn>
inline void each_qp(const Header* h, Fn&& fn) {
  table_each(h, h->qp_dir, qp_at, fn);
}

// A QP slot's index: its number's low bits (kept from the slot's creation on).
inline uint32_t qp_index(const QpSlot& q) { return q.qpn & (kMaxQps - 1); }
inline uint32_t srq_index(const SrqSlot& s) { return s.srqn & (kMaxSrqs - 1); }

}  // namespace emu
