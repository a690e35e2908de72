#include "shm/shared_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "emu/reclaim.h"

namespace emu {
namespace {

// Mappings of other processes' shared files (memfds of EMU_SHARED_MR, and files found behind
// registered shared mappings), keyed by share_uid; a file mapped again once it has grown past the
// first mapping takes a second entry. Readers scan without a lock (entries are
// published with release stores); inserts take the mutex. A full table is emptied once no engine
// can be using its mappings.
struct Entry {
  std::atomic<uint64_t> uid{0};
  std::atomic<uint64_t> base{0};  // where memfd offset 0 is mapped here
  uint64_t len = 0;
};

constexpr int kEntries = 256;
Entry g_table[kEntries];
std::mutex g_mu;
int g_used = 0;

// A mapping of file uid that reaches offset `end` (a file may grow after it was mapped here).
uint64_t lookup(uint64_t uid, uint64_t end) {
  for (int i = 0; i < kEntries; ++i) {
    uint64_t u = g_table[i].uid.load(std::memory_order_acquire);
    if (u == uid && g_table[i].len >= end) return g_table[i].base.load(std::memory_order_acquire);
    if (u == 0) break;
  }
  return 0;
}

uint64_t map_memfd(Segment* seg, const MrSlot& mr) {
  std::lock_guard<std::mutex> g(g_mu);
  uint64_t end = mr.share_off + mr.share_len;
  if (uint64_t b = lookup(mr.share_uid, end)) return b;
  if (g_used == kEntries) return 0;  // full: the copy goes the system-call way
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", seg->hdr()->procs[mr.owner].pid, mr.share_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  // The whole file as it is now (a shm segment or file holds several MRs), at least to `end`.
  struct stat st;
  uint64_t len = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  len = std::max(end, len & ~static_cast<uint64_t>(sysconf(_SC_PAGESIZE) - 1));
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return 0;
  Entry& e = g_table[g_used++];
  e.len = len;
  e.base.store(reinterpret_cast<uint64_t>(p), std::memory_order_relaxed);
  e.uid.store(mr.share_uid, std::memory_order_release);
  return reinterpret_cast<uint64_t>(p);
}

}  // namespace

uint64_t shared_window(Segment* seg, const MrSlot& mr, uint64_t va, uint64_t len) {
  uint64_t share_len = mr.share_len;
  std::atomic_thread_fence(std::memory_order_acquire);  // share_len is stored last (shared_mr.cpp)
  if (share_len == 0 || mr.owner == seg->self()) return 0;
  if (va < mr.share_va || len > share_len || va - mr.share_va > share_len - len) return 0;
  uint64_t base = lookup(mr.share_uid, mr.share_off + share_len);
  if (!base) base = map_memfd(seg, mr);
  if (!base) return 0;
  return base + mr.share_off + (va - mr.share_va);
}

}  // namespace emu
