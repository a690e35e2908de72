// SPDX-License-Identifier: BSD-2-Clause
// The emulated devices' verbs objects as this process sees them. Each wraps the public libibverbs
// struct (first member, so the pointer libibverbs hands back converts both ways) and refers to its
// shared state in the segment by table index.
#pragma once
#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "emu/device.h"
#include "emu/layout.h"
#include "emu/race_log.h"
#include "emu/sched/sched.h"
#include "emu/segment.h"
#include "emu/spin_lock.h"
#include "emu/wqe.h"

namespace emu::prov {

// fork() (fork.cpp): how many forks lie between this process and the one it started as. Each
// QP, CQ, SRQ and MR records the value it was made under; in a child of fork() the ones made
// before are the parent's (the engine reaches their memory in the parent), and every verb on them
// fails with EPERM without touching them (a load and a compare on the fast path).
extern uint32_t g_fork_generation;
template <class Obj>
inline bool inherited(const Obj* o) {
  return __builtin_expect(o->generation != g_fork_generation, 0);
}

struct EmuDevice {
  ibv_device dev;
  uint32_t index;
};

struct EmuQp;
struct EmuCq;
struct EmuXrcd;

// A driver lock that a thread mode turns off, as mlx5's spinlock with need_lock: objects made
// under a thread domain and everything under EMU_SINGLE_THREADED are unlocked. The mode is fixed
// when the object is made, so the default path pays one predictable branch on a line it touches
// anyway.
// Inside a scheduled run (emu/sched/sched.h) taking and dropping it are scheduling points, and a
// thread that finds it held is blocked by the schedule instead of spinning.
struct ModeLock {
  SpinLock spin;
  bool off = false;
  sched::ActorId holder = sched::kNoActor;  // inside a scheduled run only
  void init(bool lockless) { off = lockless; }
  void lock() {
    if (off) return;
    if (sched::scheduled()) return sched::lock_acquire(&holder, "provider lock", addr());
    spin.lock();
  }
  void unlock() {
    if (off) return;
    if (sched::scheduled()) return sched::lock_release(&holder, addr());
    spin.unlock();
  }

