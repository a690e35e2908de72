// SPDX-License-Identifier: BSD-2-Clause
// The heap audit (docs/design/reliability.md, "Process death"): every block of the segment's heap
// is free, or is (inside) a block some object names; what is neither was leaked by a process killed
// inside an allocation or a free, or by a sweeper killed while it released a dead process's
// rings, and is given back.
#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "emu/segment.h"
#include "shm/segment_file.h"
#include "shm/shm_heap.h"

namespace emu {
namespace {

constexpr uint64_t kPageBytes = 4096;

// This process's threads with heap blocks not yet named by a slot; the first takes the file's
// heap-use read lock, the last drops it (an OFD lock belongs to the open file, not the thread).
std::mutex g_use_mu;
int g_users = 0;

// Every heap offset a slot names, live or dying (a dying slot's rings may not be freed yet).
std::vector<uint64_t> named_blocks(const Header& h) {
  std::vector<uint64_t> heads;
  auto add = [&](uint64_t off) {
    if (off) heads.push_back(off);
  };
  auto used = [](const auto& slot) { return slot.state.load() != kSlotFree; };
  // The tables' chunks themselves (a directory entry without the count behind it included: the
  // next allocation of that table uses it).
  auto chunks = [&](const auto& dir) {
    for (const auto& c : dir.chunk) add(c.load());
  };
  chunks(h.pd_dir);
  chunks(h.mr_dir);
  chunks(h.cq_dir);
  chunks(h.qp_dir);
  chunks(h.srq_dir);
  each_qp(&h, [&](const QpSlot& q) {
    if (!used(q)) return;
    add(q.sq_off);
    add(q.rq_off);
    add(q.dbrec_off);
    add(q.wrec_off);
  });
  each_srq(&h, [&](const SrqSlot& s) {
    if (!used(s)) return;
    add(s.buf_off);
    add(s.dbrec_off);
    add(s.tm_off);
  });
  each_cq(&h, [&](const CqSlot& c) {
    if (!used(c)) return;
    add(c.buf_off);
    add(cq_ring_off(c.ring.load()));  // a resize's new ring, published before buf_off
    add(c.staging_off.load());
  });
  for (const ContextSlot& c : h.ctxs)
    if (used(c)) add(c.uar_off);
  return heads;
}

bool heap_use_lock(int fd, short type, bool wait) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 1;  // byte 0 is the life lock
  fl.l_len = 1;
  int r;
  while ((r = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) != 0 && errno == EINTR) {
  }
  return r == 0;
}

}  // namespace

// fork(): segment.cpp's handlers call these around the allocator's mutex, in the order an audit
// takes the two (heap use, then allocator), so that a fork never waits the other way round.
void heap_use_fork_prepare() { g_use_mu.lock(); }
void heap_use_fork_parent() { g_use_mu.unlock(); }
void heap_use_fork_child() {
  g_users = 0;  // the child's threads are not the parent's; its record and file are its own
  g_use_mu.unlock();
}

HeapLeaks ShmHeap::audit(const uint64_t* heads, size_t n, bool reclaim) {
  const uint64_t blocks = grown();  // beyond it nothing was ever handed out
  std::vector<uint8_t> known(blocks, 0);
  auto mark = [&](uint64_t first, uint64_t count) {
    for (uint64_t b = first; b < first + count && b < blocks; ++b) known[b] = 1;
  };
  for (uint32_t k = 0; k <= h_->max_order; ++k)
    for (uint64_t i = 0; i < blocks_at(k); ++i)
      if (test(k, i)) mark(i << k, 1ull << k);
  const uint8_t* order_bytes = reinterpret_cast<const uint8_t*>(base_ + h_->order_off);
  for (size_t j = 0; j < n; ++j) {
    if (heads[j] < h_->heap_off) continue;
    uint64_t b = (heads[j] - h_->heap_off) / kHeapMinBlock;
    // Order byte 0: a free begun by a process that died (the block is leaked, as the comment of
    // ShmHeap::free says), or a block freed while its dying slot still names it.
    if (b < blocks && order_bytes[b]) mark(b, 1ull << (order_bytes[b] - 1));
  }
  HeapLeaks leaks;
  for (uint64_t b = 0; b < blocks;) {
    if (known[b]) {
      ++b;
      continue;
    }
    // The largest aligned block from b that is all unknown: a whole leaked block, or buddies that
    // are all leaked (giving them back as one is what freeing each and merging would do).
    uint32_t k = 0;
    while (k < h_->max_order && (b & ((2ull << k) - 1)) == 0 && b + (2ull << k) <= blocks) {
      bool all = true;
      for (uint64_t x = b + (1ull << k); x < b + (2ull << k) && all; ++x) all = !known[x];
      if (!all) break;
      ++k;
    }
    ++leaks.blocks;
    leaks.bytes += kHeapMinBlock << k;
    if (reclaim) {
      uint64_t off = h_->heap_off + b * kHeapMinBlock, bytes = kHeapMinBlock << k;
      std::memset(const_cast<uint8_t*>(order_bytes) + b, 0, 1ull << k);
      if (backing_ && bytes >= kPageBytes) backing_->release(off, bytes);
      give_back(k, b >> k);
    }
    b += 1ull << k;
  }
  return leaks;
}

void Segment::heap_use_begin() {
  std::lock_guard<std::mutex> g(g_use_mu);
  if (g_users++ == 0) heap_use_lock(lock_fd_, F_RDLCK, true);
}

void Segment::heap_use_end() {
  std::lock_guard<std::mutex> g(g_use_mu);
  if (--g_users == 0) heap_use_lock(lock_fd_, F_UNLCK, false);
}

HeapAudit Segment::audit_heap(bool reclaim, bool wait) {
  HeapAudit out;
  // No thread of ours, and no other process, between an allocation and the store naming it.
  std::lock_guard<std::mutex> g(g_use_mu);
  if (g_users != 0 || !heap_use_lock(lock_fd_, F_WRLCK, wait)) return out;
  std::vector<uint64_t> heads = named_blocks(*hdr_);
  HeapLeaks leaks = audit_heap_blocks(heads.data(), heads.size(), reclaim);
  heap_use_lock(lock_fd_, F_UNLCK, false);
  out.done = true;
  out.leaked_blocks = leaks.blocks;
  out.leaked_bytes = leaks.bytes;
  out.reclaimed = reclaim;
  return out;
}

}  // namespace emu
