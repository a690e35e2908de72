// SPDX-License-Identifier: BSD-2-Clause
// The post path: WQEs into the rings, the doorbell record, then the doorbell (8-byte write or
// BlueFlame copy) — the same order of stores a hardware driver makes.
#include <cerrno>
#include <cstring>
#include <iterator>

#include "emu/barriers.h"
#include "emu/device.h"
#include "emu/kill_point.h"
#include "emu/mmio.h"
#include "emu/reclaim.h"
#include "emu/small_copy.h"
#include "emu/transport.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace emu::prov {

namespace {

constexpr uint32_t kMaxSendWqeBytes = kMaxWqeBBs * kSendWqeBB;

CtrlSeg* stage_ctrl(EmuQp* qp) { return reinterpret_cast<CtrlSeg*>(qp->stage); }

bool sq_full(const EmuQp* qp, uint32_t more_blocks) {
  return qp->sq_posted - qp->sq_retired.load(std::memory_order_acquire) >= qp->max_send_wr ||
         qp->sq_head + more_blocks - qp->sq_tail.load(std::memory_order_acquire) > qp->sq_bbs;
}

// Copies a staged WQE into the ring at block `at`, wrapping at the end.
[[gnu::always_inline]] inline void ring_copy(EmuQp* qp, uint32_t at, const uint8_t* src,
                                             uint32_t size) {
  uint32_t idx = at & (qp->sq_bbs - 1);
  if (size <= kSendWqeBB) {  // one block, whole (the stage has it all): a copy without a call
    std::memcpy(qp->sq + idx * kSendWqeBB, src, kSendWqeBB);
    return;
  }
  uint32_t room = (qp->sq_bbs - idx) * kSendWqeBB;
  uint32_t first = size < room ? size : room;
  std::memcpy(qp->sq + idx * kSendWqeBB, src, first);
  if (first < size) std::memcpy(qp->sq, src + first, size - first);
}

// The doorbell: BlueFlame for a lone small WQE (the WQE itself goes through the register) where the
// register uses it (EMU_BLUEFLAME: by default the registers without a lock, where BlueFlame can
// race), else the 8-byte doorbell. The register's lock covers the copy and the flush, as mlx5 does
// for shared registers (without the flush inside, a later post's doorbell could overtake this one).
// The flush is when the device receives the chunks (emu/mmio.h); the engine runs after the lock is
// dropped. A thread domain's own register, and every register under EMU_SINGLE_THREADED, has no
// lock: its users promise one thread at a time.
void ring_doorbell(EmuQp* qp, uint32_t ctrl_block, uint32_t bbs, bool single) {
  EngineSection in_engine(segment());  // one section for the intake and the run that follows
  EmuContext* ctx = qp->ctx;
  UarUse& use = ctx->uar_use[qp->uar_idx];
  UarReg& reg = ctx->uars[qp->uar_idx];
  uint64_t heads[kWcBuffers];
  uint32_t n = 0;
  use.lock.lock();
  if (single && use.blueflame && bbs * kSendWqeBB <= kBfBufSize) {
    const uint8_t* blocks[kBfChunks];
    for (uint32_t i = 0; i < bbs; ++i)
      blocks[i] = qp->sq + ((ctrl_block + i) & (qp->sq_bbs - 1)) * kSendWqeBB;
    mmio_bf_copy(reg, use.bf_offset, blocks, bbs);
    n = mmio_flush(heads, kWcBuffers, !use.lock.off);
    use.bf_offset ^= 1;
  } else {
    uint64_t head;
    std::memcpy(&head, qp->sq + (ctrl_block & (qp->sq_bbs - 1)) * kSendWqeBB, 8);
    heads[n++] = mmio_db64(reg, head);
  }
  use.lock.unlock();
  for (uint32_t i = 0; i < n; ++i) device_doorbell(heads[i]);
  EMU_KILL_POINT(KillPoint::doorbell);
}
}  // namespace

