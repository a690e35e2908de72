// SPDX-License-Identifier: BSD-2-Clause
// Completion queues, completion channels and completion events.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "emu/barriers.h"
#include "emu/device.h"
#include "emu/dma_guard.h"
#include "emu/inject.h"
#include "emu/kill_point.h"
#include "emu/notify.h"
#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/shm_lock.h"
#include "emu/small_copy.h"
#include "emu/staging.h"
#include "forward.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// The consumer index published where producers read it (and, for a CQ in mlx5 form, in the form
// mlx5's CQ doorbell record has).
inline void publish_ci(EmuCq* cq) {
  cq->shm->ci.store(cq_record_of(cq->shm->format, cq->ci), std::memory_order_release);
}

// The consumer index, under the CQ's lock: the driver copy, or for a CQ code written for mlx5 may
// poll from memory (kCqFormatMlx5) the record that code keeps, which the copy may be behind.
inline uint32_t consumer_index(EmuCq* cq) {
  if (cq->shm->format & kCqFormatMlx5)
    cq->ci = cq_consumer_index(*cq->shm, cq->shm->pi.load(std::memory_order_acquire));
  return cq->ci;
}

ibv_wc_status status_of(uint8_t syndrome) {
  switch (syndrome) {
    case kSynLocalLength:
      return IBV_WC_LOC_LEN_ERR;
    case kSynLocalQpOp:
      return IBV_WC_LOC_QP_OP_ERR;
    case kSynLocalProt:
      return IBV_WC_LOC_PROT_ERR;
    case kSynWrFlush:
      return IBV_WC_WR_FLUSH_ERR;
    case kSynMwBind:
      return IBV_WC_MW_BIND_ERR;
    case kSynBadResp:
      return IBV_WC_BAD_RESP_ERR;
    case kSynLocalAccess:
      return IBV_WC_LOC_ACCESS_ERR;
    case kSynRemoteInvalReq:
      return IBV_WC_REM_INV_REQ_ERR;
    case kSynRemoteAccess:
      return IBV_WC_REM_ACCESS_ERR;
    case kSynRemoteOp:
      return IBV_WC_REM_OP_ERR;
    case kSynRetryExc:
      return IBV_WC_RETRY_EXC_ERR;
    case kSynRnrRetryExc:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    default:
      return IBV_WC_GENERAL_ERR;
  }
}

ibv_wc_opcode send_opcode(uint8_t wqe_opcode) {
  switch (wqe_opcode) {
    case kOpRdmaWrite:
    case kOpRdmaWriteImm:
      return IBV_WC_RDMA_WRITE;
    case kOpRdmaRead:
      return IBV_WC_RDMA_READ;
    case kOpAtomicCs:
      return IBV_WC_COMP_SWAP;
    case kOpAtomicFa:
      return IBV_WC_FETCH_ADD;
    case kOpBindMw:
      return IBV_WC_BIND_MW;
    case kOpLocalInv:
      return IBV_WC_LOCAL_INV;
    case kOpAtomicWrite:
      return IBV_WC_ATOMIC_WRITE;
    default:
      return IBV_WC_SEND;
  }
}

// Scatter-to-CQE and staging: a SEND's payload came in the CQE (at most 32 bytes) or waits in the
// CQ's staging area. Copy it into the buffers of the receive WQE it consumed, read from the
// private copy of the WQE (the device checked their keys and bounds, and their addresses are
// virtual ones).
// The first `skip` bytes of the buffers are left as they are (a UD receive without a GRH).
// A buffer the program unmapped while it was posted (the copy is guarded, emu/dma_guard.h) takes
// the bytes in the MR's pages, which the MR keeps in the registration file (EMU_SHARED_MR), as
// hardware writes an MR's pinned pages whatever the program did to its mapping. false: they are
// not there either (EMU_SHARED_MR=0, a partial page), and the receive completes with a local
// protection error, what a device reports for a buffer it cannot write.
bool scatter_to_wqe(EmuQp* qp, uint16_t idx, const uint8_t* src, uint32_t len, uint32_t skip = 0) {
  const uint8_t* w;
  uint32_t seg_bytes;
  if (qp->srq) {
    w = srq_shadow_wqe(qp->srq, idx);
    seg_bytes = qp->srq->stride - sizeof(SrqNextSeg);
  } else {
    w = qp->rq_shadow.data() + (idx & (qp->rq_cnt - 1)) * qp->rq_stride;
    seg_bytes = qp->rq_stride;
  }
  for (uint32_t off = 0; len && off + sizeof(DataSeg) <= seg_bytes; off += sizeof(DataSeg)) {
    DataSeg d;
    std::memcpy(&d, w + off, sizeof d);
    if (be32(d.lkey) == kInvalidLkey) break;
    uint32_t n = std::min(len, be32(d.byte_count) ? be32(d.byte_count) : len);
    if (skip >= n) {
      skip -= n;
      len -= n;
      continue;
    }
    if (!guarded_copy(reinterpret_cast<void*>(be64(d.addr) + skip), src, n - skip)) [[unlikely]] {
      uint64_t pages = own_mr_pages(segment(), be32(d.lkey), be64(d.addr) + skip, n - skip);
      if (!pages || !guarded_copy(reinterpret_cast<void*>(pages), src, n - skip)) return false;
    }
    src += n - skip;
    len -= n;
    skip = 0;
  }
  return true;
}

