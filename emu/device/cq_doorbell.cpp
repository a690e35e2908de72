// SPDX-License-Identifier: BSD-2-Clause
// The CQ doorbell of a register page in mlx5's layout (the mlx5 personality): code written for
// mlx5 arms a CQ not through ibv_req_notify_cq but by storing the arm request (its arm record
// first, then these 8 bytes at offset 0x20 of a UAR page). The device takes it as it takes the
// verbs call: the next completion (or the next solicited one) raises an event on the CQ's
// channel, and one already there beyond the consumer index the request names raises it at once.
#include "device/engine.h"
#include "emu/notify.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

// The request's command field (bits 56-58 of the stored value): mlx5's "next" and "solicited".
constexpr uint32_t kCmdShift = 24;  // in the high word
constexpr uint32_t kCmdMask = 7;
constexpr uint32_t kCmdNext = 0;
constexpr uint32_t kCmdSolicited = 1;

}  // namespace

void Engine::on_cq_doorbell(uint32_t ctx, uint64_t stored) {
  uint64_t v = __builtin_bswap64(stored);
  uint32_t high = static_cast<uint32_t>(v >> 32);
  uint32_t cqn = static_cast<uint32_t>(v) & 0xffffff;
  uint32_t cmd = high >> kCmdShift & kCmdMask;
  CqSlot* cq = cqn < table_end(h_->cq_dir) ? cq_at(h_, cqn) : nullptr;
  // A number that is no CQ of the page's context: a NIC checks the CQ's UAR and drops the write;
  // so for a command that is no arm request. (Nothing logged: this runs in the storing thread's
  // fault handler, where stdio may be held by the code it interrupted.)
  if (!cq || cq->state.load(std::memory_order_acquire) != kSlotLive || cq->ctx != ctx) return;
  if (cmd != kCmdNext && cmd != kCmdSolicited) return;
  EngineSection in_engine(seg_);
  cq->arm.store(cmd == kCmdSolicited ? kCqArmSolicited : kCqArmNext, std::memory_order_seq_cst);
  // Arm, then look (the producer: CQE, then arm), as for ibv_req_notify_cq.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // A completion beyond the index the request names fires at once, as hardware compares the armed
  // consumer index with its producer index (for "next"; a solicited request waits, as the
  // provider's ibv_req_notify_cq does).
  uint32_t ci = cq_index_near(high & 0xffffff, cq->pi.load(std::memory_order_acquire));
  if (cmd == kCmdNext && cqe_placed(*cq, ci) &&
      static_cast<int32_t>(cq->pi.load(std::memory_order_acquire) - ci) > 0 &&
      cq->arm.exchange(kCqArmNone) != kCqArmNone)
    notify_comp(*cq);
}

}  // namespace emu