// The builders are written once, inlined into ibv_post_send's loop (a call per step of every WR
// was a tenth of the post), and exported under their wqe_* names for the ibv_wr_* API.
[[gnu::always_inline]] static inline int begin_wqe(EmuQp* qp, uint8_t opcode, unsigned send_flags,
                                                   uint32_t imm_be, uint64_t wr_id) {
  std::memset(qp->stage, 0, sizeof(CtrlSeg));
  CtrlSeg* c = stage_ctrl(qp);
  c->opmod_idx_opcode = opcode;  // index filled at commit
  uint8_t f = 0;
  if ((send_flags & IBV_SEND_SIGNALED) || qp->sig_all) f |= kCtrlCqUpdate;
  if (send_flags & IBV_SEND_SOLICITED) f |= kCtrlSolicited;
  if (send_flags & IBV_SEND_FENCE) f |= kCtrlFence;
  c->fm_ce_se = f;
  c->imm = imm_be;
  qp->stage_size = sizeof(CtrlSeg);
  if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
    // Room for the address vector, filled by wqe_set_av (ibv_wr_set_ud_addr may come later).
    AvSeg none{};
    none.dqp = be32(kAvExtended);  // the full vector, as libmlx5 writes it
    std::memcpy(qp->stage + qp->stage_size, &none, sizeof none);
    qp->stage_size += sizeof(AvSeg);
  } else if (qp->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND) {
    // Room for the XRC segment, filled by wqe_set_xrc_srqn (or ibv_wr_set_xrc_srqn).
    std::memset(qp->stage + qp->stage_size, 0, sizeof(XrcSeg));
    qp->stage_size += sizeof(XrcSeg);
  }
  qp->stage_nsge = 0;
  qp->stage_opcode = opcode;
  qp->stage_wr_id = wr_id;
  return 0;
}

int wqe_begin(EmuQp* qp, uint8_t opcode, unsigned send_flags, uint32_t imm_be, uint64_t wr_id) {
  return begin_wqe(qp, opcode, send_flags, imm_be, wr_id);
}

int wqe_set_av(EmuQp* qp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (!ah || ah->context != qp->qpx.qp_base.context) return EINVAL;
  AvSeg av = to_ah(ah)->av;
  av.qkey = be32(remote_qkey);
  av.dqp = be32((remote_qpn & 0xffffff) | kAvExtended);  // the full vector, as libmlx5 writes it
  std::memcpy(qp->stage + sizeof(CtrlSeg), &av, sizeof av);
  return 0;
}

void wqe_set_xrc_srqn(EmuQp* qp, uint32_t srqn) {
  XrcSeg x{};
  x.xrc_srqn = be32(srqn);
  std::memcpy(qp->stage + sizeof(CtrlSeg), &x, sizeof x);
}

// verbs numbers the transports as the device does, so a QP's type indexes the device's table.
static_assert(int{IBV_QPT_RC} == kQptRc && int{IBV_QPT_UC} == kQptUc && int{IBV_QPT_UD} == kQptUd &&
              int{IBV_QPT_XRC_SEND} == kQptXrcSend && int{IBV_QPT_XRC_RECV} == kQptXrcRecv &&
              int{IBV_QPT_RAW_PACKET} == kQptRaw);

bool opcode_allowed(ibv_qp_type type, uint8_t opcode) {
  return transport_carries(static_cast<uint8_t>(type), opcode);
}

[[gnu::always_inline]] static inline void add_raddr(EmuQp* qp, uint64_t raddr, uint32_t rkey) {
  RaddrSeg r{be64(raddr), be32(rkey), 0};
  std::memcpy(qp->stage + qp->stage_size, &r, sizeof r);
  qp->stage_size += sizeof r;
}

void wqe_add_raddr(EmuQp* qp, uint64_t raddr, uint32_t rkey) { add_raddr(qp, raddr, rkey); }

void wqe_add_atomic(EmuQp* qp, uint64_t swap_add, uint64_t compare) {
  AtomicSeg a{be64(swap_add), be64(compare)};
  std::memcpy(qp->stage + qp->stage_size, &a, sizeof a);
  qp->stage_size += sizeof a;
}

// A memory-window bind: the window by its key now, the key it takes, the range in the MR. The
// device checks the rest (MW_BIND_ERR), as it does on mlx5.
int wqe_add_bind(EmuQp* qp, ibv_mw* mw, uint32_t new_rkey, const ibv_mw_bind_info& info) {
  if (!mw || mw->context != qp->qpx.qp_base.context) return EINVAL;
  BindSeg b{be32(mw->rkey),
            be32(new_rkey),
            be32(info.mr ? info.mr->lkey : 0),
            be32(info.mw_access_flags),
            be64(info.addr),
            be64(info.length)};
  std::memcpy(qp->stage + qp->stage_size, &b, sizeof b);
  qp->stage_size += sizeof b;
  return 0;
}

int wqe_add_sge(EmuQp* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  if (length == 0) return 0;  // a zero byte_count would mean 2 GiB to the device
  if (++qp->stage_nsge > qp->max_send_sge || qp->stage_size + sizeof(DataSeg) > kMaxSendWqeBytes)
    return EINVAL;
  DataSeg d{be32(length), be32(lkey), be64(addr)};
  std::memcpy(qp->stage + qp->stage_size, &d, sizeof d);
  qp->stage_size += sizeof d;
  return 0;
}