// A receive CQE that names staged bytes (kCqeFlagStaged): into the WQE's buffers if qp is still the
// QP it was for, then the slots are free. One that asks for an area (kCqeFlagWantStaging): the
// CQ's owner makes one, once (EMU_STAGING).
// false: the buffers could not take the bytes (scatter_to_wqe).
bool staged_recv(EmuCq* cq, EmuQp* qp, uint16_t idx, const Cqe64& c, uint32_t len) {
  bool placed = true;
  if (c.emu_flags & kCqeFlagStaged) {
    uint64_t off = cq->shm->staging_off.load(std::memory_order_relaxed);
    StagedRef ref;
    std::memcpy(&ref, &c, sizeof ref);
    auto* area = segment()->at<StagingArea>(off);
    // A UD receive counts the GRH's 40 bytes, staged only if one came.
    bool no_grh =
        qp && qp->qpx.qp_base.qp_type == IBV_QPT_UD && !(be32(c.flags_rqpn) & kCqeRqpnGrh);
    if (qp) placed = scatter_to_wqe(qp, idx, staging_data(area, ref), len, no_grh ? kGrhBytes : 0);
    staging_release(area, ref);
  } else if (!cq->staging_asked) {
    cq->staging_asked = true;
    if (uint64_t bytes = staging_area_bytes(config().staging))
      attach_staging(segment(), *cq->shm, bytes);  // no room: the CQ goes without
  }
  return placed;
}

// The immediate, or the key a SEND with invalidate freed (host order), of a receive CQE.
void recv_imm_or_inval(const Cqe64& c, ibv_wc* wc) {
  if (c.emu_flags & kCqeFlagImm) {
    wc->wc_flags |= IBV_WC_WITH_IMM;
    wc->imm_data = c.imm_inval_pkey;
  } else if (c.emu_flags & kCqeFlagInv) {
    wc->wc_flags |= IBV_WC_WITH_INV;
    wc->invalidated_rkey = be32(c.imm_inval_pkey);
  }
}

bool is_recv_cqe(uint8_t opcode) { return opcode != kCqeReq && opcode != kCqeReqErr; }

// A receive through an XRC TGT QP into an XRC SRQ of this process: the CQE names the SRQ (the
// TGT QP may be held by other processes only). false: that SRQ is gone, the CQE is dropped.
bool xrc_recv_wc(const Cqe64& c, uint8_t opcode, ibv_wc* wc) {
  EmuSrq* srq = srq_by_num(be32(c.srqn_uidx));
  if (!srq) return false;
  std::memset(wc, 0, sizeof *wc);
  wc->wr_id = srq_complete(srq, be16(c.wqe_counter));
  wc->qp_num = cqe_qpn(c);  // the TGT QP that received it
  wc->src_qp = be32(c.flags_rqpn) & 0xffffff;
  wc->slid = be16(c.slid);
  wc->byte_len = be32(c.byte_cnt);
  recv_imm_or_inval(c, wc);
  wc->opcode = IBV_WC_RECV;
  if (opcode == kCqeRespErr) {
    auto& e = reinterpret_cast<const ErrCqe&>(c);
    wc->status = status_of(e.syndrome);
    wc->vendor_err = e.vendor_err_synd;
  } else {
    wc->status = IBV_WC_SUCCESS;
  }
  return true;
}

// An empty ibv_wc, in three 16-byte stores of a zero the optimizer cannot see: a memset of it,
// inlined into the poll, became `rep stosd`, whose start-up costs more than the stores. (Copied,
// not stored through a vector pointer: an ibv_wc is only 8-aligned.)
inline void clear_wc(ibv_wc* wc) {
  typedef long long Zero16 __attribute__((vector_size(16)));
  static_assert(sizeof(ibv_wc) == 48);
  Zero16 zero = {};
  asm("" : "+x"(zero));
  auto* p = reinterpret_cast<char*>(wc);
  std::memcpy(p, &zero, 16);
  std::memcpy(p + 16, &zero, 16);
  std::memcpy(p + 32, &zero, 16);
}

// The CQE at the consumer index is used: past it, and the device told.
[[gnu::always_inline]] inline void consume_cqe(EmuCq* cq) {
  ++cq->ci;
  publish_ci(cq);
}

