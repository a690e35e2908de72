// SPDX-License-Identifier: BSD-2-Clause
// Endpoints that post as UCX's rc_mlx5 transport does, through emudv.h: WQE into the ring at the
// software producer index, the index moves on, doorbell record, then the register write the MMIO
// mode chooses; completions read straight from the CQ ring by the owner bit.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emu/wqe.h"
#include "uctlite_internal.h"

namespace uctlite {
namespace {

using emu::be16;
using emu::be32;
using emu::be64;

constexpr uint32_t kBlock = emu::kSendWqeBB;

int wc_status_of(uint8_t syndrome) {
  switch (syndrome) {
    case emu::kSynLocalLength:
      return IBV_WC_LOC_LEN_ERR;
    case emu::kSynLocalQpOp:
      return IBV_WC_LOC_QP_OP_ERR;
    case emu::kSynLocalProt:
      return IBV_WC_LOC_PROT_ERR;
    case emu::kSynWrFlush:
      return IBV_WC_WR_FLUSH_ERR;
    case emu::kSynBadResp:
      return IBV_WC_BAD_RESP_ERR;
    case emu::kSynLocalAccess:
      return IBV_WC_LOC_ACCESS_ERR;
    case emu::kSynRemoteInvalReq:
      return IBV_WC_REM_INV_REQ_ERR;
    case emu::kSynRemoteAccess:
      return IBV_WC_REM_ACCESS_ERR;
    case emu::kSynRemoteOp:
      return IBV_WC_REM_OP_ERR;
    case emu::kSynRetryExc:
      return IBV_WC_RETRY_EXC_ERR;
    case emu::kSynRnrRetryExc:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    default:
      return IBV_WC_GENERAL_ERR;
  }
}

int wc_opcode_of(uint8_t wqe_opcode) {
  switch (wqe_opcode) {
    case emu::kOpRdmaWrite:
    case emu::kOpRdmaWriteImm:
      return IBV_WC_RDMA_WRITE;
    case emu::kOpRdmaRead:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_SEND;
  }
}

class DirectEp final : public Ep {
 public:
  DirectEp(ibv_qp* qp, const emudv_qp& dv, const emudv_cq& dvcq, Worker::Register* reg,
           MmioMode mmio, bool dbrec_fence, bool plain_stores, std::mutex* wl)
      : Ep(qp, wl),
        dv_(*emudv_fns()),
        dbrec_fence_(dbrec_fence),
        plain_stores_(plain_stores),
        q_(dv),
        cq_(dvcq),
        reg_(reg),
        meta_(new WqeMeta[dv.sq_wqe_cnt]) {
    switch (mmio) {
      case MmioMode::bf_post:
        ring_ = &DirectEp::ring_bf_post;
        break;
      case MmioMode::bf_post_mt:
        ring_ = &DirectEp::ring_bf_post_mt;
        break;
      case MmioMode::db_lock:
        ring_ = &DirectEp::ring_db_lock;
        break;
    }
    cq_ci_ = *cq_.dbrec;  // a CQ polled before starts where its consumer index stands
  }

  uint32_t max_inline() const override { return q_.max_inline; }
  std::optional<bool> device_idle() const override { return emu_sq_idle(qp_, q_.dbrec); }
  int register_index() const override { return static_cast<int>(q_.uar.index); }

 protected:
  PostStatus post_unlocked(const PostArgs& a) override;
  int poll_unlocked(Completion* out, int max) override;

 private:
  // What was posted at a ring block (the block a WQE starts at): written by the poster, read by
  // the poller to turn a CQE's wqe_counter back into the caller's wr_id.
  struct WqeMeta {
    std::atomic<uint64_t> wr_id{0};
    std::atomic<uint32_t> pos{~0u};  // 32-bit block counter of the WQE
    std::atomic<uint32_t> bbs{1};
  };

  uint32_t build_wqe(const PostArgs& a, uint32_t pi, uint8_t* stage) const;
  uint64_t ctrl_head(const uint8_t* stage) const {
    uint64_t h;
    std::memcpy(&h, stage, sizeof h);
    return h;
  }
  void bf_copy_and_flush(uint32_t pi, uint32_t bbs);
  void ring_doorbell(const uint8_t* stage);
  bool fits_bf(uint32_t bbs) const { return bbs * kBlock <= reg_->uar.bf_size; }
  void ring_bf_post(uint32_t pi, uint32_t bbs, const uint8_t* stage);
  void ring_bf_post_mt(uint32_t pi, uint32_t bbs, const uint8_t* stage);
  void ring_db_lock(uint32_t pi, uint32_t bbs, const uint8_t* stage);