// An inline segment from a list of buffers: ibv_data_buf (ibv_wr_set_inline_data_list) or the
// WR's own ibv_sge list (ibv_post_send), read in place.
inline const void* buf_addr(const ibv_data_buf& b) { return b.addr; }
inline size_t buf_len(const ibv_data_buf& b) { return b.length; }
inline const void* buf_addr(const ibv_sge& b) { return reinterpret_cast<const void*>(b.addr); }
inline size_t buf_len(const ibv_sge& b) { return b.length; }

template <class Buf>
[[gnu::always_inline]] static inline int add_inline_data(EmuQp* qp, const Buf* bufs, size_t n) {
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += buf_len(bufs[i]);
  if (total > qp->max_inline || qp->stage_size + 4 + total > kMaxSendWqeBytes) return EINVAL;
  if (total == 0) return 0;
  uint8_t* p = qp->stage + qp->stage_size;
  // The padding to 16 bytes: the segment's last 16 bytes zeroed first (one fixed-size store, not a
  // call for a few bytes), then the header and the data over them.
  uint32_t seg = static_cast<uint32_t>((4 + total + 15) & ~size_t(15));
  std::memset(p + seg - 16, 0, 16);
  uint32_t hdr = be32(static_cast<uint32_t>(total) | kInlineSegFlag);
  std::memcpy(p, &hdr, 4);
  uint8_t* d = p + 4;
  for (size_t i = 0; i < n; ++i) {
    copy_small(d, buf_addr(bufs[i]), buf_len(bufs[i]));
    d += buf_len(bufs[i]);
  }
  qp->stage_size += seg;
  return 0;
}

int wqe_add_inline(EmuQp* qp, const ibv_data_buf* bufs, size_t n) {
  return add_inline_data(qp, bufs, n);
}

[[gnu::always_inline]] static inline int commit_wqe(EmuQp* qp, uint32_t* ctrl_block,
                                                    uint32_t* bbs_out) {
  uint32_t size = (qp->stage_size + 15) & ~15u;
  uint32_t bbs = (size + kSendWqeBB - 1) / kSendWqeBB;
  sched::point(sched::kPointIndexLoad, reinterpret_cast<uintptr_t>(&qp->sq_head), qp->sq_head);
  if (sq_full(qp, bbs)) return ENOMEM;
  CtrlSeg* c = stage_ctrl(qp);
  ctrl_set_index_opcode(*c, qp->sq_head, qp->stage_opcode);
  ctrl_set_qpn_ds(*c, qp->qpx.qp_base.qp_num, size / 16);
  sq_note_wqe_before(*qp->shm, qp->sq_head, bbs);
  ring_copy(qp, qp->sq_head, qp->stage, size);
  sq_note_wqe_store(*qp->shm, qp->wrec, qp->sq_head, bbs);
  uint32_t slot = qp->sq_head & (qp->sq_bbs - 1);
  ++qp->sq_posted;
  qp->sq_wrid[slot] = qp->stage_wr_id;
  qp->sq_wqe_bbs[slot] = static_cast<uint8_t>(bbs);
  qp->sq_seq[slot] = qp->sq_posted;
  *ctrl_block = qp->sq_head;
  *bbs_out = bbs;
  sched::point(sched::kPointIndexStore, reinterpret_cast<uintptr_t>(&qp->sq_head), qp->sq_head);
  qp->sq_head += bbs;
  qp->stage_size = 0;
  return 0;
}

int wqe_commit(EmuQp* qp, uint32_t* ctrl_block, uint32_t* bbs_out) {
  return commit_wqe(qp, ctrl_block, bbs_out);
}

void sq_publish(EmuQp* qp, uint32_t last_block, uint32_t last_bbs, uint32_t nreq) {
  if (nreq == 0) return;  // nothing posted: no doorbell
  sq_dbrec_store(*qp->shm, &qp->dbrec[1], qp->sq_head);
  ring_doorbell(qp, last_block, last_bbs, nreq == 1);
}