 private:
  uint64_t addr() const { return reinterpret_cast<uintptr_t>(this); }
};

// The ownership checker's word for one queue that has no lock (the thread inside it, 0: none).
// Process-local: only this process's threads post on its queues. A line of its own, so that the
// compare-and-swap of each post does not share a line with the ring state the poller writes.
struct alignas(64) OwnerWord {
  std::atomic<uint32_t> tid{0};
};
static_assert(sizeof(OwnerWord) == 64);

// What a kRaceOwner event names in value[0] (emudv.h): which queue two threads were inside.
enum OwnerQueue : uint32_t { kOwnerSend = 0, kOwnerRecv = 1, kOwnerSrq = 2 };

// A context's doorbell register as the driver uses it: the lock that mlx5 takes around a shared
// BlueFlame register (off for a thread domain's own register and under EMU_SINGLE_THREADED), and
// the buffer toggle.
struct UarUse {
  ModeLock lock;
  uint32_t bf_offset;  // 0 or 1: which of the two BlueFlame buffers the next post uses
  bool blueflame;      // a lone small WQE goes through BlueFlame (EMU_BLUEFLAME), else the doorbell
};

struct EmuContext {
  uint32_t slot;
  uint32_t dev;
  UarReg* uars;
  uint32_t n_uars;     // shared registers (EMU_UARS): QPs take them round-robin
  uint32_t n_td_uars;  // then registers for thread domains (EMU_TD_UARS), one each
  std::atomic<uint32_t> next_uar{0};
  UarUse uar_use[kUarRegsMax];
  int async_wfd = -1;
  std::mutex mu;  // QP list and thread-domain registers (slow path)
  std::vector<EmuQp*> qps;
  std::bitset<kUarRegsMax> td_uar_used;  // by index from 0: register n_uars + i has a domain
  std::atomic<uint32_t> n_ahs{0};        // address handles made on this context (max_ah)
  // Context import (import.cpp): the context slot whose PDs and MRs ibv_import_pd/mr find from
  // here (its own; an imported context's: the one its command fd was duplicated from).
  uint32_t share_slot = 0;
  // The registers as the program maps them for plain stores (register_pages.h), made at the first
  // emudv_init_qp; nullptr until then.
  struct RegisterPages* reg_pages = nullptr;
  verbs_context vctx;  // must be last: libibverbs finds it from &vctx.context
};

// A thread domain (td.cpp): a doorbell register of its own for the QPs made under it.
struct EmuTd {
  ibv_td td;
  uint32_t uar_idx;               // >= the context's n_uars
  std::atomic<uint32_t> refs{0};  // parent domains naming it: ibv_dealloc_td is EBUSY meanwhile
};

// A protection domain, or a parent domain (ibv_alloc_parent_domain: the protection domain `parent`
// stands for, plus an optional thread domain). Both carry the protection domain's slot, so every
// key check sees one PD, whichever of the two an object was made with.
struct EmuPd {
  ibv_pd pd;
  uint32_t slot;               // PdSlot (a parent domain: its protection domain's)
  EmuPd* parent = nullptr;     // a parent domain: the ibv_pd it was made on; nullptr: a PD
  EmuTd* td = nullptr;         // a parent domain's thread domain, or nullptr
  void* pd_context = nullptr;  // IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT
  // Objects holding this ibv_pd (ibv_dealloc_pd is EBUSY meanwhile, as mlx5's refcount): the
  // parent domains made on it, and for a parent domain the QPs and CQs made with it.
  std::atomic<uint32_t> refs{0};
  bool imported = false;  // ibv_import_pd: another handle on a PD (ibv_unimport_pd frees it)
  bool is_parent() const { return parent != nullptr; }
};

// The pages an MR covers, and the shared file it named if any (memory/shared_mr.cpp).
struct MrCover {
  uint64_t lo = 0, hi = 0;  // page-aligned
  uint64_t file_uid = 0;    // a file found behind a shared mapping, 0 if none
};

struct EmuMr {
  ibv_mr mr;
  uint32_t slot;
  MrCover cover;
  uint32_t generation = g_fork_generation;   // inherited() tells
  std::atomic<uint32_t>* dm_refs = nullptr;  // an MR on device memory: its block's MR count
  bool imported = false;  // ibv_import_mr: another handle on an MR (ibv_unimport_mr frees it)
};

struct EmuChannel {
  ibv_comp_channel ch;
  int wfd;
  uint64_t uid;
};

struct EmuCq {
  ibv_cq_ex cqx;  // first: ibv_cq and ibv_cq_ex share their leading fields
  uint32_t slot;
  uint32_t generation = g_fork_generation;  // inherited() tells
  CqSlot* shm;
  uint8_t* ring;                  // 1 << shm->log_cqe_cnt entries of 1 << log_entry bytes
  uint32_t log_entry = 6;         // cq_log_entry(shm->format)
  uint32_t ci;                    // consumer index (driver copy; published to shm->ci)
  ModeLock lock;                  // off under EMU_SINGLE_THREADED
  bool poll_ex_lockless = false;  // ibv_start_poll..ibv_end_poll unlocked: lock.off, or the CQ was
                                  // made IBV_CREATE_CQ_ATTR_SINGLE_THREADED (mlx5 drops it there)
  // What an empty poll checks, found once at creation so that a busy poller (UCX polls four CQs
  // per progress call) pays loads, not calls: this process's count of QPs waiting for a retry
  // timer, and whether a device thread of this process may need the core (EMU_ENGINE=thread).
  const std::atomic<uint32_t>* proc_stalled_qps = nullptr;
  bool device_thread_engine = false;
  const char* seg_base = nullptr;  // the segment's mapping: the lock-free peek finds the ring there
  EmuPd* parent_domain = nullptr;  // IBV_CQ_INIT_ATTR_MASK_PD: held until the CQ goes
  uint64_t uid;
  std::atomic<uint32_t> events_read{0};        // completion events handed to the user (ack target)
  std::atomic<uint32_t> async_events_read{0};  // IBV_EVENT_CQ_ERR handed out (ack target)
  uint64_t wc_flags_mask;                      // create_cq_ex: which fields may be read
  bool staging_asked = false;  // a CQE asked for a staging area: made (or no room), once
  // Handed out by mlx5dv_init_obj: its consumer polls it from memory and keeps its own receive
  // bookkeeping, which a destroyed QP's leftover CQEs must not touch (libmlx5 leaves such a CQ
  // alone too).
  bool dv_owned = false;
  // The completion an ibv_start_poll / ibv_next_poll walk stands on.
  ibv_wc cur_wc;
  uint64_t cur_ts = 0;
  ibv_wc_tm_info cur_tm{};  // a tag matching completion's header fields (tm.cpp)
  std::mutex qps_mu;
  std::vector<EmuQp*> qps;  // QPs completing here (progress of stalled sends)
};

// A shared receive queue (srq.cpp): the ring in the segment, and the driver's free list of WQEs
// (mlx5's: the next segments link them; the driver posts at head and appends freed WQEs at tail).
struct EmuTm;
struct EmuSrq {
  ibv_srq srq;  // first: the pointer the user holds
  uint32_t slot;
  uint32_t generation = g_fork_generation;  // inherited() tells
  SrqSlot* shm;
  EmuContext* ctx;
  uint8_t* buf;
  uint32_t* dbrec;
  uint32_t wqe_cnt;
  uint32_t stride;
  uint32_t max_wr;  // usable WQEs (one stays free as the list's tail)
  uint32_t max_sge;
  uint32_t head = 0;         // the free WQE the next post fills
  uint32_t tail;             // the last WQE of the list
  uint32_t posted = 0;       // WQEs posted (the doorbell record's counter)
  uint32_t outstanding = 0;  // posted and not yet completed
  std::vector<uint64_t> wrid;
  std::vector<uint8_t> shadow;  // the WQEs' data segments as posted (private: see EmuQp)
  // Covers the free list: posts, and completions giving WQEs back (polls). Off for an SRQ made
  // under a thread domain or under EMU_SINGLE_THREADED; the owner word checks it instead.
  ModeLock lock;
  OwnerWord owner;
  std::atomic<uint32_t> async_events_read{0};
  EmuXrcd* xrcd = nullptr;  // XRC SRQs: the domain
  EmuTm* tm = nullptr;      // TM SRQs: the tag list as the driver keeps it (tm.cpp)
};

// A tag matching SRQ's tag list as the driver keeps it (mlx5 keeps the same): which tags are
// free, each tag's wr_id and the completions still to come that name it, and the signaled list
// operations whose completions are not polled yet. Under the SRQ's lock (srq_enter).
struct EmuTm {
  struct Op {
    uint64_t wr_id;
    int32_t tag;  // the tag whose reference its completion drops; -1: none
  };
  uint32_t max_tags;
  uint32_t max_ops;
  std::vector<uint64_t> wr_id;  // per tag: recv_wr_id of its ADD
  std::vector<uint8_t> refs;    // per tag: completions to come (0: free)
  std::vector<uint32_t> free;   // FIFO of free tags (a freed tag is reused last)
  uint32_t free_head = 0, free_count = 0;
  std::vector<Op> ops;  // FIFO of signaled operations
  uint32_t op_head = 0, op_count = 0;
  uint32_t unexp_out = 0;  // unexpected messages software reported handled
};

// An XRC domain as this process holds it (xrc.cpp): an open (an XrcHandle in the segment).
struct EmuXrcd {
  ibv_xrcd xrcd;
  EmuContext* ctx;
  uint32_t slot;                         // XrcdSlot
  uint32_t handle;                       // XrcHandle of this open
  std::atomic<uint32_t> own_objects{0};  // this process's TGT QP handles and XRC SRQs on it (EBUSY)
};

// An address handle (ah.cpp): the address vector a UD WQE carries, built once.
struct EmuAh {
  ibv_ah ah;
  AvSeg av;
  uint8_t port;
};

struct EmuQp {
  ibv_qp_ex qpx;  // first: &qpx.qp_base is the ibv_qp the user holds
  uint32_t slot;
  uint32_t generation = g_fork_generation;  // inherited() tells
  QpSlot* shm;
  EmuContext* ctx;
  uint32_t* dbrec;    // [0] receive, [1] send (big-endian counters)
  WqeWriteRec* wrec;  // the device's record of our send ring stores (emu/mmio.h)
  // Send queue (driver side).
  uint8_t* sq;
  uint32_t sq_bbs;
  uint32_t sq_head = 0;  // next free block
  // Written by the poller (under the CQ's lock), read by posters (under the QP's): release/acquire
  // orders the poller's last read of a slot's wr_id before a poster reuses the slot.
  std::atomic<uint32_t> sq_tail{0};  // oldest block not yet completed
  uint32_t max_send_wr;
  uint32_t max_send_sge;
  uint32_t max_inline;
  uint64_t sq_posted = 0;  // WQEs posted since creation
  std::atomic<uint64_t> sq_retired{
      0};                         // WQEs known complete (a CQE retires every WQE before it too)
  std::vector<uint64_t> sq_wrid;  // by start block
  std::vector<uint64_t> sq_seq;   // by start block: sq_posted after this WQE
  std::vector<uint8_t> sq_wqe_bbs;
  // The send lock: ibv_post_send, and an ibv_wr_start..ibv_wr_complete session. Off (with
  // rq_lock and the register's lock) for a QP made under a thread domain or under
  // EMU_SINGLE_THREADED: then sq_owner/rq_owner check what the locks would have serialised.
  ModeLock sq_lock;
  // One transition at a time, as the kernel's per-QP mutex keeps them: two threads moving one QP
  // (rsockets' and librdmacm's, both to ERR at a disconnect) each check and make a whole one.
  std::mutex modify_mu;
  bool lockless = false;
  // Receive queue.
  uint8_t* rq;
  uint32_t rq_cnt;
  uint32_t rq_stride;
  uint32_t rq_head = 0;
  uint32_t rq_tail = 0;
  uint32_t max_recv_wr;
  uint32_t max_recv_sge;
  std::vector<uint64_t> rq_wrid;
  // The receive WQEs as posted, in private memory: the poll scatters an inline payload from here.
  // Reading the ring itself would pull back lines the device has just read (a miss per message).
  std::vector<uint8_t> rq_shadow;
  EmuSrq* srq = nullptr;  // receives come from here instead
  // An XRC TGT QP handle (the real QP is shared: emu/xrc.h): its XrcHandle and the domain.
  EmuXrcd* xrcd = nullptr;
  uint32_t xrc_handle = 0;
  uint64_t handle_uid = 0;  // names this handle in event records
  ModeLock rq_lock;
  EmuPd* parent_domain = nullptr;  // made with a parent domain: held until the QP goes
  uint32_t incarnation = 0;        // CQEs stamped with another one are stale (before a reset)
  std::atomic<uint32_t> async_events_read{0};  // events handed out on this QP (ack target)
  // Doorbell register.
  uint32_t uar_idx;
  bool sig_all;
  // The WQE being built (post_send and the ibv_wr_* API build into this, then commit to the ring).
  alignas(64) uint8_t stage[kMaxWqeBBs * kSendWqeBB];
  uint32_t stage_size = 0;  // bytes of the staged WQE; 0 = none
  uint32_t stage_nsge = 0;
  uint8_t stage_opcode = 0;
  uint64_t stage_wr_id = 0;
  // ibv_wr_* session state.
  int wr_error = 0;
  uint32_t wr_start_head = 0;
  uint64_t wr_start_posted = 0;
  uint32_t wr_last_ctrl = 0;  // ring block of the last committed WQE
  uint32_t wr_last_bbs = 0;
  uint32_t wr_count = 0;
  uint32_t send_ops_flags = 0;
  // The ownership checker (lockless QPs only), one word per lock it stands for.
  OwnerWord sq_owner;
  OwnerWord rq_owner;
  // Raw packet QPs (raw/flow.cpp, wq.cpp): flow rules steering to it (a QP with rules is busy, as
  // the kernel counts them in its use count), and an RSS QP's RssSlot (1 + index) and table.
  std::atomic<uint32_t> flows{0};
  uint32_t rss_slot = 0;
  struct EmuIndTable* ind_table = nullptr;
};

// WQE building (post.cpp), shared by ibv_post_send and the ibv_wr_* API. The caller is inside the
// send queue (queue_enter).
int wqe_begin(EmuQp* qp, uint8_t opcode, unsigned send_flags, uint32_t imm_be, uint64_t wr_id);
int wqe_set_av(EmuQp* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey);
// What a QP of this type may post (emu/transport.h): by WQE opcode, and as IBV_QP_EX_WITH_* flags.
bool opcode_allowed(ibv_qp_type type, uint8_t opcode);
uint64_t send_ops_of(ibv_qp_type type);
void wqe_set_xrc_srqn(EmuQp* qp, uint32_t srqn);
void wqe_add_raddr(EmuQp* qp, uint64_t raddr, uint32_t rkey);
void wqe_add_atomic(EmuQp* qp, uint64_t swap_add, uint64_t compare);
int wqe_add_bind(EmuQp* qp, ibv_mw* mw, uint32_t new_rkey, const ibv_mw_bind_info& info);
int wqe_add_sge(EmuQp* qp, uint32_t lkey, uint64_t addr, uint32_t length);
int wqe_add_inline(EmuQp* qp, const ibv_data_buf* bufs, size_t n);
int wqe_commit(EmuQp* qp, uint32_t* ctrl_block, uint32_t* bbs);
void sq_publish(EmuQp* qp, uint32_t last_block, uint32_t last_bbs, uint32_t nreq);

// ---- Thread modes (td.cpp) ----
// Whether objects made with pd take no internal locks: pd is a parent domain with a thread domain,
// or EMU_SINGLE_THREADED is on.
bool lockless_under(ibv_pd* pd);
ibv_td* emu_alloc_td(ibv_context* context, ibv_td_init_attr* attr);
int emu_dealloc_td(ibv_td* td);
ibv_pd* emu_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr);
int dealloc_parent_domain(EmuPd* pd);  // ibv_dealloc_pd of a parent domain

