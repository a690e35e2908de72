// SPDX-License-Identifier: BSD-2-Clause
#include "dma/shared_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "emu/device.h"
#include "emu/dma_guard.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

// Mappings of other processes' shared files (their registration files, and files found behind
// registered shared mappings), keyed by share_uid and the file range they map. A registration
// file is sparse and as large as the address space (a page at address A at offset A), so it is
// mapped in aligned chunks around the windows asked for; a small file is mapped whole, and again
// once it has grown past the first mapping. Readers scan without a lock (an entry is published
// with a release store of its uid and does not change until it is unmapped); inserts take the
// mutex. A mapping of a dead process's file is unmapped by reap_dead_windows once no engine can be
// using it (it would keep the dead process's registered pages alive). A full table leaves further
// windows to the system-call path.
struct Entry {
  std::atomic<uint64_t> uid{0};  // 0: a free entry; kGone: being unmapped
  uint64_t origin = 0;           // where file offset 0 would be here (base - lo)
  uint64_t lo = 0, hi = 0;       // the file range mapped
  uint32_t proc = 0;             // the owner: its process record, pid and start time then
  int32_t pid = 0;
  uint64_t start_time = 0;
};
constexpr uint64_t kGone = ~0ull;

constexpr int kEntries = 256;
constexpr uint64_t kChunk = 1ull << 30;  // files larger than this are mapped a chunk at a time
Entry g_table[kEntries];
std::mutex g_mu;
std::atomic<int> g_used{0};

// A mapping of file uid that holds the file range [lo, hi): its origin.
bool lookup(uint64_t uid, uint64_t lo, uint64_t hi, uint64_t* origin) {
  int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    const Entry& e = g_table[i];
    if (e.uid.load(std::memory_order_acquire) == uid && e.lo <= lo && hi <= e.hi) {
      *origin = e.origin;
      return true;
    }
  }
  return false;
}

bool map_file(Segment* seg, const MrSlot& mr, uint64_t* origin) {
  std::lock_guard<std::mutex> g(g_mu);
  uint64_t lo = mr.share_off, hi = mr.share_off + mr.share_len;
  if (lookup(mr.share_uid, lo, hi, origin)) return true;
  int used = g_used.load(std::memory_order_relaxed), at = 0;
  while (at < used && g_table[at].uid.load(std::memory_order_relaxed) != 0) ++at;
  if (at == kEntries) return false;  // full: the copy goes the system-call way
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", seg->hdr()->procs[mr.owner].pid, mr.share_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  // A small file whole as it is now (a shm segment or file holds several MRs), at least to hi; a
  // large one by the chunks around [lo, hi).
  struct stat st;
  uint64_t size = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  uint64_t map_lo = 0,
           map_hi = std::max(hi, size & ~static_cast<uint64_t>(sysconf(_SC_PAGESIZE) - 1));
  if (map_hi > kChunk) {
    map_lo = lo & ~(kChunk - 1);
    map_hi = (hi + kChunk - 1) & ~(kChunk - 1);
  }
  void* p = mmap(nullptr, map_hi - map_lo, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                 static_cast<off_t>(map_lo));
  close(fd);
  if (p == MAP_FAILED) return false;
  Entry& e = g_table[at];
  const ProcRecord& owner = seg->hdr()->procs[mr.owner];
  e.lo = map_lo;
  e.hi = map_hi;
  e.origin = reinterpret_cast<uint64_t>(p) - map_lo;
  e.proc = mr.owner;
  e.pid = owner.pid;
  e.start_time = owner.start_time;
  e.uid.store(mr.share_uid, std::memory_order_release);
  if (at == used) g_used.store(used + 1, std::memory_order_release);
  *origin = e.origin;
  return true;
}

}  // namespace

uint64_t shared_window(Segment* seg, const MrSlot& mr, uint64_t va, uint64_t len, bool own) {
  uint64_t share_len = mr.share_len;
  std::atomic_thread_fence(
      std::memory_order_acquire);  // share_len is stored last (verbs_provider/memory/shared_mr.cpp)
  if (share_len == 0 || (mr.owner == seg->self() && !own)) return 0;
  if (va < mr.share_va || len > share_len || va - mr.share_va > share_len - len) return 0;
  uint64_t origin;
  if (!lookup(mr.share_uid, mr.share_off, mr.share_off + share_len, &origin) &&
      !map_file(seg, mr, &origin))
    return 0;
  return origin + mr.share_off + (va - mr.share_va);
}

uint64_t own_mr_pages(Segment* seg, uint32_t lkey, uint64_t addr, uint64_t len) {
  const MrSlot* mr = seg->find_mr(lkey);
  if (!mr || mr->owner != seg->self() || mr->mw_type || addr < mr->iova || len > mr->length ||
      addr - mr->iova > mr->length - len)
    return 0;
  // This process's own file: never reaped (the process is alive), so no engine section needed.
  return shared_window(seg, *mr, mr->addr + (addr - mr->iova), len, true);
}

void reap_dead_windows(Segment* seg) {
  std::vector<int> gone;
  {
    std::lock_guard<std::mutex> g(g_mu);
    int used = g_used.load(std::memory_order_relaxed);
    for (int i = 0; i < used; ++i) {
      Entry& e = g_table[i];
      uint64_t uid = e.uid.load(std::memory_order_relaxed);
      if (uid == 0 || uid == kGone) continue;
      const ProcRecord& r = seg->hdr()->procs[e.proc];
      if (r.state.load(std::memory_order_acquire) == kProcAlive && r.pid == e.pid &&
          r.start_time == e.start_time)
        continue;
      e.uid.store(kGone, std::memory_order_release);  // no lookup finds it from now on
      gone.push_back(i);
    }
  }
  if (gone.empty()) return;
  wait_for_engines(seg);  // an engine that found it before has left its section
  std::lock_guard<std::mutex> g(g_mu);
  for (int i : gone) {
    Entry& e = g_table[i];
    munmap(reinterpret_cast<void*>(e.origin + e.lo), e.hi - e.lo);
    e.uid.store(0, std::memory_order_release);
  }
}

}  // namespace emu