// What ibv_post_send makes of a WR's opcode: the WQE opcode and the segments it takes, one table
// load instead of a switch and a test per segment kind.
enum WrShape : uint8_t {
  kWrRaddr = 1,      // a remote-address segment (RDMA)
  kWrAtomic = 2,     // remote address and atomic segments
  kWrImm = 4,        // the immediate from imm_data
  kWrInvalKey = 8,   // the immediate field carries invalidate_rkey
  kWrNoData = 16,    // no data segments (bind, local invalidate)
  kWrNoInline = 32,  // IBV_SEND_INLINE does not apply (the device writes into the buffers)
};
struct WrKind {
  uint8_t opcode;
  uint8_t shape;  // WrShape bits
};
constexpr uint8_t kNoOpcode = 0xff;
inline WrKind wr_kind(ibv_wr_opcode op) {
  static constexpr WrKind kKinds[] = {
      {kOpRdmaWrite, kWrRaddr},                // IBV_WR_RDMA_WRITE
      {kOpRdmaWriteImm, kWrRaddr | kWrImm},    // IBV_WR_RDMA_WRITE_WITH_IMM
      {kOpSend, 0},                            // IBV_WR_SEND
      {kOpSendImm, kWrImm},                    // IBV_WR_SEND_WITH_IMM
      {kOpRdmaRead, kWrRaddr | kWrNoInline},   // IBV_WR_RDMA_READ
      {kOpAtomicCs, kWrAtomic | kWrNoInline},  // IBV_WR_ATOMIC_CMP_AND_SWP
      {kOpAtomicFa, kWrAtomic | kWrNoInline},  // IBV_WR_ATOMIC_FETCH_AND_ADD
      {kOpLocalInv, kWrInvalKey | kWrNoData},  // IBV_WR_LOCAL_INV
      {kOpBindMw, kWrNoData},                  // IBV_WR_BIND_MW
      {kOpSendInval, kWrInvalKey},             // IBV_WR_SEND_WITH_INV
  };
  static_assert(IBV_WR_RDMA_WRITE == 0 && IBV_WR_RDMA_WRITE_WITH_IMM == 1 && IBV_WR_SEND == 2 &&
                IBV_WR_SEND_WITH_IMM == 3 && IBV_WR_RDMA_READ == 4 &&
                IBV_WR_ATOMIC_CMP_AND_SWP == 5 && IBV_WR_ATOMIC_FETCH_AND_ADD == 6 &&
                IBV_WR_LOCAL_INV == 7 && IBV_WR_BIND_MW == 8 && IBV_WR_SEND_WITH_INV == 9);
  auto i = static_cast<uint32_t>(op);
  return i < std::size(kKinds) ? kKinds[i] : WrKind{kNoOpcode, 0};  // TSO, DRIVER1, ...: EINVAL
}