// The ownership checker. A queue without a lock has an owner word instead: entering the queue
// takes it (0 -> the caller's tid); if another thread holds it, that is the race the dropped lock
// would have prevented: a race event, and the caller goes on without the word, as an unlocked
// post does on hardware. Leaving gives the word back only if this entry took it.
inline bool owner_take(OwnerWord& w, uint32_t me, uint32_t* other) {
  uint32_t cur = 0;
  if (w.tid.compare_exchange_strong(cur, me, std::memory_order_acquire)) return true;
  *other = cur == me ? 0 : cur;  // the caller's own thread already inside: not a race
  return false;
}
inline void owner_give(OwnerWord& w) { w.tid.store(0, std::memory_order_release); }
// Slow path: records the kRaceOwner event (emu/race_log.h).
void report_owner_conflict(EmuQp* qp, OwnerQueue q, uint32_t holder, uint32_t me);
void report_owner_conflict(EmuSrq* srq, uint32_t holder, uint32_t me);

// Entering a QP's send or receive queue: its lock, or for a lockless QP its owner word. Returns
// whether the caller took the owner word (pass it to queue_leave).
inline bool queue_enter(EmuQp* qp, OwnerQueue q) {
  ModeLock& l = q == kOwnerSend ? qp->sq_lock : qp->rq_lock;
  if (!qp->lockless) {
    l.spin.lock();
    return false;
  }
  OwnerWord& w = q == kOwnerSend ? qp->sq_owner : qp->rq_owner;
  uint32_t me = writer_tid(), other = 0;
  if (owner_take(w, me, &other)) return true;
  if (other) report_owner_conflict(qp, q, other, me);
  return false;
}
inline void queue_leave(EmuQp* qp, OwnerQueue q, bool owned) {
  if (!qp->lockless) {
    (q == kOwnerSend ? qp->sq_lock : qp->rq_lock).spin.unlock();
    return;
  }
  if (owned) owner_give(q == kOwnerSend ? qp->sq_owner : qp->rq_owner);
}

