// SPDX-License-Identifier: BSD-2-Clause
#include "emu/segment.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

#include "emu/kill_point.h"
#include "emu/objects.h"
#include "emu/raw.h"
#include "emu/reclaim.h"
#include "emu/wqe.h"
#include "emu/xrc.h"
#include "ports/port_setup.h"
#include "shm/segment_file.h"
#include "shm/shm_heap.h"

namespace emu {

// audit/heap_audit.cpp: its mutex at fork, taken by this file's handlers in the audit's order.
void heap_use_fork_prepare();
void heap_use_fork_parent();
void heap_use_fork_child();

namespace {

Segment* g_segment = nullptr;
std::atomic<Segment*> g_segment_ready{nullptr};  // g_segment, once attached
std::atomic<Header*> g_header{nullptr};
std::once_flag g_once;
// A child made by fork() that used the segment before is not its parent: Segment::get() gives it a
// process record of its own on its first call (docs/design/verbs-provider.md, "Fork").
std::atomic<bool> g_rejoining{false};

// The allocator's lock (shm/shm_heap.h). Between processes: flock on the segment file, which the
// kernel drops if the holder dies (and the heap is left with at most a leaked block). Between this
// process's threads: a mutex (flock is per open file, which the threads share).
std::mutex g_alloc_mu;

class AllocLock {
 public:
  explicit AllocLock(int fd) : fd_(fd), g_(g_alloc_mu) {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~AllocLock() { flock(fd_, LOCK_UN); }

 private:
  int fd_;
  std::lock_guard<std::mutex> g_;
};

// fork(): no other thread may hold the allocator's mutex in the child's copy, and the child is
// not its parent's process record (Segment::get() registers it anew).
// The heap-use mutex (audit/heap_audit.cpp) is taken first, as Segment::audit_heap takes them.
void fork_prepare() {
  heap_use_fork_prepare();
  g_alloc_mu.lock();
}
void fork_parent() {
  g_alloc_mu.unlock();
  heap_use_fork_parent();
}
void fork_child() {
  g_alloc_mu.unlock();
  heap_use_fork_child();
  forget_engine_slot();
  if (g_segment) g_segment_ready.store(nullptr, std::memory_order_release);
}

// Claims a free slot: zeroed (but for its state), ours, then live. init: fields other processes
// may read as soon as the slot is live, set before it is. Under the table lock.
template <class SlotT, class Init>
void claim_slot(SlotT& s, uint32_t self, Init init) {
  // Keep the generation-bearing fields' memory; callers set every field they use.
  std::memset(reinterpret_cast<char*>(&s) + sizeof(s.state), 0, sizeof(SlotT) - sizeof(s.state));
  s.owner = self;
  init(s);
  s.state.store(kSlotLive, std::memory_order_release);
  EMU_KILL_POINT(KillPoint::slot_create);  // live and ours, table lock held
}

// A slot of a fixed table in the header (contexts, raw packet steering).
template <class SlotT, size_t N, class Init = void (*)(SlotT&)>
Status alloc_slot(
    Header* h, uint32_t self, SlotT (&table)[N], uint32_t* idx, Init init = [](SlotT&) {}) {
  ShmLockGuard g(h->table_lock, self);
  for (uint32_t i = 0; i < N; ++i) {
    if (table[i].state.load(std::memory_order_relaxed) == kSlotFree) {
      claim_slot(table[i], self, init);
      *idx = i;
      return Status::ok;
    }
  }
  return Status::no_memory;
}

// How far a search for a free slot goes before the table grows by a chunk instead: a create costs
// the same however many objects live. Only a table at its limit is searched whole.
constexpr uint32_t kSearchSpan = 2 * kChunkSlots;

// A slot of a chunked table (SlotDir), found by a next-fit search from where the last one was
// handed out (a freed slot is reused late, which also keeps a stale number stale for long).
// at(h, i): slot i. first: the lowest index handed out. chunk_bytes: the size of one chunk.
template <class SlotT, class Dir, class Init = void (*)(SlotT&)>
Status alloc_table_slot(
    Segment* seg, Dir& d, SlotT* (*at)(const Header*, uint32_t), size_t chunk_bytes, uint32_t* idx,
    Init init = [](SlotT&) {}, uint32_t first = 0) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->table_lock, seg->self());
  auto claim = [&](uint32_t i) {
    SlotT* s = at(h, i);
    if (s->state.load(std::memory_order_relaxed) != kSlotFree) return false;
    claim_slot(*s, seg->self(), init);
    d.next = i + 1;
    *idx = i;
    return true;
  };
  auto search = [&](uint32_t from, uint32_t span) {
    uint32_t end = table_end(d);
    if (end <= first) return false;
    uint32_t i = from < first || from >= end ? first : from;
    for (uint32_t n = 0; n < span && n < end - first; ++n) {
      if (claim(i)) return true;
      if (++i == end) i = first;
    }
    return false;
  };
  if (search(d.next, kSearchSpan)) return Status::ok;
  uint32_t c = d.chunks.load(std::memory_order_relaxed);
  if (c == Dir::kMax / kChunkSlots)
    return search(d.next, Dir::kMax) ? Status::ok : Status::no_memory;
  // A chunk whose allocator died between the directory entry and the count is used as it is.
  if (!d.chunk[c].load(std::memory_order_relaxed)) {
    HeapUse use(seg);  // the audit would take the block for leaked until the directory names it
    uint64_t off = seg->alloc(chunk_bytes, 4096);  // zeroed: every slot free
    if (!off) return Status::no_memory;
    d.chunk[c].store(off, std::memory_order_release);
  }
  d.chunks.store(c + 1, std::memory_order_release);
  return claim(std::max(first, c * kChunkSlots)) ? Status::ok : Status::no_memory;
}

// Whether a context or PD slot (live or dying) is still the process's: the two small tables.
bool owns_context_or_pd(const Header* h, uint32_t proc) {
  for (const auto& c : h->ctxs)
    if (c.state.load() != kSlotFree && c.owner == proc) return true;
  bool pd = false;
  each_pd(h, [&](const PdSlot& p) { pd |= p.state.load() != kSlotFree && p.owner == proc; });
  return pd;
}

template <class SlotT>
bool is_tgt_qp(const SlotT& slot) {
  // Attached to a domain (tgt_qp_attach): its handles decide. Before that it is its creator's,
  // whose death between the two must not leave it behind.
  if constexpr (std::is_same_v<SlotT, QpSlot>)
    return slot.type == kQptXrcRecv && slot.xrcd_ref != 0;
  else
    return false;
}

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::invalid:
      return "invalid";
    case Status::no_memory:
      return "no memory";
    case Status::busy:
      return "busy";
    case Status::not_found:
      return "not found";
    case Status::not_supported:
      return "not supported";
    case Status::layout_mismatch:
      return "layout mismatch";
    case Status::io:
      return "i/o error";
  }
  return "?";
}