// A tag-matching CQE, found by its SRQ (list operations name no QP); false: it completes no WR.
bool tm_cqe(EmuCq* cq, const Cqe64& c, uint8_t opcode, ibv_wc* wc, uint64_t* ts) {
  bool got = tm_wc(c, wc, &cq->cur_tm);
  if (got && opcode == kCqeRespErr) {
    auto& e = reinterpret_cast<const ErrCqe&>(c);
    wc->status = status_of(e.syndrome);
    wc->vendor_err = e.vendor_err_synd;
  }
  *ts = be64(c.timestamp);
  return got;
}

// A completion of a QP destroyed or reset since: it names nothing the user still has. A receive
// from an SRQ still gives its WQE back (a destroyed QP's were given back by srq_reclaim_cqes).
void drop_stale_cqe(EmuCq* cq, EmuQp* qp, const Cqe64& c, uint8_t opcode) {
  if (qp && qp->srq && is_recv_cqe(opcode)) srq_complete(qp->srq, be16(c.wqe_counter));
  if (c.emu_flags & kCqeFlagStaged) staged_recv(cq, nullptr, 0, c, 0);
}

// What every CQE of a QP gives its ibv_wc: the QP, length, source, immediate, status.
[[gnu::always_inline]] inline void common_wc(const Cqe64& c, uint8_t opcode, uint32_t qpn,
                                             ibv_wc* wc, uint64_t* ts) {
  clear_wc(wc);
  wc->qp_num = qpn;
  wc->byte_len = be32(c.byte_cnt);
  uint32_t rqpn = be32(c.flags_rqpn);
  wc->src_qp = rqpn & 0xffffff;
  wc->sl = (rqpn >> 24) & 0xf;
  if (rqpn & kCqeRqpnGrh) wc->wc_flags |= IBV_WC_GRH;
  wc->slid = be16(c.slid);
  recv_imm_or_inval(c, wc);
  *ts = be64(c.timestamp);
  if (opcode == kCqeReqErr || opcode == kCqeRespErr) {
    auto& e = reinterpret_cast<const ErrCqe&>(c);
    wc->status = status_of(e.syndrome);
    wc->vendor_err = e.vendor_err_synd;
  } else {
    wc->status = IBV_WC_SUCCESS;
  }
}

// A send completion: its WR's id, and the send ring's blocks up to its WQE free again.
[[gnu::always_inline]] inline void send_wc(EmuQp* qp, const Cqe64& c, uint16_t idx, ibv_wc* wc) {
  wc->opcode = send_opcode(cqe_wqe_opcode(c));
  uint32_t slot = idx & (qp->sq_bbs - 1);
  wc->wr_id = qp->sq_wrid[slot];
  // The device completes in order: every block up to the end of this WQE is free again. The
  // 16-bit distance from the tail (the ring is at most 32768 blocks) gives the full index.
  uint32_t tail = qp->sq_tail.load(std::memory_order_relaxed);
  qp->sq_tail.store(tail + static_cast<uint16_t>(idx + qp->sq_wqe_bbs[slot] - tail),
                    std::memory_order_release);
  qp->sq_retired.store(qp->sq_seq[slot], std::memory_order_release);
}

// A receive completion: the payload placed where the device left it elsewhere (staged, or in the
// CQE itself), its WR's id, and the receive WQE given back.
[[gnu::always_inline]] inline void recv_wc(EmuCq* cq, EmuQp* qp, const Cqe64& c, uint8_t op_own,
                                           uint8_t opcode, uint16_t idx, ibv_wc* wc) {
  wc->opcode = opcode == kCqeRespWrImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  bool placed = true;
  if (c.emu_flags & (kCqeFlagStaged | kCqeFlagWantStaging)) [[unlikely]]
    placed = staged_recv(cq, qp, idx, c, wc->byte_len);
  if (op_own & kCqeInlineScatter32) {
    // The peer's QPN and LID were set at RTR, before any message could arrive. What orders
    // that for this thread runs through the peer's process; the acquire of the state the
    // modify published orders it within this one (and lets TSan see it).
    (void)qp->shm->qp_state.load(std::memory_order_acquire);
    placed = scatter_to_wqe(qp, idx, reinterpret_cast<const uint8_t*>(&c), wc->byte_len);
    wc->src_qp = qp->shm->dest_qpn;  // bytes 0..31 held the payload; a connected QP knows its peer
    wc->slid = qp->shm->dlid;
    wc->sl = 0;
    wc->wc_flags &= ~IBV_WC_GRH;
  }
  if (!placed) [[unlikely]]
    wc->status = IBV_WC_LOC_PROT_ERR;
  if (qp->srq) {
    wc->wr_id = srq_complete(qp->srq, idx);  // the WQE goes back to the SRQ's free list
  } else {
    wc->wr_id = qp->rq_wrid[idx & (qp->rq_cnt - 1)];
    qp->rq_tail += static_cast<uint16_t>(idx + 1 - qp->rq_tail);
  }
}