  const EmudvFns& dv_;
  bool dbrec_fence_;   // false: the record store without the barrier before it (a mutant)
  bool plain_stores_;  // the register written by plain stores (WorkerConfig::plain_stores)
  emudv_qp q_;
  emudv_cq cq_;
  Worker::Register* reg_;
  void (DirectEp::*ring_)(uint32_t pi, uint32_t bbs, const uint8_t* stage) = nullptr;
  // The software producer index (blocks). Read at the start of a post and stored at its end, two
  // separate steps as in UCT: in single mode two threads may post at the same index, exactly what
  // a SINGLE worker misused by two threads does. Atomic only to keep the program free of
  // undefined behaviour; the race it models is in the steps, not in the stores.
  std::atomic<uint32_t> sw_pi_{0};
  std::atomic<uint32_t> acked_pi_{0};  // the block after the last WQE the device completed
  std::unique_ptr<WqeMeta[]> meta_;
  uint32_t cq_ci_ = 0;  // polls are serialized by the caller
};

uint32_t DirectEp::build_wqe(const PostArgs& a, uint32_t pi, uint8_t* stage) const {
  uint32_t size = sizeof(emu::CtrlSeg);
  if (a.op == Op::write) {
    emu::RaddrSeg r{be64(a.raddr), be32(a.rkey), 0};
    std::memcpy(stage + size, &r, sizeof r);
    size += sizeof r;
  }
  if (a.inline_data) {
    uint32_t hdr = be32(a.length | emu::kInlineSegFlag);
    std::memcpy(stage + size, &hdr, sizeof hdr);
    std::memcpy(stage + size + sizeof hdr, a.payload, a.length);
    size += (sizeof hdr + a.length + 15) & ~15u;
  } else {
    emu::DataSeg d{be32(a.length), be32(a.lkey), be64(reinterpret_cast<uintptr_t>(a.payload))};
    std::memcpy(stage + size, &d, sizeof d);
    size += sizeof d;
  }
  uint32_t bbs = (size + kBlock - 1) / kBlock;
  std::memset(stage + size, 0, bbs * kBlock - size);
  emu::CtrlSeg c{};
  uint8_t opcode = a.op == Op::write ? emu::kOpRdmaWrite : emu::kOpSend;
  emu::ctrl_set_index_opcode(c, pi, opcode);
  emu::ctrl_set_qpn_ds(c, q_.qpn, size / 16);
  c.fm_ce_se = emu::kCtrlCqUpdate;
  std::memcpy(stage, &c, sizeof c);
  return bbs;
}

PostStatus DirectEp::post_unlocked(const PostArgs& a) {
  if ((a.inline_data && a.length > q_.max_inline) || a.length == 0) {
    last_error_ = EINVAL;
    return PostStatus::error;
  }
  alignas(64) uint8_t stage[emu::kMaxWqeBBs * kBlock];
  uint32_t pi = sw_pi_.load(std::memory_order_relaxed);
  // Room: at most the ring's blocks between the device's last completion and the producer. A
  // producer behind the completions (after two threads raced on it) counts as an empty queue.
  int32_t outstanding = static_cast<int32_t>(pi - acked_pi_.load(std::memory_order_acquire));
  uint32_t bbs = build_wqe(a, pi, stage);
  if (static_cast<uint32_t>(std::max(outstanding, 0)) + bbs > q_.sq_wqe_cnt)
    return PostStatus::queue_full;
  WqeMeta& m = meta_[pi & (q_.sq_wqe_cnt - 1)];
  m.wr_id.store(a.wr_id, std::memory_order_relaxed);
  m.bbs.store(bbs, std::memory_order_relaxed);
  m.pos.store(pi, std::memory_order_release);
  dv_.sq_write(&q_, pi, stage, bbs);
  uint32_t next = pi + bbs;
  if (dbrec_fence_)
    dv_.sq_dbrec(&q_, next);
  else
    dv_.sq_dbrec_unfenced(&q_, next);
  (this->*ring_)(pi, bbs, stage);
  // As UCT, the software index moves after the doorbell.
  sw_pi_.store(next, std::memory_order_relaxed);
  return PostStatus::ok;
}

// The WQE goes to the register from the ring, in two copies when it wraps the ring's end (as mlx5
// drivers copy), then the flush that makes the device take it; then the buffer toggles.
void DirectEp::bf_copy_and_flush(uint32_t pi, uint32_t bbs) {
  uint32_t off = reg_->bf_offset.load(std::memory_order_relaxed);
  auto* dst = static_cast<uint8_t*>(reg_->uar.bf) + off;
  auto* ring = static_cast<const uint8_t*>(q_.sq_buf);
  uint32_t idx = pi & (q_.sq_wqe_cnt - 1);
  uint32_t first = std::min(bbs, q_.sq_wqe_cnt - idx);
  if (plain_stores_) {  // memcpy picks the store widths, as UCX's BlueFlame copy leaves it to
    std::memcpy(dst, ring + idx * kBlock, first * kBlock);
    if (first < bbs) std::memcpy(dst + first * kBlock, ring, (bbs - first) * kBlock);
    __builtin_ia32_sfence();  // the write-combining flush
  } else {
    dv_.bf_copy(&reg_->uar, dst, ring + idx * kBlock, first);
    if (first < bbs) dv_.bf_copy(&reg_->uar, dst + first * kBlock, ring, bbs - first);
    dv_.mmio_flush();
  }
  // Toggled as a load and a store (UCT: addr ^= bf_size): unlocked posters can both use one buffer.
  reg_->bf_offset.store(off ^ reg_->uar.bf_size, std::memory_order_relaxed);
}

void DirectEp::ring_doorbell(const uint8_t* stage) {
  if (plain_stores_) {
    *reg_->uar.db = ctrl_head(stage);
    __builtin_ia32_sfence();
  } else {
    ring_doorbell(stage);
  }
}

void DirectEp::ring_bf_post(uint32_t pi, uint32_t bbs, const uint8_t* stage) {
  if (fits_bf(bbs))
    bf_copy_and_flush(pi, bbs);
  else
    ring_doorbell(stage);
}

void DirectEp::ring_bf_post_mt(uint32_t pi, uint32_t bbs, const uint8_t* stage) {
  std::lock_guard<SpinLock> g(reg_->lock);
  if (fits_bf(bbs))
    bf_copy_and_flush(pi, bbs);
  else
    ring_doorbell(stage);
}

void DirectEp::ring_db_lock(uint32_t pi, uint32_t bbs, const uint8_t* stage) {
  std::lock_guard<SpinLock> g(reg_->lock);
  ring_doorbell(stage);
}

int DirectEp::poll_unlocked(Completion* out, int max) {
  auto* ring = static_cast<const uint8_t*>(cq_.buf);
  uint32_t mask = q_.sq_wqe_cnt - 1;
  int n = 0;
  while (n < max) {
    const uint8_t* p = ring + (cq_ci_ & (cq_.cqe_cnt - 1)) * cq_.cqe_size;
    uint8_t op_own = __atomic_load_n(p + offsetof(emu::Cqe64, op_own), __ATOMIC_ACQUIRE);
    uint8_t opcode = op_own >> 4;
    if (opcode == emu::kCqeInvalid || (op_own & 1) != ((cq_ci_ / cq_.cqe_cnt) & 1)) break;
    emu::Cqe64 cqe;
    std::memcpy(&cqe, p, sizeof cqe);
    Completion& c = out[n++];
    c = Completion{};
    c.wqe_index = be16(cqe.wqe_counter);
    c.opcode = wc_opcode_of(emu::cqe_wqe_opcode(cqe));
    if (opcode == emu::kCqeReqErr || opcode == emu::kCqeRespErr) {
      emu::ErrCqe e;
      std::memcpy(&e, p, sizeof e);
      c.status = wc_status_of(e.syndrome);
    }
    WqeMeta& m = meta_[c.wqe_index & mask];
    uint32_t pos = m.pos.load(std::memory_order_acquire);
    uint32_t acked = acked_pi_.load(std::memory_order_relaxed);
    if ((pos & 0xffff) == c.wqe_index) {
      c.wr_id = m.wr_id.load(std::memory_order_relaxed);
      acked = pos + m.bbs.load(std::memory_order_relaxed);
    } else {
      c.matched = false;  // the device completed an index no post here started at
      acked += static_cast<int16_t>(c.wqe_index - acked) + 1;
    }
    acked_pi_.store(acked, std::memory_order_release);
    ++cq_ci_;
  }
  if (n) __atomic_store_n(cq_.dbrec, cq_ci_, __ATOMIC_RELEASE);
  return n;
}

}  // namespace

std::unique_ptr<Ep> make_direct_ep(ibv_qp* qp, const emudv_qp& dv, const emudv_cq& dvcq,
                                   Worker::Register* reg, MmioMode mmio, bool dbrec_fence,
                                   bool plain_stores, std::mutex* wl) {
  return std::make_unique<DirectEp>(qp, dv, dvcq, reg, mmio, dbrec_fence, plain_stores, wl);
}

}  // namespace uctlite