// Fields 3 (state) and 22 (start time) of /proc/<pid>/stat; false if the process is gone.
bool proc_stat(int pid, char* state, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Field 2 (comm) may contain spaces: count fields after its closing parenthesis.
  char* p = std::strrchr(buf, ')');
  if (!p) return false;
  int field = 2;
  *state = '?';
  *start_time = 0;
  for (char* tok = std::strtok(p + 1, " "); tok; tok = std::strtok(nullptr, " ")) {
    ++field;
    if (field == 3) *state = tok[0];
    if (field == 22) {
      *start_time = std::strtoull(tok, nullptr, 10);
      break;
    }
  }
  return true;
}

uint64_t proc_start_time(int pid) {
  char state;
  uint64_t start = 0;
  return proc_stat(pid, &state, &start) ? start : 0;
}

// A killed process that its parent has not reaped yet (a zombie) has already lost its memory and
// its locks' critical sections: it counts as dead, or a lock it held would never be taken over
// while the parent waits on something else (a test harness waiting for the survivor first).
bool pid_matches(int pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state;
  uint64_t start;
  if (!proc_stat(pid, &state, &start)) return false;
  return state != 'Z' && state != 'X' && start == start_time;
}

// A lock holder's liveness. Called from ShmLock while attach() may still be running inside
// Segment::get()'s call_once, so it must not go through Segment::get(): it reads the header the
// attach set up. Owners >= kMaxProcs are processes still attaching, named by pid.
bool proc_slot_alive(uint32_t slot) {
  if (slot >= kMaxProcs) {
    int pid = static_cast<int>(slot - kMaxProcs);
    return pid > 0 && !(kill(pid, 0) != 0 && errno == ESRCH);
  }
  Header* h = g_header.load(std::memory_order_acquire);
  if (!h) return true;
  const ProcRecord& r = h->procs[slot];
  if (r.state.load(std::memory_order_acquire) != kProcAlive) return false;
  if (r.pid == getpid()) return true;
  return pid_matches(r.pid, r.start_time);
}