// Takes the next completion, if the device has published one. Caller holds cq->lock (unless the
// CQ's mode has none).
[[gnu::always_inline]] inline bool next_cqe(EmuCq* cq, ibv_wc* wc, uint64_t* ts) {
  for (;;) {
    Cqe64& c = cq_entry(cq->ring, cq->ci, cq->shm->log_cqe_cnt, cq->log_entry);
    sched::point(sched::kPointPoll, reinterpret_cast<uintptr_t>(&c), cq->ci);
    uint8_t op_own = cqe_owner_load(&c.op_own);
    if (!cqe_is_new(op_own, cq->ci, cq->shm->log_cqe_cnt)) return false;
    uint8_t opcode = cqe_opcode_of(op_own);
    from_device_barrier();
    if (c.emu_flags & kCqeFlagTm) [[unlikely]] {
      bool got = tm_cqe(cq, c, opcode, wc, ts);
      consume_cqe(cq);
      if (got) return true;
      continue;
    }
    if (is_recv_cqe(opcode) && c.srqn_uidx) {
      bool got = xrc_recv_wc(c, opcode, wc);
      *ts = be64(c.timestamp);
      consume_cqe(cq);
      if (got) return true;
      continue;
    }
    uint32_t qpn = cqe_qpn(c);
    EmuQp* qp = qp_by_num(qpn);
    if (!qp || c.qp_gen != static_cast<uint16_t>(qp->incarnation)) {
      drop_stale_cqe(cq, qp, c, opcode);
      consume_cqe(cq);
      continue;
    }
    uint16_t idx = be16(c.wqe_counter);
    common_wc(c, opcode, qpn, wc, ts);
    if (opcode == kCqeReq || opcode == kCqeReqErr)
      send_wc(qp, c, idx, wc);
    else
      recv_wc(cq, qp, c, op_own, opcode, idx, wc);
    consume_cqe(cq);
    return true;
  }
}

}  // namespace

namespace emu::prov {

void srq_reclaim_cqes(EmuQp* qp) {
  EmuCq* cq = to_cq(qp->qpx.qp_base.recv_cq);
  if (cq->dv_owned) return;  // its SRQ's WQEs are its consumer's to give back
  uint32_t qpn = qp->qpx.qp_base.qp_num;
  for (uint32_t ci = consumer_index(cq);; ++ci) {
    Cqe64& c = cq_entry(cq->ring, ci, cq->shm->log_cqe_cnt, cq->log_entry);
    uint8_t op_own = cqe_owner_load(&c.op_own);
    if (!cqe_is_new(op_own, ci, cq->shm->log_cqe_cnt)) return;
    uint8_t opcode = cqe_opcode_of(op_own);
    from_device_barrier();
    // (Of any incarnation: one from before a reset took a WQE of the same SRQ.) A tag matching
    // CQE is found by its SRQ, not its QP: its poll gives the WQE back.
    if (cqe_qpn(c) == qpn && is_recv_cqe(opcode) && !(c.emu_flags & kCqeFlagTm))
      srq_complete(qp->srq, be16(c.wqe_counter));
  }
}

}  // namespace emu::prov

namespace {

// Destroyed channels keep their memory for the process's life (a few dozen bytes each): a program
// may still wait on one from another thread — rping's CQ thread, when its main thread cleans up
// after a failed rdma_accept (the kill sweep's cm_req_sent point) — and the kernel answers a read
// of the closed fd with an error, where freed memory would make ibv_get_cq_event crash.
std::mutex g_dead_channels_mu;
std::unordered_set<const ibv_comp_channel*>&
dead_channels() {  // never destroyed (docs/design/verbs-provider.md, "Exit")
  static auto* channels = new std::unordered_set<const ibv_comp_channel*>;
  return *channels;
}

bool dead_channel(const ibv_comp_channel* ch) {
  std::lock_guard<std::mutex> g(g_dead_channels_mu);
  return dead_channels().count(ch) != 0;
}

bool proc_has_stalled_qps() {
  Segment* seg = segment();
  return seg->hdr()->procs[seg->self()].stalled_qps.load(std::memory_order_relaxed) != 0;
}

void progress_stalled(EmuContext* ctx) {
  std::lock_guard<std::mutex> g(ctx->mu);
  for (EmuQp* qp : ctx->qps)
    if (qp->shm->stall.load(std::memory_order_relaxed) != kStallNone) qp_progress(qp);
}

// A completion event that a process took the arm for and died before writing (CqSlot::raiser:
// the engine delivering a message runs in the sender's process, which a kill may end between the
// two): written here, by the owner, into its own channel, for the CQs of this context's QPs.
void recover_lost_events(ibv_comp_channel* ch) {
  Segment* seg = segment();
  EmuContext* ctx = to_ctx(ch->context);
  uint64_t chan_uid = to_channel(ch)->uid;
  std::lock_guard<std::mutex> g(ctx->mu);
  for (EmuQp* qp : ctx->qps) {
    for (uint32_t idx : {qp->shm->send_cq, qp->shm->recv_cq}) {
      CqSlot& cq = cq_slot(seg->hdr(), idx);
      if (cq.chan_uid == chan_uid) device_raise_lost_event(cq);
    }
  }
}

// How often a thread asleep in ibv_get_cq_event looks for events lost with a dead process.
constexpr int kLostEventCheckMs = 100;

// Waits until the channel has an event record. While this process has sends waiting for a retry
// or RNR timer, it wakes each millisecond to fire them: in the default mode the device has no
// timers of its own, and a program asleep here (ibv_xsrq_pingpong -e, whose first sends can reach
// a peer that is not ready yet) would otherwise wait for a completion that never comes. Otherwise
// it wakes every kLostEventCheckMs to write an event a dead process owed (recover_lost_events).
void wait_channel(ibv_comp_channel* ch) {
  if (fcntl(ch->fd, F_GETFL) & O_NONBLOCK) {
    if (proc_has_stalled_qps()) progress_stalled(to_ctx(ch->context));
    return;
  }
  for (;;) {
    int fd = ch->fd;
    if (fd < 0) return;  // destroyed meanwhile: the read fails (poll would skip the descriptor)
    bool stalled = proc_has_stalled_qps();
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, stalled ? 1 : kLostEventCheckMs);
    if (n > 0 || (n < 0 && errno != EINTR)) return;  // a record (or an error read() will give)
    if (stalled) progress_stalled(to_ctx(ch->context));
    recover_lost_events(ch);
  }
}

