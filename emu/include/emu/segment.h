// SPDX-License-Identifier: BSD-2-Clause
// The per-process view of the shared segment: maps it, checks its layout version, registers this
// process, allocates rings, and owns the object tables' slot allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "emu/config.h"
#include "emu/layout.h"
#include "emu/status.h"

namespace emu {

struct HeapLeaks;  // shm/shm_heap.h

// What the heap audit found (Segment::audit_heap).
struct HeapAudit {
  bool done = false;  // false: a process was making an object, or one of our threads was
  bool reclaimed = false;
  uint64_t leaked_blocks = 0;
  uint64_t leaked_bytes = 0;
};

class Segment {
 public:
  // The process-wide segment, attached on first use. Returns nullptr (and logs why) on failure.
  static Segment* get();
  static const std::string& last_error();

  Header* hdr() const { return hdr_; }
  uint32_t self() const { return self_; }  // this process's ProcRecord index
  int pid() const { return pid_; }

  void* at(uint64_t off) const { return base_ + off; }
  template <class T>
  T* at(uint64_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }
  uint64_t offset_of(const void* p) const {
    return static_cast<uint64_t>(static_cast<const char*>(p) - base_);
  }

  // Zeroed shared memory; 0 on exhaustion, or when the tmpfs has no room for its pages (the
  // message, naming EMU_SHM_DIR and the size, is printed).
  uint64_t alloc(size_t bytes, size_t align = 64);
  void free(uint64_t off);

  // Takes the tmpfs pages of [off, off + len) of the segment before anything writes there: the
  // file is sparse, and a write to a page the tmpfs cannot supply is a SIGBUS. no_memory (and the
  // message printed) if there is no room.
  Status reserve(uint64_t off, uint64_t len);
  // Gives the whole pages inside a range nobody uses any more back to the tmpfs (reads as zeros).
  void release(uint64_t off, uint64_t len);

  // At exit (registered by get()): the last process of a fabric removes its segment file unless
  // the fabric is persistent or keeps XRC domains. A process that dies without it leaves the file
  // to the next attach of any fabric (emu/fabrics.h).
  void detach_at_exit();

  uint64_t new_uid() { return hdr_->next_uid.fetch_add(1, std::memory_order_relaxed); }

  // Object table slots (under the table lock). The returned slot is zeroed, marked live and owned
  // by this process; index is returned through *idx. Only the slot: objects with their rings and
  // fields are made by emu/objects.h, which calls these.
  Status alloc_ctx(uint32_t* idx);
  Status alloc_pd(uint32_t* idx);
  Status alloc_mr(uint32_t* idx);
  Status alloc_cq(uint32_t* idx);
  Status alloc_qp(uint32_t* idx);
  Status alloc_srq(uint32_t* idx);
  Status alloc_flow(uint32_t* idx);  // raw packet steering (emu/raw.h)
  Status alloc_rss(uint32_t* idx);

  // The live object a number from outside names (a key, a QPN off a doorbell or a wire), or
  // nullptr. Lock-free and O(1): the chunk's offset (acquire), then the slot. Inline: the engine
  // asks two of them per message.
  MrSlot* find_mr(uint32_t key) const {
    MrSlot* m = mr_at(hdr_, key >> 8);
    if (!m || m->state.load(std::memory_order_acquire) != kSlotLive || m->key != key)
      return nullptr;
    return m;
  }
  QpSlot* find_qp(uint32_t qpn) const {
    QpSlot* q = qp_at(hdr_, qpn & (kMaxQps - 1));
    if (!q || q->state.load(std::memory_order_acquire) != kSlotLive || q->qpn != qpn)
      return nullptr;
    return q;
  }
  SrqSlot* find_srq(uint32_t srqn) const {
    SrqSlot* s = srq_at(hdr_, srqn & (kMaxSrqs - 1));
    if (!s || s->state.load(std::memory_order_acquire) != kSlotLive || s->srqn != srqn)
      return nullptr;
    return s;
  }

  // Held (HeapUse) from a ring's allocation to the store that names it in its slot: until then
  // the heap audit cannot tell the block from a leaked one, so it waits (or passes) meanwhile.
  void heap_use_begin();
  void heap_use_end();
  // The heap audit: counts the heap blocks that no live or dying slot names and that are not free
  // (left by processes killed inside an allocation or a free), and gives them back if `reclaim`.
  // wait: for objects being made to be done; else an audit that would wait is not done.
  HeapAudit audit_heap(bool reclaim, bool wait);

  // Frees every object of processes that died without cleaning up, then gives back the heap
  // blocks leaked by deaths (audit_heap). Returns how many processes.
  int sweep_dead();
  bool proc_alive(uint32_t slot) const;

  // What closing a device context does in the kernel: every object made on it goes.
  void release_context_objects(uint32_t ctx);

  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

 private:
  Segment() = default;
  Status attach(const Config& cfg);
  // The segment file opened, linked, mapped and laid out, with its life lock held
  // (shm/segment_life.cpp).
  Status open_locked();
  Status open_existing(int fd, bool* retry);
  Status create(bool* retry);
  Status lay_out();
  Status register_self();
  Segment* rejoin_after_fork();
  void unmap_and_close();
  void init_devices(const Config& cfg);
  size_t release_proc_objects(uint32_t proc);
  template <class Owned>
  size_t release_objects(Owned owned, bool owner_dead);
  HeapLeaks audit_heap_blocks(const uint64_t* heads, size_t n, bool reclaim);

  int lock_fd_ = -1;  // the segment file: mapped, flocked by the allocator, OFD-locked for its life
  const Config* cfg_ = nullptr;
  std::string path_;
  uint64_t size_ = 0;
  bool attached_ = false;  // reservation failures are printed (before: the attach error says)
  char* base_ = nullptr;
  Header* hdr_ = nullptr;
  uint32_t self_ = 0;
  int pid_ = 0;
};

// A Segment::heap_use_begin/end pair over a scope.
class HeapUse {
 public:
  explicit HeapUse(Segment* seg) : seg_(seg) { seg_->heap_use_begin(); }
  ~HeapUse() { seg_->heap_use_end(); }
  HeapUse(const HeapUse&) = delete;
  HeapUse& operator=(const HeapUse&) = delete;

 private:
  Segment* seg_;
};

uint64_t proc_start_time(int pid);
bool pid_matches(int pid, uint64_t start_time);

}  // namespace emu