Segment* Segment::get() {
  // Called on the post path: once attached, one load (call_once costs a TLS lookup per call in a
  // shared library).
  if (Segment* s = g_segment_ready.load(std::memory_order_acquire)) return s;
  if (g_segment) return g_segment->rejoin_after_fork();
  std::call_once(g_once, [] {
    if (knobs_refused()) return;  // a malformed knob (said on stderr): no attach on defaults
    auto* s = new Segment();
    Status st = s->attach(config());
    if (st != Status::ok) {
      std::fprintf(stderr, "rdmaemu: %s\n", attach_error().c_str());
      delete s;
      return;
    }
    g_segment = s;
    g_segment_ready.store(s, std::memory_order_release);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    std::atexit([] { g_segment->detach_at_exit(); });
  });
  return g_segment;
}

// The first call in a child of fork(): a process record of its own, so that what it creates is
// its own (DMA to it reaches it, not the parent) and its death releases only that. The parent's
// objects keep the parent's record. Threads of the child that race here wait for the first.
Segment* Segment::rejoin_after_fork() {
  bool expected = false;
  if (!g_rejoining.compare_exchange_strong(expected, true)) {
    while (!g_segment_ready.load(std::memory_order_acquire)) sched_yield();
    return this;
  }
  pid_ = getpid();
  // The life lock is a flock, which a forked child shares with its parent through the inherited
  // descriptor: the child takes its own description so that the two exclude each other.
  int fd = open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    close(lock_fd_);
    lock_fd_ = fd;
  }
  Status st = register_self();
  // A child of fork() is not covered by its parent's ptrace permission (see attach).
  if (st == Status::ok) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  g_rejoining.store(false);
  if (st != Status::ok) {
    std::fprintf(stderr, "rdmaemu: %s\n", attach_error().c_str());
    return nullptr;
  }
  g_segment_ready.store(this, std::memory_order_release);
  return this;
}

const std::string& Segment::last_error() { return attach_error(); }

// Built on first use and never destroyed: an attach may run in a constructor before this file's
// globals are initialized, and the text is read at exit (docs/design/verbs-provider.md, "Exit").
std::string& attach_error() {
  static auto* text = new std::string;
  return *text;
}
void publish_header(Header* h) { g_header.store(h, std::memory_order_release); }

void Segment::init_devices(const Config& cfg) {
  hdr_->num_devices = cfg.num_devices;
  for (uint32_t d = 0; d < cfg.num_devices; ++d) {
    DeviceState& dev = hdr_->devices[d];
    std::snprintf(dev.name, sizeof dev.name, "emu%u", d);
    dev.node_guid = 0x0002c90300000000ull | (uint64_t(d + 1) << 8);
    dev.num_ports = cfg.ports_per_dev;
    init_device_ports(cfg, d, &dev);
  }
}

uint64_t Segment::alloc(size_t bytes, size_t align) {
  AllocLock lock(lock_fd_);
  SegmentBacking backing(this);
  return ShmHeap(base_, &hdr_->heap, &backing).alloc(bytes, align);  // zeroed
}

void Segment::free(uint64_t off) {
  if (!off) return;
  AllocLock lock(lock_fd_);
  SegmentBacking backing(this);
  ShmHeap(base_, &hdr_->heap, &backing).free(off);
}

HeapLeaks Segment::audit_heap_blocks(const uint64_t* heads, size_t n, bool reclaim) {
  AllocLock lock(lock_fd_);
  SegmentBacking backing(this);
  return ShmHeap(base_, &hdr_->heap, &backing).audit(heads, n, reclaim);
}

void Segment::release(uint64_t off, uint64_t len) { release_pages(lock_fd_, off, len); }