// A stalled send waits for its retry timer, which nothing fires by itself (no device thread by
// default): whoever polls drives it. Its own CQ's pollers first; but a program may poll only
// another CQ while it waits (ibv_xsrq_pingpong polls its receive CQ, its sends unsignaled), so any
// poll in a process with stalled QPs drives those of the CQ's context.
inline void maybe_progress(EmuCq* cq) {
  if (cq->shm->stalled_qps.load(std::memory_order_relaxed)) [[unlikely]] {
    cq_progress(cq);
    return;
  }
  if (cq->proc_stalled_qps->load(std::memory_order_relaxed)) [[unlikely]]
    progress_stalled(to_ctx(cq->cqx.context));
}

// What a look at the CQ without its lock found: nothing (a busy poller, UCX polling four CQs per
// progress call, most of them empty, then pays a few loads, not a lock and unlock); a new CQE and
// nothing else to do (the locked path then skips maybe_progress); or a reason to take the locked
// path and look there. Only an atomic read: the ring comes from the word producers read
// (`CqSlot::ring`), not from cq->ring, which ibv_resize_cq swaps under the lock. A peek that
// overlaps a resize may read the old ring after it was freed: a false "new CQE" takes the lock and
// looks again; a false "empty" is a poll that returned before the completions moved to the new
// ring, which an overlapping call may. `look` whenever the locked path does more than look:
// inside a scheduled run (its points), and while a QP waits for a retry that polls drive.
enum class Peek { empty, cqe, look };
inline Peek peek(const EmuCq* cq) {
  const CqSlot& cs = *cq->shm;
  if (sched::scheduled()) return Peek::look;
  if (cs.stalled_qps.load(std::memory_order_relaxed) |
      cq->proc_stalled_qps->load(std::memory_order_relaxed))
    return Peek::look;
  uint64_t w = cs.ring.load(std::memory_order_acquire);
  // (The producers' line is read only for a CQ in mlx5 form: an empty poll touches the consumer's.)
  uint32_t ci = cs.ci.load(std::memory_order_relaxed);
  if (cs.format & kCqFormatMlx5) [[unlikely]]
    ci = cq_index_near(be32(ci) & 0xffffff, cs.pi.load(std::memory_order_relaxed));
  uint32_t log = cq_ring_log(w);
  const Cqe64& c = cq_entry(cq->seg_base + cq_ring_off(w), ci, log, cq->log_entry);
  return cqe_is_new(cqe_owner_load(&c.op_own), ci, log) ? Peek::cqe : Peek::empty;
}

int start_poll(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) {
  if (attr->comp_mask) return EINVAL;
  EmuCq* cq = to_cq(cqx);
  if (inherited(cq)) return EPERM;
  Peek p = peek(cq);
  if (p == Peek::empty) return ENOENT;
  if (!cq->poll_ex_lockless) cq->lock.spin.lock();
  if (p == Peek::look) maybe_progress(cq);
  if (!next_cqe(cq, &cq->cur_wc, &cq->cur_ts)) {
    if (!cq->poll_ex_lockless) cq->lock.spin.unlock();
    return ENOENT;
  }
  cqx->status = cq->cur_wc.status;
  cqx->wr_id = cq->cur_wc.wr_id;
  return 0;
}

int next_poll(ibv_cq_ex* cqx) {
  EmuCq* cq = to_cq(cqx);
  if (!next_cqe(cq, &cq->cur_wc, &cq->cur_ts)) return ENOENT;
  cqx->status = cq->cur_wc.status;
  cqx->wr_id = cq->cur_wc.wr_id;
  return 0;
}

