// A run of plain RDMA WRITEs executed with one DMA call. A device thread that falls behind a fast
// poster finds many WQEs at once; copying them one system call each would cap the message rate at
// the system-call rate. Everything that is not a plain, valid write goes the one-at-a-time way,
// which also reports its errors.
#include <cstring>

#include "device/engine.h"
#include "device/engine_internal.h"
#include "shm/shared_map.h"

namespace emu {
using namespace engine_detail;

uint32_t Engine::run_write_batch(QpSlot& qp, uint32_t producer) {
  constexpr uint32_t kBatch = 64;
  uint32_t pending = (producer - qp.sq_ci) & 0xffff;
  if (pending < 2) return 0;
  // A WQE delivered by BlueFlame is executed from its copy, one at a time: the run stops before it.
  if (stash_pending(qp.bf_stash)) {
    uint32_t stash = qp.bf_stash.index.load(std::memory_order_relaxed);
    uint32_t before = ((stash & 0xffff) - qp.sq_ci) & 0xffff;
    if (before < pending) pending = before;
    if (pending < 2) return 0;
  }
  // Inline data sits in our copy of the WQE and SGEs in the requester's memory: one source address
  // space only when the requester is this process.
  if (h_->procs[qp.owner].pid != seg_->pid()) return 0;
  QpSlot* r = connected_responder(seg_, qp);
  if (!r) return 0;

  struct Item {
    uint32_t bbs;
    uint32_t len;
    uint16_t idx;
    bool signaled;
  };
  static thread_local uint8_t wqes[kBatch][kMaxWqeBBs * kSendWqeBB];
  static thread_local MemSpan local[kBatch * 4];
  static thread_local MemSpan remote[kBatch];
  Item items[kBatch];
  uint32_t n = 0, nl = 0, nr = 0, pos = qp.sq_ci, consumed = 0;
  bool windows = false;
  while (n < kBatch && consumed < pending) {
    uint8_t* w = wqes[n];
    uint32_t bbs;
    if (fetch_wqe_at(qp, pos, w, &bbs) != Fetch::ok) break;
    auto* ctrl = reinterpret_cast<const CtrlSeg*>(w);
    if ((be32(ctrl->opmod_idx_opcode) & 0xff) != kOpRdmaWrite) break;
    const uint8_t* p = w + sizeof(CtrlSeg);
    const uint8_t* end = w + (be32(ctrl->qpn_ds) & 0x3f) * 16;
    if (p + sizeof(RaddrSeg) > end) break;
    RaddrSeg ra;
    std::memcpy(&ra, p, sizeof ra);
    p += sizeof ra;
    uint32_t first = nl;
    uint64_t total = 0;
    bool ok = true;
    while (ok && p + 4 <= end) {
      uint32_t bc;
      std::memcpy(&bc, p, 4);
      bc = be32(bc);
      if (nl == kBatch * 4) {
        ok = false;
      } else if (bc & kInlineSegFlag) {
        uint32_t len = bc & ~kInlineSegFlag;
        if (p + 4 + len > end) ok = false;
        else local[nl++] = {reinterpret_cast<uint64_t>(p + 4), len};
        total += len;
        p += (4 + len + 15) & ~15u;
      } else if (p + sizeof(DataSeg) <= end) {
        DataSeg d;
        std::memcpy(&d, p, sizeof d);
        p += sizeof d;
        uint64_t len = be32(d.byte_count) ? be32(d.byte_count) : kMaxMsgSize;
        uint64_t va;
        ok = translate_local(seg_, qp, be32(d.lkey), be64(d.addr), len, false, &va);
        if (ok) local[nl++] = {va, len};
        total += len;
      } else {
        break;
      }
    }
    uint64_t rva = 0;
    const MrSlot* rmr = nullptr;
    if (ok && total > kMaxMsgSize) ok = false;
    if (ok && total && !translate_remote(seg_, *r, be32(ra.rkey), be64(ra.raddr), total,
                                         kAccessRemoteWrite, &rva, &rmr))
      ok = false;
    // One copy call takes one address space: all through shared mappings, or none.
    if (ok && total) {
      uint64_t w = shared_window(seg_, *rmr, rva, total);
      if (nr == 0) windows = w != 0;
      if ((w != 0) != windows) ok = false;
      if (w) rva = w;
    }
    if (!ok) {
      nl = first;  // this one goes the one-at-a-time way
      break;
    }
    if (total) remote[nr++] = {rva, total};
    items[n++] = {bbs, static_cast<uint32_t>(total), static_cast<uint16_t>(pos & 0xffff),
                  (ctrl->fm_ce_se & kCtrlCqUpdate) != 0};
    pos += bbs;
    consumed += bbs;
  }
  if (n < 2) return 0;
  // A failed copy is redone one WQE at a time, which reports it (rewriting the same bytes is
  // harmless for a write).
  if (windows && !peer_still_there(qp, *r)) return 0;
  if (dma_copy(0, local, static_cast<int>(nl), windows ? 0 : h_->procs[r->owner].pid, remote,
               static_cast<int>(nr)) != CopyResult::ok)
    return 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t npk = packets(items[i].len, qp.path_mtu);
    qp.sq_psn = (qp.sq_psn + npk) & 0xffffff;
    r->rq_psn = (r->rq_psn + npk) & 0xffffff;
    if (items[i].signaled) {
      CqeInfo info{};
      info.cqe_opcode = kCqeReq;
      info.wqe_opcode = kOpRdmaWrite;
      info.wqe_counter = items[i].idx;
      info.qpn = qp.qpn;
      info.byte_cnt = items[i].len;
      write_cqe(h_->cqs[qp.send_cq], info);
    }
    qp.sq_ci += items[i].bbs;
  }
  return n;
}

}  // namespace emu