// Conversions.
inline EmuContext* to_ctx(ibv_context* c) {
  return reinterpret_cast<EmuContext*>(reinterpret_cast<char*>(c) -
                                       offsetof(EmuContext, vctx.context));
}
inline EmuPd* to_pd(ibv_pd* p) { return reinterpret_cast<EmuPd*>(p); }
inline EmuTd* to_td(ibv_td* t) { return reinterpret_cast<EmuTd*>(t); }
inline EmuMr* to_mr(ibv_mr* m) { return reinterpret_cast<EmuMr*>(m); }
inline EmuCq* to_cq(ibv_cq* c) { return reinterpret_cast<EmuCq*>(c); }
inline EmuCq* to_cq(ibv_cq_ex* c) { return reinterpret_cast<EmuCq*>(c); }
inline EmuQp* to_qp(ibv_qp* q) { return reinterpret_cast<EmuQp*>(q); }
inline EmuQp* to_qp(ibv_qp_ex* q) { return reinterpret_cast<EmuQp*>(q); }
inline EmuSrq* to_srq(ibv_srq* s) { return reinterpret_cast<EmuSrq*>(s); }
inline EmuXrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<EmuXrcd*>(x); }
inline EmuAh* to_ah(ibv_ah* a) { return reinterpret_cast<EmuAh*>(a); }
inline EmuChannel* to_channel(ibv_comp_channel* c) { return reinterpret_cast<EmuChannel*>(c); }

