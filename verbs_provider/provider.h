// The emulated devices' verbs objects as this process sees them. Each wraps the public libibverbs
// struct (first member, so the pointer libibverbs hands back converts both ways) and refers to its
// shared state in the segment by table index.
#pragma once
#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine.h"
#include "layout.h"
#include "segment.h"
#include "wqe.h"

namespace emu::prov {

struct EmuDevice {
  ibv_device dev;
  uint32_t index;
};

struct EmuQp;
struct EmuCq;
struct EmuXrcd;

// A context's doorbell register as the driver uses it: the lock that mlx5 takes around a shared
// BlueFlame register, and the buffer toggle.
struct UarUse {
  pthread_spinlock_t lock;
  uint32_t bf_offset;  // 0 or 1: which of the two BlueFlame buffers the next post uses
};

struct EmuContext {
  uint32_t slot;
  uint32_t dev;
  UarReg* uars;
  uint32_t n_uars;                // shared registers (EMU_UARS): QPs take them round-robin
  uint32_t n_td_uars;             // then registers for thread domains (EMU_TD_UARS), one each
  std::atomic<uint32_t> next_uar{0};
  UarUse uar_use[kUarRegsMax];
  int async_wfd = -1;
  Engine* engine;
  std::mutex mu;                  // QP list (slow path)
  std::vector<EmuQp*> qps;
  std::atomic<uint32_t> n_ahs{0};  // address handles made on this context (max_ah)
  verbs_context vctx;             // must be last: libibverbs finds it from &vctx.context
};

struct EmuPd {
  ibv_pd pd;
  uint32_t slot;
};

struct EmuMr {
  ibv_mr mr;
  uint32_t slot;
};

struct EmuChannel {
  ibv_comp_channel ch;
  int wfd;
  uint64_t uid;
};

struct EmuCq {
  ibv_cq_ex cqx;                  // first: ibv_cq and ibv_cq_ex share their leading fields
  uint32_t slot;
  CqSlot* shm;
  Cqe64* ring;
  uint32_t ci;                    // consumer index (driver copy; published to shm->ci)
  pthread_spinlock_t lock;
  uint64_t uid;
  std::atomic<uint32_t> events_read{0};  // completion events handed to the user (ack target)
  std::atomic<uint32_t> async_events_read{0};  // IBV_EVENT_CQ_ERR handed out (ack target)
  uint64_t wc_flags_mask;         // create_cq_ex: which fields may be read
  // The completion an ibv_start_poll / ibv_next_poll walk stands on.
  ibv_wc cur_wc;
  uint64_t cur_ts = 0;
  std::mutex qps_mu;
  std::vector<EmuQp*> qps;        // QPs completing here (progress of stalled sends)
};

// A shared receive queue (srq.cpp): the ring in the segment, and the driver's free list of WQEs
// (mlx5's: the next segments link them; the driver posts at head and appends freed WQEs at tail).
struct EmuSrq {
  ibv_srq srq;                    // first: the pointer the user holds
  uint32_t slot;
  SrqSlot* shm;
  EmuContext* ctx;
  uint8_t* buf;
  uint32_t* dbrec;
  uint32_t wqe_cnt;
  uint32_t stride;
  uint32_t max_wr;                // usable WQEs (one stays free as the list's tail)
  uint32_t max_sge;
  uint32_t head = 0;              // the free WQE the next post fills
  uint32_t tail;                  // the last WQE of the list
  uint32_t posted = 0;            // WQEs posted (the doorbell record's counter)
  uint32_t outstanding = 0;       // posted and not yet completed
  std::vector<uint64_t> wrid;
  std::vector<uint8_t> shadow;    // the WQEs' data segments as posted (private: see EmuQp)
  pthread_spinlock_t lock;
  std::atomic<uint32_t> async_events_read{0};
  EmuXrcd* xrcd = nullptr;        // XRC SRQs: the domain
};

// An XRC domain as this process holds it (xrc.cpp): an open (an XrcHandle in the segment).
struct EmuXrcd {
  ibv_xrcd xrcd;
  EmuContext* ctx;
  uint32_t slot;                   // XrcdSlot
  uint32_t handle;                 // XrcHandle of this open
  std::atomic<uint32_t> own_objects{0};  // this process's TGT QP handles and XRC SRQs on it (EBUSY)
};

// An address handle (ah.cpp): the address vector a UD WQE carries, built once.
struct EmuAh {
  ibv_ah ah;
  AvSeg av;
  uint8_t port;
};

struct EmuQp {
  ibv_qp_ex qpx;                  // first: &qpx.qp_base is the ibv_qp the user holds
  uint32_t slot;
  QpSlot* shm;
  EmuContext* ctx;
  uint32_t* dbrec;                // [0] receive, [1] send (big-endian counters)
  WqeWriteRec* wrec;              // the device's record of our send ring stores (emu/mmio.h)
  // Send queue (driver side).
  uint8_t* sq;
  uint32_t sq_bbs;
  uint32_t sq_head = 0;           // next free block
  uint32_t sq_tail = 0;           // oldest block not yet completed
  uint32_t max_send_wr;
  uint32_t max_send_sge;
  uint32_t max_inline;
  uint64_t sq_posted = 0;         // WQEs posted since creation
  uint64_t sq_retired = 0;        // WQEs known complete (a CQE retires every WQE before it too)
  std::vector<uint64_t> sq_wrid;  // by start block
  std::vector<uint64_t> sq_seq;   // by start block: sq_posted after this WQE
  std::vector<uint8_t> sq_wqe_bbs;
  pthread_spinlock_t sq_lock;
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
  EmuSrq* srq = nullptr;          // receives come from here instead
  // An XRC TGT QP handle (the real QP is shared: emu/xrc.h): its XrcHandle and the domain.
  EmuXrcd* xrcd = nullptr;
  uint32_t xrc_handle = 0;
  uint64_t handle_uid = 0;        // names this handle in event records
  pthread_spinlock_t rq_lock;
  uint32_t incarnation = 0;       // CQEs stamped with another one are stale (before a reset)
  std::atomic<uint32_t> async_events_read{0};  // events handed out on this QP (ack target)
  // Doorbell register.
  uint32_t uar_idx;
  bool sig_all;
  // The WQE being built (post_send and the ibv_wr_* API build into this, then commit to the ring).
  alignas(64) uint8_t stage[kMaxWqeBBs * kSendWqeBB];
  uint32_t stage_size = 0;        // bytes of the staged WQE; 0 = none
  uint32_t stage_nsge = 0;
  uint8_t stage_opcode = 0;
  uint64_t stage_wr_id = 0;
  // ibv_wr_* session state.
  int wr_error = 0;
  uint32_t wr_start_head = 0;
  uint64_t wr_start_posted = 0;
  uint32_t wr_last_ctrl = 0;      // ring block of the last committed WQE
  uint32_t wr_last_bbs = 0;
  uint32_t wr_count = 0;
  uint32_t send_ops_flags = 0;
};

// WQE building (post.cpp), shared by ibv_post_send and the ibv_wr_* API. Caller holds sq_lock.
int wqe_begin(EmuQp* qp, uint8_t opcode, unsigned send_flags, uint32_t imm_be, uint64_t wr_id);
int wqe_set_av(EmuQp* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey);
bool opcode_allowed(ibv_qp_type type, uint8_t opcode);
void wqe_set_xrc_srqn(EmuQp* qp, uint32_t srqn);
void wqe_add_raddr(EmuQp* qp, uint64_t raddr, uint32_t rkey);
void wqe_add_atomic(EmuQp* qp, uint64_t swap_add, uint64_t compare);
int wqe_add_sge(EmuQp* qp, uint32_t lkey, uint64_t addr, uint32_t length);
int wqe_add_inline(EmuQp* qp, const ibv_data_buf* bufs, size_t n);
int wqe_commit(EmuQp* qp, uint32_t* ctrl_block, uint32_t* bbs);
void sq_publish(EmuQp* qp, uint32_t last_block, uint32_t last_bbs, uint32_t nreq);

// Conversions.
inline EmuContext* to_ctx(ibv_context* c) {
  return reinterpret_cast<EmuContext*>(reinterpret_cast<char*>(c) -
                                       offsetof(EmuContext, vctx.context));
}
inline EmuPd* to_pd(ibv_pd* p) { return reinterpret_cast<EmuPd*>(p); }
inline EmuMr* to_mr(ibv_mr* m) { return reinterpret_cast<EmuMr*>(m); }
inline EmuCq* to_cq(ibv_cq* c) { return reinterpret_cast<EmuCq*>(c); }
inline EmuCq* to_cq(ibv_cq_ex* c) { return reinterpret_cast<EmuCq*>(c); }
inline EmuQp* to_qp(ibv_qp* q) { return reinterpret_cast<EmuQp*>(q); }
inline EmuQp* to_qp(ibv_qp_ex* q) { return reinterpret_cast<EmuQp*>(q); }
inline EmuSrq* to_srq(ibv_srq* s) { return reinterpret_cast<EmuSrq*>(s); }
inline EmuXrcd* to_xrcd(ibv_xrcd* x) { return reinterpret_cast<EmuXrcd*>(x); }
inline EmuAh* to_ah(ibv_ah* a) { return reinterpret_cast<EmuAh*>(a); }
inline EmuChannel* to_channel(ibv_comp_channel* c) { return reinterpret_cast<EmuChannel*>(c); }

// This process's QPs by number, for completion parsing (one load on the poll path).
EmuQp* qp_by_num(uint32_t qpn);
void qp_table_set(uint32_t qpn, EmuQp* qp);

// Whether an object belongs to an emulated device (else it is forwarded to libibverbs).
bool is_emu_device(const ibv_device* d);
inline bool is_emu(const ibv_context* c) { return c && is_emu_device(c->device); }

// Registry of uid -> user object, for event records (slow path).
void registry_put(uint64_t uid, void* obj);
void registry_del(uint64_t uid);
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
Engine* engine();

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
ibv_srq* emu_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int emu_get_srq_num(ibv_srq* srq, uint32_t* srq_num);
// XRC (xrc.cpp).
ibv_xrcd* emu_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
int emu_close_xrcd(ibv_xrcd* xrcd);
ibv_qp* emu_open_qp(ibv_context* context, ibv_qp_open_attr* attr);
ibv_qp* create_tgt_qp(ibv_context* context, ibv_qp_init_attr_ex* attr);
int destroy_tgt_qp_handle(EmuQp* qp);

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
ibv_qp* emu_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
int emu_query_rt_values(ibv_context* ctx, ibv_values_ex* values);

// Internals shared between files.
ibv_qp* create_qp_common(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
void install_wr_ops(EmuQp* qp);
void qp_progress(EmuQp* qp);
void cq_progress(EmuCq* cq);
int port_attr_fill(uint32_t dev, uint8_t port, ibv_port_attr* attr);
// EMU_SHARED_MR: re-back the whole pages of a new MR with shared memory (shared_mr.cpp).
bool share_pages(void* addr, size_t len, MrSlot& ms);
uint32_t emu_vendor_part_id();
std::string seg_path_for_device();

}  // namespace emu::prov
