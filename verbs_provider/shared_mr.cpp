// Registration made reachable without a system call per message (docs/architecture.md, "Registered
// memory shared for real"). By default, a region whose pages are already shared (a MAP_SHARED
// mapping of a file, shared_backing.cpp) is recorded with a descriptor of that file, nothing
// re-backed (EMU_SHARED_BACKING=0 turns this off).
// EMU_SHARED_MR=1, besides: at ibv_reg_mr, the whole pages inside the region are re-backed by a
// memfd (their contents copied, then the shared mapping moved over the same addresses), so that
// engines in other processes can map them once and move data with memcpy instead of a system call
// per message. The program sees the same addresses and bytes. The price, and why it is opt-in:
//  - the pages become shared memory: after fork() they are not copied for the child (like
//    ibv_fork_init, they are not inherited at all: MADV_DONTFORK);
//  - a store another thread makes into those pages while ibv_reg_mr copies them can be lost.
// Only private anonymous read-write memory (heap, anonymous mmap) is re-backed; anything else keeps
// the system-call path.
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "provider.h"
#include "shared_backing.h"

namespace emu::prov {

namespace {

// The re-backing goes around libc's mmap family on purpose: a program's memory-event hooks there
// (UCX's ucm patches mmap, mremap, munmap and madvise) would see registration remap the region and
// drop it from their registration cache, where on hardware registering memory leaves the mapping
// alone (UCX's rendezvous then lost track of its buffers and stalled).
void* raw_mmap_shared(int fd, uint64_t n) {
  return reinterpret_cast<void*>(
      syscall(SYS_mmap, nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
}
void* raw_mremap_over(void* from, uint64_t n, uint64_t to) {
  return reinterpret_cast<void*>(
      syscall(SYS_mremap, from, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, to));
}

struct SharedRange {
  uint64_t start, end;  // page-aligned, in this process
  int fd;
  uint64_t uid;
};

// Files found behind registered shared mappings, one descriptor each, kept while an MR names it.
struct BackingFile {
  dev_t dev;
  uint64_t ino;
  int fd;
  uint64_t uid;
  uint32_t refs;
};

std::mutex g_mu;
std::vector<SharedRange> g_ranges;
std::vector<BackingFile> g_files;

bool env_flag(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) != 0 : dflt;
}

// Engines read share_len first: it is stored last.
void set_share(MrSlot& ms, int fd, uint64_t va, uint64_t len, uint64_t off, uint64_t uid) {
  ms.share_fd = fd;
  ms.share_va = va;
  ms.share_off = off;
  ms.share_uid = uid;
  std::atomic_thread_fence(std::memory_order_release);
  ms.share_len = len;
}

// The region's pages lie in one shared, writable file mapping: record that file. The whole pages
// holding the region are reachable (the mapping has them all), so the window covers the MR.
bool share_existing(uint64_t a, uint64_t len, uint64_t page, MrSlot& ms) {
  static const bool enabled = env_flag("EMU_SHARED_BACKING", true);
  if (!enabled) return false;
  uint64_t s = a & ~(page - 1), e = (a + len + page - 1) & ~(page - 1);
  Vma v;
  if (!vma_at(s, &v) || !v.shared_rw || e > v.end) return false;
  BackingFile* f = nullptr;
  for (BackingFile& b : g_files)
    if (b.dev == v.dev && b.ino == v.inode) f = &b;
  if (!f) {
    int fd = open_backing(v);
    if (fd < 0) return false;
    g_files.push_back({v.dev, v.inode, fd, segment()->new_uid(), 0});
    f = &g_files.back();
  }
  ++f->refs;
  set_share(ms, f->fd, s, e - s, v.offset + (s - v.start), f->uid);
  return true;
}

// Every mapping that overlaps [s, e) is private, anonymous and read-write.
bool private_anonymous(uint64_t s, uint64_t e) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return false;
  char line[512];
  uint64_t covered = s;
  bool ok = true;
  while (ok && std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off, inode;
    char perms[8], dev[16], path[256] = "";
    if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu %255s", &lo, &hi, perms, &off, dev, &inode,
                    path) < 6)
      continue;
    if (hi <= s || lo >= e) continue;
    bool anon = inode == 0 && (path[0] == 0 || std::strcmp(path, "[heap]") == 0 ||
                               std::strncmp(path, "[anon", 5) == 0);
    if (!anon || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || lo > covered) ok = false;
    covered = hi;
  }
  std::fclose(f);
  return ok && covered >= e;
}

}  // namespace

bool share_pages(void* addr, size_t len, MrSlot& ms) {
  static const bool rebacking = env_flag("EMU_SHARED_MR", false);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  uint64_t s = (a + page - 1) & ~(page - 1);
  uint64_t e = (a + len) & ~(page - 1);
  std::lock_guard<std::mutex> g(g_mu);
  for (const SharedRange& r : g_ranges) {
    if (s < e && s >= r.start && e <= r.end) {  // re-backed before (another MR over the pages)
      set_share(ms, r.fd, s, e - s, s - r.start, r.uid);
      return true;
    }
    if (s < e && s < r.end && e > r.start) return false;  // a partial overlap: keep it simple
  }
  if (share_existing(a, len, page, ms)) return true;
  if (!rebacking || e <= s || !private_anonymous(s, e)) return false;
  uint64_t n = e - s;
  int fd = memfd_create("rdmaemu-mr", MFD_CLOEXEC);
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(n)) != 0) {
    close(fd);
    return false;
  }
  void* tmp = raw_mmap_shared(fd, n);
  if (tmp == MAP_FAILED) {
    close(fd);
    return false;
  }
  std::memcpy(tmp, reinterpret_cast<void*>(s), n);
  // Moving the mapping over the region replaces its pages in one step.
  if (raw_mremap_over(tmp, n, s) == MAP_FAILED) {
    syscall(SYS_munmap, tmp, n);
    close(fd);
    return false;
  }
  syscall(SYS_madvise, s, n, MADV_DONTFORK);
  uint64_t uid = segment()->new_uid();
  g_ranges.push_back({s, e, fd, uid});
  set_share(ms, fd, s, n, 0, uid);
  return true;
}

void unshare_pages(uint64_t uid) {
  std::lock_guard<std::mutex> g(g_mu);
  for (size_t i = 0; i < g_files.size(); ++i)
    if (g_files[i].uid == uid && --g_files[i].refs == 0) {
      close(g_files[i].fd);
      g_files.erase(g_files.begin() + static_cast<long>(i));
      return;
    }
}

}  // namespace emu::prov