// This process's QPs by number, for completion parsing (one load on the poll path, inline).
extern EmuQp* g_qp_table[kMaxQps];  // qp.cpp: written by qp_table_set
inline EmuQp* qp_by_num(uint32_t qpn) {
  EmuQp* q = g_qp_table[qpn & (kMaxQps - 1)];
  return q && q->qpx.qp_base.qp_num == qpn ? q : nullptr;
}
void qp_table_set(uint32_t qpn, EmuQp* qp);

// Whether an object belongs to an emulated device (else it is forwarded to libibverbs).
bool is_emu_device(const ibv_device* d);
inline bool is_emu(const ibv_context* c) { return c && is_emu_device(c->device); }

// Registry of uid -> user object, for event records (slow path).
void registry_put(uint64_t uid, void* obj);
void registry_del(uint64_t uid);
void* registry_find(uint64_t uid);  // the object registered under uid, or nullptr
// For an event record: the object behind uid, with its handed-out count raised under the
// registry's lock, so that a destroy (which unregisters first) waits for this event's ack.
enum class EventKind { completion, cq_async, qp_async, srq_async };
void* registry_take_event(uint64_t uid, EventKind kind);

// As the kernel does before a QP or SRQ goes: wait until every async event handed out on it
// (`handed_out`) has been acknowledged (ibv_ack_async_event counts into events_completed).
template <class Obj>
void wait_event_acks(Obj* o, const std::atomic<uint32_t>& handed_out) {
  pthread_mutex_lock(&o->mutex);
  while (o->events_completed != handed_out.load()) pthread_cond_wait(&o->cond, &o->mutex);
  pthread_mutex_unlock(&o->mutex);
}