Status Segment::alloc_ctx(uint32_t* idx) {
  // No pipe until the opener publishes one: a port event from another process skips the context
  // meanwhile rather than write into whatever the owner's fd 0 is.
  return alloc_slot(hdr_, self_, hdr_->ctxs, idx, [](ContextSlot& c) { c.async_wfd = -1; });
}
Status Segment::alloc_pd(uint32_t* idx) {
  return alloc_table_slot(this, hdr_->pd_dir, pd_at, kChunkSlots * sizeof(PdSlot), idx);
}
Status Segment::alloc_mr(uint32_t* idx) {
  Status st = alloc_table_slot(this, hdr_->mr_dir, mr_at, kChunkSlots * sizeof(MrSlot), idx);
  if (st == Status::ok) {
    uint32_t key;
    do {  // 0x100 ends a receive scatter list (as mlx5 reserves it): never a key
      key = (*idx << 8) | (hdr_->generation.fetch_add(1, std::memory_order_relaxed) & 0xff);
    } while (key == kInvalidLkey);
    mr_slot(hdr_, *idx).key = key;
  }
  return st;
}
Status Segment::alloc_cq(uint32_t* idx) {
  Status st = alloc_table_slot(this, hdr_->cq_dir, cq_at, kChunkSlots * sizeof(CqSlot), idx);
  if (st == Status::ok) cq_slot(hdr_, *idx).index = *idx;
  return st;
}
Status Segment::alloc_flow(uint32_t* idx) { return alloc_slot(hdr_, self_, hdr_->raw.flows, idx); }
Status Segment::alloc_rss(uint32_t* idx) { return alloc_slot(hdr_, self_, hdr_->raw.rss, idx); }
Status Segment::alloc_qp(uint32_t* idx) {
  // Slots 0 and 1 stay unused, as QP0 and QP1 (the special QPs) are on hardware: max_qp is the
  // table less those two.
  Status st = alloc_table_slot(
      this, hdr_->qp_dir, qp_at, sizeof(QpChunk), idx, [](QpSlot&) {}, 2);
  if (st == Status::ok) {
    // QPN: table index in the low bits, a generation above so a stale number finds nothing.
    // 0 and 1 are the special QPs.
    constexpr uint32_t kGenerations = (1u << (24 - kQpIndexBits)) - 1;
    uint32_t gen = (hdr_->generation.fetch_add(1, std::memory_order_relaxed) % kGenerations) + 1;
    qp_slot(hdr_, *idx).qpn = (gen << kQpIndexBits) | *idx;
  }
  return st;
}

Status Segment::alloc_srq(uint32_t* idx) {
  Status st = alloc_table_slot(this, hdr_->srq_dir, srq_at, kChunkSlots * sizeof(SrqSlot), idx);
  if (st == Status::ok) {
    constexpr uint32_t kGenerations = (1u << (24 - kSrqIndexBits)) - 1;
    uint32_t gen = (hdr_->generation.fetch_add(1, std::memory_order_relaxed) % kGenerations) + 1;
    srq_slot(hdr_, *idx).srqn = (gen << kSrqIndexBits) | *idx;
  }
  return st;
}

bool Segment::proc_alive(uint32_t slot) const { return proc_slot_alive(slot); }

// Retires every object `owned` selects: dying first (unfindable), then, once no engine can be
// inside any of them, rings freed and slots free. Returns how many it marked dying.
template <class Owned>
size_t Segment::release_objects(Owned owned, bool owner_dead) {
  // Only what this call marks dying has its rings freed here. A slot already dying belongs to a
  // destroy that its (now dead) owner had begun and may have half done: its rings are left alone
  // (a leak, not a double free), and the slot is freed.
  std::vector<void*> mine;
  auto dying = [&](auto& slot) {
    uint32_t live = kSlotLive;
    if (owned(slot) && slot.state.compare_exchange_strong(live, kSlotDying)) mine.push_back(&slot);
  };
  each_qp(hdr_, dying);
  each_srq(hdr_, dying);
  each_cq(hdr_, dying);
  each_mr(hdr_, dying);
  each_pd(hdr_, dying);
  for (auto& c : hdr_->ctxs) dying(c);
  std::sort(mine.begin(), mine.end());
  auto marked = [&](const void* slot) {
    return std::binary_search(mine.begin(), mine.end(), slot);
  };
  wait_for_engines(this);
  // A slot's rings are listed once, by its kind: free_rings (emu/objects.h).
  auto retire = [&](auto& slot) {
    if (slot.state.load() != kSlotDying || !owned(slot)) return;
    if (marked(&slot))
      free_rings(this, slot);
    else if (!owner_dead)
      return;  // a live thread of ours is destroying it: its to finish
    slot.state.store(kSlotFree);
  };
  each_qp(hdr_, retire);
  // An XRC SRQ leaves its domain also when its dead owner's destroy had begun (marked dying by
  // that destroy, not by us): its reference would otherwise keep the domain forever.
  each_srq(hdr_, [&](SrqSlot& s) {
    if (s.state.load() == kSlotDying && owned(s) && (marked(&s) || owner_dead))
      xrc_srq_drop(this, s);
  });
  each_srq(hdr_, retire);
  each_cq(hdr_, retire);
  each_mr(hdr_, retire);
  each_pd(hdr_, retire);
  for (auto& c : hdr_->ctxs) retire(c);
  return mine.size();
}

