// SPDX-License-Identifier: BSD-2-Clause
// What arrived, against what was sent. A message names itself in its header; a buffer whose header
// names a message that was posted and has the length that message has is compared with that
// message, otherwise with the message expected there (an RDMA WRITE slot's owner). A SEND buffer
// whose header names nothing plausible counts every byte received as corrupt: nothing says which
// message it was meant to be.
#include <algorithm>
#include <atomic>

#include "run.h"

namespace stress {

bool Run::plausible(const MessageHeader& h) const {
  return h.thread < o_.threads && h.seq < posted_upto_[h.thread].load(std::memory_order_acquire) &&
         h.length == size_for(h.seq);
}

Run::Check Run::check(const uint8_t* p, uint32_t n, const MessageId* expected) const {
  Check c;
  MessageId ref{};
  bool have = false;
  if (n >= kMinMessage) {
    MessageHeader h = read_header(p);
    if (plausible(h)) {
      ref = MessageId{h.thread, h.seq};
      c.named_valid = have = true;
      c.named = ref;
    }
  }
  if (!have && expected) {
    ref = *expected;
    have = true;
  }
  if (!have) {
    c.corrupt = true;
    c.bytes = n;
    return c;
  }
  uint32_t len = size_for(ref.seq);
  uint32_t common = std::min(n, len);
  c.bytes = count_differing(p, common, ref, len) + (std::max(n, len) - common);
  c.misplaced = expected && c.named_valid &&
                (c.named.thread != expected->thread || c.named.seq != expected->seq);
  c.corrupt = c.bytes != 0 || c.misplaced;
  return c;
}

void Run::note_corrupt(const Check& c, std::atomic<uint64_t>& where) {
  c_.corrupt_messages.fetch_add(1, std::memory_order_relaxed);
  c_.corrupt_bytes.fetch_add(c.bytes, std::memory_order_relaxed);
  if (c.misplaced) c_.misplaced.fetch_add(1, std::memory_order_relaxed);
  where.fetch_add(1, std::memory_order_relaxed);
}

// At the message's first successful completion: its slot must hold it now. A slot already given
// to a later message (--duration-ms reuse) cannot tell.
void Run::verify_write(MessageId id, const MsgRecord& r) {
  Lane& l = lanes_[r.lane];
  if (std::atomic_ref<uint32_t>(l.owner[r.slot]).load(std::memory_order_acquire) != id.seq + 1) {
    c_.unverifiable.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint8_t* p = target_ + l.target_off + size_t(r.slot) * slot_bytes_;
  Check chk = check(p, size_for(id.seq), &id);
  c_.verified.fetch_add(1, std::memory_order_relaxed);
  if (chk.corrupt) note_corrupt(chk, c_.found_at_completion);
}

// After the drain: slots whose message never completed. Untouched (zero, or still the lane's
// earlier message intact) means it never arrived, which the missing count already says; the
// message itself intact means it arrived without a completion; anything else is corruption no
// completion pointed at (a torn WQE that wrote where another message's slot is).
void Run::sweep() {
  if (o_.op != uctlite::Op::write) return;
  for (Lane& l : lanes_) {
    for (uint32_t s = 0; s < l.slots; ++s) {
      uint32_t owner = l.owner[s];
      if (!owner) continue;
      const MsgRecord& r = records_[l.thread].get()[owner - 1];
      if (r.unposted || r.settled) continue;
      MessageId id{l.thread, owner - 1};
      const uint8_t* p = target_ + l.target_off + size_t(s) * slot_bytes_;
      uint32_t len = size_for(id.seq);
      if (std::all_of(p, p + len, [](uint8_t b) { return b == 0; })) continue;
      Check chk = check(p, len, &id);
      if (!chk.corrupt) {
        c_.delivered_without_completion.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      bool older_intact =
          chk.misplaced && chk.bytes == 0 && chk.named.thread == l.thread && chk.named.seq < id.seq;
      if (!older_intact) note_corrupt(chk, c_.found_in_sweep);
    }
  }
}

}  // namespace stress