Segment* segment();  // attached segment or nullptr

// Device attributes reported by query_device and enforced by create calls.
struct Limits {
  static constexpr uint32_t max_qp = kMaxQps - 2;
  static constexpr uint32_t max_qp_wr = 8192;
  static constexpr uint32_t max_sge = 16;
  static constexpr uint32_t max_cq = kMaxCqs;
  static constexpr uint32_t max_cqe = 65535;
  static constexpr uint32_t max_mr = kMaxMrs;
  static constexpr uint64_t max_mr_size = 1ull << 40;
  static constexpr uint32_t max_pd = kMaxPds;
  static constexpr uint32_t max_inline = 512;
  static constexpr uint32_t max_rd_atom = 16;
  static constexpr uint32_t max_msg = 1u << 31;
  static constexpr uint32_t max_srq = kMaxSrqs;
  static constexpr uint32_t max_srq_wr = 32767;  // 16-bit WQE indices, one kept as the list tail
  static constexpr uint32_t max_srq_sge = 16;
  // Tag matching (tm_caps): a tag list is scanned per tagged message, so it stays short.
  static constexpr uint32_t max_tm_tags = 127;
  static constexpr uint32_t max_tm_ops = 1024;
  static constexpr uint32_t max_rndv_hdr = 64;  // ibv_tmh + ibv_rvh and room for software's own
  static constexpr uint32_t max_ah = 65536;
  static constexpr uint32_t max_mcast_grp = 256;
  static constexpr uint32_t max_mcast_qp_attach = kMaxMcastPerQp;
};