void end_poll(ibv_cq_ex* cqx) {
  EmuCq* cq = to_cq(cqx);
  if (!cq->poll_ex_lockless) cq->lock.spin.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* c) { return to_cq(c)->cur_wc.opcode; }
uint32_t read_vendor_err(ibv_cq_ex* c) { return to_cq(c)->cur_wc.vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* c) { return to_cq(c)->cur_wc.byte_len; }
__be32 read_imm_data(ibv_cq_ex* c) { return to_cq(c)->cur_wc.imm_data; }
uint32_t read_qp_num(ibv_cq_ex* c) { return to_cq(c)->cur_wc.qp_num; }
uint32_t read_src_qp(ibv_cq_ex* c) { return to_cq(c)->cur_wc.src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* c) { return to_cq(c)->cur_wc.wc_flags; }
uint32_t read_slid(ibv_cq_ex* c) { return to_cq(c)->cur_wc.slid; }
uint8_t read_sl(ibv_cq_ex* c) { return to_cq(c)->cur_wc.sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* c) { return to_cq(c)->cur_wc.dlid_path_bits; }
uint64_t read_completion_ts(ibv_cq_ex* c) { return to_cq(c)->cur_ts; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* c) { return to_cq(c)->cur_ts; }
void read_tm_info(ibv_cq_ex* c, ibv_wc_tm_info* tm) { *tm = to_cq(c)->cur_tm; }

constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK |
    IBV_WC_EX_WITH_TM_INFO;

// stamp: the CQEs carry a timestamp (a CQ made to report one). format: CqFormat bits asked for
// (128-byte entries, no overrun check). Under the mlx5 personality every CQ is in mlx5 form too:
// any may be handed to code that polls it from memory (mlx5dv_init_obj).
EmuCq* create_cq_common(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                        int comp_vector, bool stamp = false, uint32_t format = 0) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > Limits::max_cqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors || (channel && channel->context != context))
    return fail_null<EmuCq>(EINVAL);
  uint32_t log = 1;
  while ((1u << log) < static_cast<uint32_t>(cqe) + 1) ++log;
  uint32_t cnt = 1u << log;
  if (int err = inject_verb_check(segment(), kVerbCreateCq)) return fail_null<EmuCq>(err);
  auto* cq = new (std::nothrow) EmuCq();
  if (!cq) return fail_null<EmuCq>(ENOMEM);
  CqSpec spec{to_ctx(context)->dev,
              to_ctx(context)->slot,
              log,
              channel ? to_channel(channel)->wfd : -1,
              channel ? to_channel(channel)->uid : 0,
              stamp,
              (config().personality_mlx5 ? kCqFormatMlx5 : 0u) | format};
  Segment* seg = segment();
  uint32_t slot;
  if (create_cq(seg, spec, &slot) != Status::ok) {
    delete cq;
    return fail_null<EmuCq>(ENOMEM);
  }
  CqSlot& cs = cq_slot(seg->hdr(), slot);
  cq->ring = seg->at<uint8_t>(cs.buf_off);
  cq->log_entry = cq_log_entry(cs.format);
  cq->slot = slot;
  cq->shm = &cs;
  cq->uid = cs.uid;
  cq->ci = 0;
  cq->lock.init(config().single_threaded);
  cq->poll_ex_lockless = cq->lock.off;
  cq->proc_stalled_qps = &seg->hdr()->procs[seg->self()].stalled_qps;
  cq->device_thread_engine = config().engine == EngineMode::progress_thread;
  cq->seg_base = seg->at<char>(0);
  ibv_cq_ex& x = cq->cqx;
  x.context = context;
  x.channel = channel;
  x.cq_context = cq_context;
  x.handle = slot;
  x.cqe = static_cast<int>(cnt - 1);
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  if (channel) {
    pthread_mutex_lock(&context->mutex);
    ++channel->refcnt;
    pthread_mutex_unlock(&context->mutex);
  }
  registry_put(cq->uid, cq);
  return cq;
}

}  // namespace