int emu_post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  EmuQp* qp = to_qp(ibqp);
  if (inherited(qp)) {
    *bad = wr;
    return EPERM;
  }
  bool owned = queue_enter(qp, kOwnerSend);
  EMU_KILL_POINT(KillPoint::qp_lock);
  uint32_t state = qp->shm->qp_state.load(std::memory_order_relaxed);
  int err = 0;
  uint32_t nreq = 0, last_block = 0, last_bbs = 0;
  if (state == kQpsReset || state == kQpsInit || state == kQpsRtr) {
    err = EINVAL;
    *bad = wr;
  }
  for (; !err && wr; wr = wr->next) {
    WrKind k = wr_kind(wr->opcode);
    uint8_t opcode = k.opcode;
    if (opcode == kNoOpcode || !transport_carries(static_cast<uint8_t>(ibqp->qp_type), opcode) ||
        wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->max_send_sge) {
      err = EINVAL;
    } else {
      uint32_t imm = (k.shape & kWrImm) ? wr->imm_data : 0;
      // The key to invalidate rides in the immediate field (as mlx5 puts it), big endian.
      if (k.shape & kWrInvalKey) imm = be32(wr->invalidate_rkey);
      begin_wqe(qp, opcode, wr->send_flags, imm, wr->wr_id);
      if (ibqp->qp_type == IBV_QPT_UD)
        err = wqe_set_av(qp, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
      else if (ibqp->qp_type == IBV_QPT_XRC_SEND)
        wqe_set_xrc_srqn(qp, wr->qp_type.xrc.remote_srqn);
      if (opcode == kOpBindMw) {
        err = wqe_add_bind(qp, wr->bind_mw.mw, wr->bind_mw.rkey, wr->bind_mw.bind_info);
      } else if (k.shape & kWrAtomic) {
        add_raddr(qp, wr->wr.atomic.remote_addr, wr->wr.atomic.rkey);
        if (opcode == kOpAtomicCs)
          wqe_add_atomic(qp, wr->wr.atomic.swap, wr->wr.atomic.compare_add);
        else
          wqe_add_atomic(qp, wr->wr.atomic.compare_add, 0);
      } else if (k.shape & kWrRaddr) {
        add_raddr(qp, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
      }
      if (k.shape & kWrNoData) {
        // A bind or an invalidate carries no data.
      } else if (!err && (wr->send_flags & IBV_SEND_INLINE) && !(k.shape & kWrNoInline)) {
        err = add_inline_data(qp, wr->sg_list, static_cast<size_t>(wr->num_sge));
      } else {
        for (int i = 0; !err && i < wr->num_sge; ++i)
          err = wqe_add_sge(qp, wr->sg_list[i].lkey, wr->sg_list[i].addr, wr->sg_list[i].length);
      }
      if (!err) err = commit_wqe(qp, &last_block, &last_bbs);
    }
    if (err) {
      qp->stage_size = 0;
      *bad = wr;
      break;
    }
    ++nreq;
  }
  sq_publish(qp, last_block, last_bbs, nreq);
  queue_leave(qp, kOwnerSend, owned);
  return err;
}

int emu_post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  EmuQp* qp = to_qp(ibqp);
  if (inherited(qp)) {
    *bad = wr;
    return EPERM;
  }
  bool owned = queue_enter(qp, kOwnerRecv);
  int err = 0;
  uint32_t nreq = 0;
  // A QP on an SRQ (or of an XRC type, or an RSS QP: its WQs receive) has no receive queue of its
  // own; a QP in RESET takes none.
  ibv_qp_type t = ibqp->qp_type;
  if (qp->srq || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV || qp->rss_slot ||
      qp->shm->qp_state.load(std::memory_order_relaxed) == kQpsReset) {
    err = EINVAL;
    *bad = wr;
  }
  for (; !err && wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->max_recv_sge) {
      err = EINVAL;
    } else if (qp->rq_head - qp->rq_tail >= qp->max_recv_wr) {
      err = ENOMEM;
    }
    if (err) {
      *bad = wr;
      break;
    }
    size_t at = (qp->rq_head & (qp->rq_cnt - 1)) * qp->rq_stride;
    uint8_t* w = qp->rq + at;
    uint8_t* shadow = qp->rq_shadow.data() + at;
    uint32_t n = 0;
    for (int i = 0; i < wr->num_sge; ++i) {
      if (wr->sg_list[i].length == 0) continue;
      DataSeg d{be32(wr->sg_list[i].length), be32(wr->sg_list[i].lkey), be64(wr->sg_list[i].addr)};
      std::memcpy(w + n * sizeof(DataSeg), &d, sizeof d);
      std::memcpy(shadow + n++ * sizeof(DataSeg), &d, sizeof d);
    }
    if (n * sizeof(DataSeg) < qp->rq_stride) {
      DataSeg term{0, be32(kInvalidLkey), 0};
      std::memcpy(w + n * sizeof(DataSeg), &term, sizeof term);
      std::memcpy(shadow + n * sizeof(DataSeg), &term, sizeof term);
    }
    qp->rq_wrid[qp->rq_head & (qp->rq_cnt - 1)] = wr->wr_id;
    ++qp->rq_head;
    ++nreq;
  }
  if (nreq) {
    // The line the next receives go to, taken for writing now: the device last read it a ring
    // ago, and fetching it here keeps that transfer out of the fence below on the next post.
    prefetch_for_store(qp->rq +
                       ((qp->rq_head + 64 / qp->rq_stride) & (qp->rq_cnt - 1)) * qp->rq_stride);
    to_device_barrier();
    dbrec_store32(&qp->dbrec[0], be32(qp->rq_head & 0xffff));
  }
  queue_leave(qp, kOwnerRecv, owned);
  if (nreq) {
    // The device's side of a receive doorbell: flush in ERR, or wake a requester parked on RNR.
    // The fence: the doorbell record before the look for a waiter, the mirror of the requester's
    // registering before its second look (Engine::recv_empty_wait).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (qp->shm->qp_state.load() == kQpsErr) {
      device_flush_rq(*qp->shm);
    } else if (qp->shm->rnr_waiter.load() != 0) {         // a load first: an RMW would pull the
      uint32_t waiter = qp->shm->rnr_waiter.exchange(0);  // line from the sender every post
      if (!waiter) return err;
      EngineSection in_engine(segment());  // the waiter's slot stays valid while we kick it
      if (QpSlot* w = segment()->find_qp(waiter - 1)) device_kick_sq(*w, true);
    }
  }
  return err;
}

}  // namespace emu::prov