// SRQ receive completions (srq.cpp): the WQE at `idx` is done; returns its wr_id and frees it.
uint64_t srq_complete(EmuSrq* srq, uint16_t idx);
// The receive completions of qp (on an SRQ) still unpolled in its receive CQ give their WQEs back
// to the SRQ: qp is being destroyed and no engine writes for it any more. Caller holds the recv
// CQ's lock and unlinks qp from the QP table before releasing it (polls then drop them).
void srq_reclaim_cqes(EmuQp* qp);
// The posted data segments of the SRQ WQE at idx (private copy).
const uint8_t* srq_shadow_wqe(EmuSrq* srq, uint16_t idx);
EmuSrq* srq_by_num(uint32_t srqn);  // this process's SRQ of that number, or nullptr
// The SRQ's free list is entered by posts and by completions giving WQEs back (srq.cpp): its
// lock, or for a lockless SRQ its owner word. Returns what srq_leave needs.
bool srq_enter(EmuSrq* s);
void srq_leave(EmuSrq* s, bool owned);
// Tag matching (tm.cpp): a TM SRQ's driver state; ibv_post_srq_ops; a tag matching CQE as a
// work completion (false: its SRQ is gone, the CQE is dropped).
EmuTm* tm_create(uint32_t max_tags, uint32_t max_ops);
int emu_post_srq_ops(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad);
bool tm_wc(const Cqe64& c, ibv_wc* wc, ibv_wc_tm_info* tm);
ibv_srq* emu_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int emu_get_srq_num(ibv_srq* srq, uint32_t* srq_num);
// ibv_reg_mr's body (pd_mr.cpp): an MR over [addr, addr + length) that remote keys address at iova.
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access,
               bool device_memory = false);
// Memory windows (mw.cpp).
ibv_mw* emu_alloc_mw(ibv_pd* pd, ibv_mw_type type);
int emu_dealloc_mw(ibv_mw* mw);
int emu_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
// Device memory (dm.cpp).
ibv_dm* emu_alloc_dm(ibv_context* ctx, ibv_alloc_dm_attr* attr);
int emu_free_dm(ibv_dm* dm);
// A device-memory block's memory as the host reaches it (mlx5dv_init_obj's DM).
uint8_t* dm_memory(ibv_dm* dm, uint64_t* length);
// ibv_import_dm / ibv_unimport_dm of a block this process allocated (dm.cpp).
ibv_dm* emu_import_dm(ibv_context* ctx, uint32_t handle);
void emu_unimport_dm(ibv_dm* dm);

// A context on an emu device with `cmd_fd` as its command fd (ibv_open_device: a new memfd;
// ibv_import_device: the duplicate it was given); nullptr with errno on failure (cmd_fd is then
// the caller's to close).
ibv_context* open_context(ibv_device* device, int cmd_fd);
ibv_mr* emu_reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned access);
int emu_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                  uint32_t num_sge);
// XRC (xrc.cpp).
ibv_xrcd* emu_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int emu_close_xrcd(ibv_xrcd* xrcd);
ibv_qp* emu_open_qp(ibv_context* context, ibv_qp_open_attr* attr);
ibv_qp* create_tgt_qp(ibv_context* context, ibv_qp_init_attr_ex* attr);
int destroy_tgt_qp_handle(EmuQp* qp);
// Raw packet QPs: flow steering (raw/flow.cpp), receive WQs, indirection tables and RSS QPs
// (raw/wq.cpp).
bool device_has_ethernet(uint32_t dev);
bool port_is_ethernet(uint32_t dev, uint32_t port);
ibv_flow* emu_create_flow(ibv_qp* qp, ibv_flow_attr* attr);
int emu_destroy_flow(ibv_flow* flow);
ibv_wq* emu_create_wq(ibv_context* context, ibv_wq_init_attr* attr);
int emu_modify_wq(ibv_wq* wq, ibv_wq_attr* attr);
int emu_destroy_wq(ibv_wq* wq);
ibv_rwq_ind_table* emu_create_rwq_ind_table(ibv_context* context,
                                            ibv_rwq_ind_table_init_attr* attr);