namespace emu::prov {

void cq_progress(EmuCq* cq) {
  std::lock_guard<std::mutex> g(cq->qps_mu);
  for (EmuQp* qp : cq->qps) qp_progress(qp);
}

int emu_poll_cq(ibv_cq* ibcq, int n, ibv_wc* wc) {
  EmuCq* cq = to_cq(ibcq);
  if (n < 0) return -1;
  if (inherited(cq)) {
    errno = EPERM;
    return -1;
  }
  Peek p = peek(cq);
  if (p == Peek::empty) [[likely]] {
    if (cq->device_thread_engine && device_thread_busy()) sched_yield();
    return 0;
  }
  cq->lock.lock();
  EMU_KILL_POINT(KillPoint::cq_lock);
  // (Peek::cqe: nothing was stalled a moment ago; a stall that began since is driven by the next
  // poll that finds it.)
  if (p == Peek::look) maybe_progress(cq);
  int i = 0;
  uint64_t ts;
  while (i < n && next_cqe(cq, &wc[i], &ts)) ++i;
  cq->lock.unlock();
  // An empty poll inside a scheduled run: wait for another actor (the device) to move.
  if (i == 0) sched::spin(sched::kPointSpin, reinterpret_cast<uintptr_t>(cq));
  // With EMU_ENGINE=thread, a poller that busy-polls an empty CQ while this process's device
  // thread has doorbells queued would keep that thread off a shared core for a whole time slice.
  if (i == 0 && cq->device_thread_engine && device_thread_busy()) sched_yield();
  return i;
}

int emu_req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  EmuCq* cq = to_cq(ibcq);
  if (inherited(cq)) return EPERM;
  CqSlot& cs = *cq->shm;
  cs.arm.store(solicited_only ? kCqArmSolicited : kCqArmNext, std::memory_order_seq_cst);
  std::atomic_thread_fence(
      std::memory_order_seq_cst);  // arm, then look (the device: CQE, then arm)
  // A completion the device wrote before the arm but that is still unpolled fires at once, as
  // hardware compares the armed consumer index with its producer index.
  cq->lock.lock();
  uint32_t ci = consumer_index(cq);
  Cqe64& c = cq_entry(cq->ring, ci, cs.log_cqe_cnt, cq->log_entry);
  uint8_t op_own = cqe_owner_load(&c.op_own);
  bool pending = cqe_is_new(op_own, ci, cs.log_cqe_cnt);
  cq->lock.unlock();
  if (pending && !solicited_only && cs.arm.exchange(kCqArmNone) != kCqArmNone) notify_comp(cs);
  return 0;
}

ibv_cq_ex* emu_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  return create_cq_ex_entries(context, attr, false);
}

ibv_cq_ex* create_cq_ex_entries(ibv_context* context, ibv_cq_init_attr_ex* attr, bool cqe128) {
  if (attr->comp_mask &
      ~static_cast<uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
    return fail_null<ibv_cq_ex>(EINVAL);
  if (attr->wc_flags & ~kSupportedWcFlags) return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  constexpr uint32_t kFlags =
      IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  uint32_t flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0;
  if (flags & ~kFlags) return fail_null<ibv_cq_ex>(EOPNOTSUPP);
  // IBV_CQ_INIT_ATTR_MASK_PD names a parent domain (mlx5: anything else is EINVAL), which the CQ
  // holds. Its thread domain does not unlock the CQ: mlx5 keeps the CQ lock there too.
  EmuPd* parent = nullptr;
  if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
    if (!attr->parent_domain || attr->parent_domain->context != context ||
        !to_pd(attr->parent_domain)->is_parent())
      return fail_null<ibv_cq_ex>(EINVAL);
    parent = to_pd(attr->parent_domain);
  }
  // Reading the clock per CQE costs a fifth of a small message: only for a CQ that reports it.
  bool stamp = (attr->wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) != 0;
  // An overrun-ignoring CQ (UCX asks for one when built without assertions, and then never
  // stores its consumer index) is never checked for a full ring.
  uint32_t format = (cqe128 ? kCqFormatCqe128 : 0u) |
                    (flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN ? kCqFormatIgnoreOverrun : 0u);
  EmuCq* cq = create_cq_common(context, static_cast<int>(attr->cqe), attr->cq_context,
                               attr->channel, static_cast<int>(attr->comp_vector), stamp, format);
  if (!cq) return nullptr;
  if (parent) {
    cq->parent_domain = parent;
    parent->refs.fetch_add(1);
  }
  // A CQ its user polls from one thread: ibv_start_poll..ibv_end_poll take no lock (mlx5 picks
  // its unlocked poll functions; ibv_poll_cq keeps the lock there too).
  if (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) cq->poll_ex_lockless = true;
  cq->wc_flags_mask = attr->wc_flags;
  ibv_cq_ex& x = cq->cqx;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  x.read_completion_ts = read_completion_ts;
  x.read_completion_wallclock_ns = read_completion_wallclock_ns;
  x.read_tm_info = read_tm_info;
  return &x;
}

}  // namespace emu::prov

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_create_comp_channel, "IBVERBS_1.0");
    return fn ? fn(context) : fail_null<ibv_comp_channel>(EINVAL);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return nullptr;
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  auto* ch = new (std::nothrow) EmuChannel();
  if (!ch) {
    close(p[0]);
    close(p[1]);
    return fail_null<ibv_comp_channel>(ENOMEM);
  }
  ch->ch.context = context;
  ch->ch.fd = p[0];
  ch->ch.refcnt = 0;
  ch->wfd = p[1];
  ch->uid = segment()->new_uid();
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!is_emu(channel->context)) {
    auto fn = REAL(ibv_destroy_comp_channel, "IBVERBS_1.0");
    return fn ? fn(channel) : EINVAL;
  }
  pthread_mutex_lock(&channel->context->mutex);
  int refs = channel->refcnt;
  pthread_mutex_unlock(&channel->context->mutex);
  if (refs) return EBUSY;
  int fd = channel->fd;
  channel->fd = -1;  // a late ibv_get_cq_event reads nothing else's
  close(fd);
  close(to_channel(channel)->wfd);  // a reader blocked in it sees the end of the pipe
  std::lock_guard<std::mutex> g(g_dead_channels_mu);
  dead_channels().insert(channel);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                      int comp_vector) {
  if (!is_emu(context)) {
    auto fn = REAL(ibv_create_cq, "IBVERBS_1.1");
    return fn ? fn(context, cqe, cq_context, channel, comp_vector) : fail_null<ibv_cq>(EINVAL);
  }
  EmuCq* cq = create_cq_common(context, cqe, cq_context, channel, comp_vector);
  return cq ? ibv_cq_ex_to_cq(&cq->cqx) : nullptr;
}