size_t Segment::release_proc_objects(uint32_t proc) {
  // Locks the dead process held (it may have died inside the engine) are free again, and its
  // engine sections closed. A send queue of its own that it died running goes to ERR first, as
  // the engine's take-over does (Engine::stop_if_owner_died): its head WQE may have been delivered
  // and not completed, and a runner that takes the freed lock before this sweep marks the QP dying
  // would run that head again (delivered twice). (A TGT QP has no send queue, and outlives its
  // creator by the XRC rules.)
  each_qp(hdr_, [proc](QpSlot& q) {
    uint32_t word = proc + 1;
    if (q.owner == proc && !is_tgt_qp(q) && q.sq_engine.word.load() == word)
      q.qp_state.store(kQpsErr, std::memory_order_release);
    q.sq_engine.word.compare_exchange_strong(word, 0);
    word = proc + 1;
    q.rq_lock.word.compare_exchange_strong(word, 0);
  });
  each_srq(hdr_, [proc](SrqSlot& s) {
    uint32_t word = proc + 1;
    s.lock.word.compare_exchange_strong(word, 0);
  });
  uint32_t word = proc + 1;
  hdr_->atomic_lock.word.compare_exchange_strong(word, 0);
  reset_engine_slots(this, proc);
  // XRC references first (a TGT QP is not its creator's: its handles decide, emu/xrc/xrc.cpp).
  xrc_release_proc(this, proc);
  raw_release_proc(this, proc);
  return release_objects(
      [proc](const auto& slot) { return slot.owner == proc && !is_tgt_qp(slot); }, true);
}

void Segment::release_context_objects(uint32_t ctx) {
  Header* h = hdr_;
  uint32_t self = self_;
  xrc_release_ctx(this, ctx);
  release_objects(
      [h, ctx, self](const auto& slot) {
        using T = std::decay_t<decltype(slot)>;
        if (slot.owner != self || is_tgt_qp(slot)) return false;
        if constexpr (std::is_same_v<T, MrSlot>)
          return pd_slot(h, slot.pd).ctx == ctx;
        else if constexpr (std::is_same_v<T, ContextSlot>)
          return &slot == &h->ctxs[ctx];
        else
          return slot.ctx == ctx;
      },
      false);
}

int Segment::sweep_dead() {
  int n = 0;
  bool audit = false;
  for (uint32_t i = 0; i < kMaxProcs; ++i) {
    ProcRecord& r = hdr_->procs[i];
    // Dead is only ever seen under the table lock while a sweeper works on the record; seen with
    // the lock ours, it is a sweep whose sweeper was killed part way (the lock was taken over):
    // it is finished here, or the dead process's objects would stay forever.
    uint32_t st = r.state.load();
    if (st == kProcAlive && (r.pid == pid_ || pid_matches(r.pid, r.start_time))) continue;
    if (st != kProcAlive && st != kProcDead) continue;
    ShmLockGuard g(hdr_->table_lock, kMaxProcs + static_cast<uint32_t>(pid_));
    st = r.state.load();
    if (st != kProcAlive && st != kProcDead) continue;
    // A process that ran its exit handler after releasing everything (ibv_close_device does)
    // cannot have died inside a ring maker or a destroy; a record already dead is a sweep whose
    // sweeper died. Only the others can have leaked heap blocks.
    bool clean_exit = st == kProcAlive && r.detached.load() != 0;
    r.state.store(kProcDead);
    if (clean_exit && !owns_context_or_pd(hdr_, i)) {
      // Nothing of it can be in any table (every object hangs off a context or a PD, and closing
      // a context released them): the scans of every table are skipped, which in a fresh mapping
      // fault in the whole header (docs/design/segment-and-heap.md, "64 processes on one device").
      reset_engine_slots(this, i);
    } else if (release_proc_objects(i) != 0 || !clean_exit) {
      audit = true;
    }
    r.state.store(kProcFree);
    ++n;
  }
  // Blocks the dead leaked inside an allocation or a free, and rings a dead sweeper left behind
  // (its victim's slots freed above without them). Outside the table lock, which a process
  // making an object takes while it holds the heap-use lock; not waiting for such a process
  // (the next sweep gets the blocks). Not after clean exits alone: the audit reads the heap's
  // whole bookkeeping (most of an attach's cost after another process exited, docs/perf.md).
  if (audit) audit_heap(true, false);
  return n;
}

}  // namespace emu