int emu_destroy_rwq_ind_table(ibv_rwq_ind_table* table);
ibv_qp* create_rss_qp(ibv_context* context, ibv_qp_init_attr_ex* attr);
void release_rss(EmuQp* qp);

// Set errno and return it (verbs edge helpers).
inline int fail_errno(int e) {
  errno = e;
  return e;
}
template <class T>
inline T* fail_null(int e) {
  errno = e;
  return nullptr;
}

// Ops installed on every emu context.
int emu_poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int emu_req_notify_cq(ibv_cq* cq, int solicited_only);
int emu_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int emu_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int emu_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);
int build_av(EmuContext* ctx, const ibv_ah_attr& attr, AvSeg* av);
int emu_query_port(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len);
int emu_query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* in,
                        ibv_device_attr_ex* attr, size_t len);
ibv_cq_ex* emu_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
// The same with entries of 128 bytes (cqe128), for mlx5dv_create_cq.
ibv_cq_ex* create_cq_ex_entries(ibv_context* ctx, ibv_cq_init_attr_ex* attr, bool cqe128);
ibv_qp* emu_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
int emu_query_rt_values(ibv_context* ctx, ibv_values_ex* values);

// Internals shared between files.
// dc: a DC QP (mlx5dv_create_qp under the mlx5 personality; attr made as an RC QP's): its kind
// (kQptDci, kQptDct) and a DCT's access key. nullptr otherwise.
struct DcKind {
  uint8_t type;
  uint64_t key;
};
ibv_qp* create_qp_common(ibv_context* ctx, ibv_qp_init_attr_ex* attr, const DcKind* dc);
void install_wr_ops(EmuQp* qp);
void qp_progress(EmuQp* qp);
void cq_progress(EmuCq* cq);
int port_attr_fill(uint32_t dev, uint8_t port, ibv_port_attr* attr);
// What ibv_query_device answers for device `dev` (also the file view's source,
// presence/sysfs_view.cpp).
void device_attr_fill(uint32_t dev, ibv_device_attr* attr);
// Records that an MR covers [addr, addr + len) and, unless it is an ODP MR, makes its pages
// reachable by other processes' engines without a system call where it can: pages in a shared file
// mapping as they are, private anonymous pages by moving them into the registration file
// (EMU_SHARED_MR); ms's share fields say which (memory/shared_mr.cpp). What it returns is handed
// back when the MR goes (or changes pages), after no engine uses it any more.
MrCover share_pages(void* addr, size_t len, bool odp, MrSlot& ms);
void unshare_pages(const MrCover& cover);
// The name of an emu context's cmd_fd (a memfd: no kernel stands behind emu contexts).
constexpr const char* kEmuCmdFdName = "rdmaemu-uverbs";
// ibv_query_device_ex's max_dm_size: the largest device-memory block (dm.cpp).
constexpr uint64_t kEmuMaxDmSize = 256 * 1024;
// ibv_query_device's vendor_id (device.cpp says why this one).
constexpr uint32_t kEmuVendorId = 0xffffff;
constexpr uint32_t kMellanoxOui = 0x02c9;        // ibv_query_device vendor_id of a ConnectX
constexpr uint32_t kMellanoxPciVendor = 0x15b3;  // its PCI vendor id (sysfs `vendor`)
uint32_t emu_vendor_part_id();

}  // namespace emu::prov