// The ring changes under the CQ's lock (no poll of this process meanwhile) while engines keep
// completing into it (resize_cq, emu/objects.h). As mlx5: at least cqe + 1 entries, a power of
// two; EINVAL below the unpolled completions. A CQ read through emudv_init_cq must be read again
// after a resize (as a mlx5dv CQ would).
int ibv_resize_cq(ibv_cq* ibcq, int cqe) {
  if (!is_emu(ibcq->context)) {
    auto fn = REAL(ibv_resize_cq, "IBVERBS_1.1");
    return fn ? fn(ibcq, cqe) : EINVAL;
  }
  if (cqe < 1 || static_cast<uint32_t>(cqe) > Limits::max_cqe) return EINVAL;
  uint32_t log = 1;
  while ((1u << log) < static_cast<uint32_t>(cqe) + 1) ++log;
  EmuCq* cq = to_cq(ibcq);
  if (cq->shm->overrun.load()) return EINVAL;  // a CQ in error is not resized
  cq->lock.lock();
  uint64_t off = 0;
  Status st = log == cq->shm->log_cqe_cnt
                  ? Status::ok
                  : resize_cq(segment(), *cq->shm, log, consumer_index(cq), &off);
  if (off) {
    cq->ring = segment()->at<uint8_t>(off);
    ibcq->cqe = static_cast<int>((1u << log) - 1);
  }
  cq->lock.unlock();
  return st == Status::ok ? 0 : st == Status::no_memory ? ENOMEM : EINVAL;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  if (!is_emu(ibcq->context)) {
    auto fn = REAL(ibv_destroy_cq, "IBVERBS_1.1");
    return fn ? fn(ibcq) : EINVAL;
  }
  EmuCq* cq = to_cq(ibcq);
  if (inherited(cq)) return EPERM;
  {
    std::lock_guard<std::mutex> g(cq->qps_mu);
    if (!cq->qps.empty()) return EBUSY;  // QPs still complete here
  }
  // As the kernel does: wait until every delivered event has been acknowledged. Unregistered
  // first, so no further event for it is handed out.
  registry_del(cq->uid);
  pthread_mutex_lock(&ibcq->mutex);
  while (ibcq->comp_events_completed != cq->events_read.load() ||
         ibcq->async_events_completed != cq->async_events_read.load())
    pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
  pthread_mutex_unlock(&ibcq->mutex);
  retire_cq(segment(), *cq->shm);
  if (cq->parent_domain) cq->parent_domain->refs.fetch_sub(1);
  if (ibcq->channel) {
    pthread_mutex_lock(&ibcq->context->mutex);
    --ibcq->channel->refcnt;
    pthread_mutex_unlock(&ibcq->context->mutex);
  }
  delete cq;
  return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  if (dead_channel(channel)) {
    errno = EBADF;
    return -1;
  }
  if (!is_emu(channel->context)) {
    auto fn = REAL(ibv_get_cq_event, "IBVERBS_1.1");
    return fn ? fn(channel, cq, cq_context) : -1;
  }
  for (;;) {
    wait_channel(channel);
    CompEventRecord rec;
    ssize_t r = read(channel->fd, &rec, sizeof rec);
    if (r != sizeof rec) return -1;
    auto* ecq = static_cast<EmuCq*>(registry_take_event(rec.cq_uid, EventKind::completion));
    if (!ecq) continue;  // the CQ was destroyed since: its queued events are dropped
    ibv_cq* c = ibv_cq_ex_to_cq(&ecq->cqx);
    *cq = c;
    *cq_context = c->cq_context;
    return 0;
  }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!is_emu(cq->context)) {
    if (auto fn = REAL(ibv_ack_cq_events, "IBVERBS_1.1")) fn(cq, nevents);
    return;
  }
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

}  // extern "C"
