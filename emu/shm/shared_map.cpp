#include "shm/shared_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include "emu/reclaim.h"

namespace emu {
namespace {

// Mappings of other processes' memfds, keyed by share_uid. Readers scan without a lock (entries are
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

uint64_t lookup(uint64_t uid) {
  for (int i = 0; i < kEntries; ++i) {
    uint64_t u = g_table[i].uid.load(std::memory_order_acquire);
    if (u == uid) return g_table[i].base.load(std::memory_order_acquire);
    if (u == 0) break;
  }
  return 0;
}

uint64_t map_memfd(Segment* seg, const MrSlot& mr) {
  std::lock_guard<std::mutex> g(g_mu);
  if (uint64_t b = lookup(mr.share_uid)) return b;
  if (g_used == kEntries) return 0;  // full: the copy goes the system-call way
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", seg->hdr()->procs[mr.owner].pid, mr.share_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  uint64_t len = mr.share_off + mr.share_len;
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
  if (mr.share_len == 0 || mr.owner == seg->self()) return 0;
  if (va < mr.share_va || len > mr.share_len || va - mr.share_va > mr.share_len - len) return 0;
  uint64_t base = lookup(mr.share_uid);
  if (!base) base = map_memfd(seg, mr);
  if (!base) return 0;
  return base + mr.share_off + (va - mr.share_va);
}

}  // namespace emu
