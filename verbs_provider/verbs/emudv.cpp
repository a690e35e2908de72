// SPDX-License-Identifier: BSD-2-Clause
// The direct-access API (emudv.h): an emulated QP's and CQ's queues and doorbell register, and
// MMIO that goes through the same recorded helpers as the provider's own post path (emu/mmio.h).
#include "emudv.h"

#include <cerrno>
#include <cstring>

#include "emu/barriers.h"
#include "emu/mmio.h"
#include "emu/race_log.h"
#include "provider.h"
#include "register_pages.h"

using namespace emu;
using namespace emu::prov;

namespace {

UarReg* reg_of(emudv_uar* uar) { return static_cast<UarReg*>(uar->opaque); }

}  // namespace

extern "C" {

int emudv_init_qp(ibv_qp* ibqp, emudv_qp* out) {
  if (!ibqp || !out || !is_emu(ibqp->context)) return EINVAL;
  EmuQp* qp = to_qp(ibqp);
  if (ibqp->qp_type == IBV_QPT_XRC_RECV) return EINVAL;  // a TGT QP has no queues of its own
  std::memset(out, 0, sizeof *out);
  out->qpn = ibqp->qp_num;
  out->sq_buf = qp->sq;
  out->sq_wqe_cnt = qp->sq_bbs;
  out->sq_stride = kSendWqeBB;
  out->rq_buf = qp->rq;
  out->rq_wqe_cnt = qp->rq_cnt;
  out->rq_stride = qp->rq_stride;
  out->dbrec = qp->dbrec;
  UarReg& reg = qp->ctx->uars[qp->uar_idx];
  // The register as the program maps it: plain stores reach the device (register_pages.h).
  out->uar.db = reinterpret_cast<volatile uint64_t*>(
      register_address(qp->ctx, qp->uar_idx, offsetof(UarReg, doorbell)));
  out->uar.bf = register_address(qp->ctx, qp->uar_idx, offsetof(UarReg, bf));
  out->uar.bf_size = kBfBufSize;
  out->uar.index = qp->uar_idx;
  out->uar.opaque = &reg;
  out->max_inline = qp->max_inline;
  out->opaque = qp;
  return 0;
}

int emudv_init_cq(ibv_cq* ibcq, emudv_cq* out) {
  if (!ibcq || !out || !is_emu(ibcq->context)) return EINVAL;
  EmuCq* cq = to_cq(ibcq);
  // A CQ in mlx5 form (the mlx5 personality) keeps mlx5's record: mlx5dv_init_obj describes it.
  if (cq->shm->format & kCqFormatMlx5) return EOPNOTSUPP;
  std::memset(out, 0, sizeof *out);
  out->cqn = cq->slot;
  out->buf = cq->ring;
  out->cqe_cnt = cq->shm->cqe_cnt;
  out->cqe_size = sizeof(Cqe64);
  out->dbrec = reinterpret_cast<volatile uint32_t*>(&cq->shm->ci);
  return 0;
}

void emudv_db_write64(emudv_uar* uar, uint64_t ctrl_head) {
  device_doorbell(mmio_db64(*reg_of(uar), ctrl_head));
}

void emudv_bf_copy(emudv_uar* uar, void* dst, const void* src, unsigned nblocks) {
  UarReg& reg = *reg_of(uar);
  size_t off = static_cast<size_t>(static_cast<uint8_t*>(dst) - static_cast<uint8_t*>(uar->bf));
  if (off >= 2 * kBfBufSize) return;  // not this register's BlueFlame buffers: no device write
  uint32_t buf = static_cast<uint32_t>(off / kBfBufSize);
  uint32_t first = static_cast<uint32_t>((off % kBfBufSize) / kSendWqeBB);
  // A WQE that wraps the send ring comes in two calls; the second continues the first's write.
  uint64_t tag = mmio_bf_continue(reg, buf, first);
  auto* s = static_cast<const uint8_t*>(src);
  for (uint32_t i = 0; i < nblocks && first + i < kBfChunks; ++i)
    mmio_bf_chunk(reg, buf, first + i, s + i * kSendWqeBB, tag);
}

void emudv_mmio_flush(void) {
  uint64_t heads[kWcBuffers];
  uint32_t n = mmio_flush(heads, kWcBuffers);
  for (uint32_t i = 0; i < n; ++i) device_doorbell(heads[i]);
}

void emudv_sq_write(emudv_qp* dv, uint32_t pos, const void* wqe, unsigned nblocks) {
  EmuQp* qp = static_cast<EmuQp*>(dv->opaque);
  auto* src = static_cast<const uint8_t*>(wqe);
  sq_note_wqe_before(*qp->shm, pos, nblocks);
  for (unsigned i = 0; i < nblocks; ++i)
    std::memcpy(qp->sq + ((pos + i) & (qp->sq_bbs - 1)) * kSendWqeBB, src + i * kSendWqeBB,
                kSendWqeBB);
  sq_note_wqe_store(*qp->shm, qp->wrec, pos, nblocks);
}

void emudv_sq_dbrec(emudv_qp* dv, uint32_t producer) {
  EmuQp* qp = static_cast<EmuQp*>(dv->opaque);
  sq_dbrec_store(*qp->shm, &qp->dbrec[1], producer);
}

void emudv_sq_dbrec_unfenced(emudv_qp* dv, uint32_t producer) {
  EmuQp* qp = static_cast<EmuQp*>(dv->opaque);
  sq_dbrec_store_unfenced(*qp->shm, &qp->dbrec[1], producer);
}

void emudv_to_device_barrier(void) { device_barrier(); }

uint64_t emudv_races_recorded(void) { return segment() ? races_recorded(segment()) : 0; }

int emudv_read_races(uint64_t from, emudv_race* out, int max) {
  if (!segment() || !out || max < 0) return 0;
  std::vector<RaceRecord> got = read_races(segment(), from);
  int n = 0;
  for (const RaceRecord& r : got) {
    if (n == max) break;
    emudv_race& e = out[n++];
    e.seq = r.seq;
    e.kind = r.kind;
    e.device = r.dev;
    e.qpn = r.qpn;
    e.context = r.ctx == 0xffffffffu ? -1 : static_cast<int32_t>(r.ctx);
    e.reg = r.reg == 0xffff ? -1 : r.reg;
    e.slot = r.slot;
    e.pid = r.pid;
    e.writer_tids[0] = r.writers[0];
    e.writer_tids[1] = r.writers[1];
    e.values[0] = r.value[0];
    e.values[1] = r.value[1];
    e.kind_name = race_kind_name(r.kind);
    e.executed = race_action_name(r.action);
  }
  return n;
}

int emudv_sq_device_state(ibv_qp* ibqp, uint32_t* consumed, int* stalled) {
  if (!ibqp || !is_emu(ibqp->context)) return EINVAL;
  QpSlot& s = *to_qp(ibqp)->shm;
  if (consumed) *consumed = s.sq_ci;
  if (stalled) *stalled = s.stall.load() != kStallNone;
  return 0;
}

}  // extern "C"
