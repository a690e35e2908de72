// SPDX-License-Identifier: BSD-2-Clause
// Receive staging (docs/design/registered-memory.md, "Staging of two-sided payloads"): a payload
// for a receiver in another process goes into its receive CQ's staging area, in the segment, with a
// memcpy when the sender is this process; the receiver's poll moves it into the buffers of the
// receive WQE it consumed. A NIC does the same thing: the bytes land in its memory first.
#include <cstring>

#include "device/engine.h"

namespace emu {

using engine_detail::Sges;

Engine::Staged Engine::stage_payload(CqSlot& cq, const void* prefix, uint32_t prefix_len,
                                     int src_pid, const Sges& src, CqeInfo* rc) {
  // A CQ read from memory by code written for mlx5: nobody there would move the payload.
  if (cq.format & kCqFormatMlx5) return Staged::not_staged;
  uint64_t off = cq.staging_off.load(std::memory_order_acquire);
  if (!off) {
    rc->emu_flags |= kCqeFlagWantStaging;  // the owner's next poll of it makes the area
    return Staged::not_staged;
  }
  auto* area = seg_->at<StagingArea>(off);
  uint64_t len = prefix_len + src.total;
  if (len > kStagingMaxPayload || !staging_take(area, len, &rc->staged_ref))
    return Staged::not_staged;  // never wait for the poller: direct placement instead
  uint8_t* to = staging_data(area, rc->staged_ref);
  if (prefix_len) std::memcpy(to, prefix, prefix_len);
  MemSpan dst{reinterpret_cast<uint64_t>(to + prefix_len), src.total};
  if (src.total && dma_copy(src_pid, src.span, src.n, 0, &dst, 1) != CopyResult::ok) {
    staging_release(area, rc->staged_ref);
    return Staged::src_fault;
  }
  rc->staged = true;
  rc->emu_flags |= kCqeFlagStaged;
  return Staged::staged;
}

// A staged CQE the CQ did not take (overrun, CQ in error): its slots are free again.
void Engine::release_staged(CqSlot& cq, const CqeInfo& info) {
  if (uint64_t off = cq.staging_off.load(std::memory_order_acquire))
    staging_release(seg_->at<StagingArea>(off), info.staged_ref);
}

}  // namespace emu
