// SPDX-License-Identifier: BSD-2-Clause
// Registered memory made reachable without a system call per message
// (docs/design/registered-memory.md, "Registered memory shared for real"). An engine in another
// process copies into an MR with memcpy through a mapping of the same pages, which needs the pages
// to be a file it can map:
//  - a region already inside a MAP_SHARED mapping of a file (POSIX shm, a memfd, ...) is recorded
//    with a descriptor of that file, nothing moved (EMU_SHARED_BACKING, shared_backing.cpp);
//  - private anonymous pages (heap, anonymous mmap) are moved into this process's registration
//    file while an MR covers them (EMU_SHARED_MR, the default), and back when none does. The file
//    mirrors the address space (a page at address A lies at file offset A), so every MR is one
//    window of one file, whatever other MRs moved before or around it.
// The program keeps its addresses and bytes; stores racing a move wait for it (page_move.cpp); a
// child of fork() gets private copies of the moved pages, as the kernel gives it copies of
// pinned pages. Only whole pages inside an MR move: a page the MR shares with other data stays
// where it is and is reached with process_vm_*, as are ODP MRs, which follow the page tables.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "page_move.h"
#include "shared_backing.h"
#include "verbs/provider.h"

namespace emu::prov {

namespace {

// Files found behind registered shared mappings, one descriptor each, kept while an MR names it.
struct BackingFile {
  dev_t dev;
  uint64_t ino;
  int fd;
  uint64_t uid;
  uint32_t refs;
};

// The registration file: sparse, as large as any user address, made at the first move.
struct RegFile {
  int fd = -1;
  uint64_t uid = 0;
  dev_t dev = 0;
  uint64_t ino = 0;
};
constexpr uint64_t kRegFileSize = 1ull << 57;  // above every user address, 5-level paging too

// This process's pages that MRs cover, in runs of equal state: how many MRs cover each page (in
// whole or in part, ODP or not) and whether it lies in the registration file. Pages no run names
// are covered by none and are where the program put them.
struct Run {
  uint64_t end;
  uint32_t covers;
  bool in_file;
};

std::mutex g_mu;
RegFile g_reg;
// These two are built on first use and never destroyed: another thread's exit() runs this
// library's static destructors while this one may be inside ibv_dereg_mr (rping does;
// docs/design/verbs-provider.md, "Exit").
std::vector<BackingFile>& backing_files() {
  static auto* files = new std::vector<BackingFile>;
  return *files;
}
std::map<uint64_t, Run>& covered_runs() {  // by start address
  static auto* runs = new std::map<uint64_t, Run>;
  return *runs;
}

uint64_t page_size() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
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

RegFile* reg_file() {
  if (g_reg.fd >= 0) return &g_reg;
  int fd = memfd_create("rdmaemu-mr", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  if (ftruncate(fd, static_cast<off_t>(kRegFileSize)) != 0 || fstat(fd, &st) != 0) {
    close(fd);
    return nullptr;
  }
  g_reg = {fd, segment()->new_uid(), st.st_dev, static_cast<uint64_t>(st.st_ino)};
  return &g_reg;
}

bool is_reg_file(const Mapping& m) {
  return g_reg.fd >= 0 && m.inode == g_reg.ino && m.dev == g_reg.dev && m.shared &&
         m.offset == m.start;
}

// --- the runs ---

// Makes x a run boundary (if a run straddles it).
void split_at(uint64_t x) {
  auto it = covered_runs().upper_bound(x);
  if (it == covered_runs().begin()) return;
  --it;
  if (it->first < x && it->second.end > x) {
    Run tail = it->second;
    it->second.end = x;
    covered_runs().emplace(x, tail);
  }
}

// Every page of [lo, hi) in a run of its own bounds (empty runs where none was).
void fill(uint64_t lo, uint64_t hi) {
  split_at(lo);
  split_at(hi);
  uint64_t at = lo;
  auto it = covered_runs().lower_bound(lo);
  while (at < hi) {
    if (it != covered_runs().end() && it->first == at) {
      at = it->second.end;
      ++it;
      continue;
    }
    uint64_t next = it != covered_runs().end() && it->first < hi ? it->first : hi;
    covered_runs().emplace_hint(it, at, Run{next, 0, false});
    at = next;
  }
}

// Runs of [lo, hi) that say nothing are dropped, and equal neighbours joined.
void prune(uint64_t lo, uint64_t hi) {
  auto it = covered_runs().lower_bound(lo);
  if (it != covered_runs().begin()) --it;
  while (it != covered_runs().end() && it->first <= hi) {
    if (it->second.covers == 0 && !it->second.in_file) {
      it = covered_runs().erase(it);
      continue;
    }
    auto next = std::next(it);
    if (next != covered_runs().end() && next->first == it->second.end &&
        next->second.covers == it->second.covers && next->second.in_file == it->second.in_file) {
      it->second.end = next->second.end;
      covered_runs().erase(next);
      continue;
    }
    it = next;
  }
}

// Whether every page of [lo, hi) is (want true) or is not (want false) in the file.
bool all_in_file(uint64_t lo, uint64_t hi, bool want) {
  uint64_t at = lo;
  auto it = covered_runs().upper_bound(lo);
  if (it != covered_runs().begin()) --it;
  for (; it != covered_runs().end() && it->first < hi; ++it) {
    if (it->second.end <= lo) continue;
    if (it->first > at && want) return false;  // a gap: not in the file
    if (it->second.in_file != want) return false;
    at = it->second.end;
  }
  return !want || at >= hi;
}

// --- sharing ---

// The region's pages lie in one shared, writable file mapping: record that file. The whole pages
// holding the region are reachable (the mapping has them all), so the window covers the MR.
bool share_existing(uint64_t a, uint64_t len, MrSlot& ms) {
  static const bool enabled = knob_flag("EMU_SHARED_BACKING");
  if (!enabled) return false;
  uint64_t s = a & ~(page_size() - 1), e = (a + len + page_size() - 1) & ~(page_size() - 1);
  Vma v;
  if (!vma_at(s, &v) || !v.shared_rw || e > v.end) return false;
  if (g_reg.fd >= 0 && v.inode == g_reg.ino && v.dev == g_reg.dev) return false;  // ours: moved
  BackingFile* f = nullptr;
  for (BackingFile& b : backing_files())
    if (b.dev == v.dev && b.ino == v.inode) f = &b;
  if (!f) {
    int fd = open_backing(v);
    if (fd < 0) return false;
    backing_files().push_back({v.dev, v.inode, fd, segment()->new_uid(), 0});
    f = &backing_files().back();
  }
  ++f->refs;
  set_share(ms, f->fd, s, e - s, v.offset + (s - v.start), f->uid);
  return true;
}

// The mappings overlapping an MR's pages, read once per registration.
struct MapsNow {
  static constexpr int kMax = 64;
  Mapping m[kMax];
  int n = 0;  // -1: unknown (unreadable, or more than kMax)
};

// Whether the mappings over [s, e) are what the runs say: the file's where pages were moved,
// private anonymous read-write memory elsewhere (the program may have unmapped and mapped anew
// since an earlier MR moved pages there). [s, e) must be mapped throughout.
bool mappings_agree(uint64_t s, uint64_t e, const MapsNow& maps) {
  if (maps.n <= 0) return false;
  const Mapping* m = maps.m;
  uint64_t at = s;
  for (int i = 0; i < maps.n; ++i) {
    if (m[i].end <= s || m[i].start >= e) continue;
    if (m[i].start > at) return false;  // a hole
    uint64_t lo = std::max(m[i].start, s), hi = std::min(m[i].end, e);
    bool ours = is_reg_file(m[i]);
    if (!ours && !(m[i].plain_anon && m[i].rw && !m[i].shared)) return false;
    if (!all_in_file(lo, hi, ours)) return false;
    at = hi;
  }
  return at >= e;
}

// Moves the pages of [s, e) that are not yet in the file into it and records the MR's window.
// Pages another MR covers without having moved them (a page it shares with other data, an ODP
// MR) cannot move now: an engine may be writing them with a system call.
bool share_by_moving(uint64_t s, uint64_t e, const MapsNow& maps, MrSlot& ms) {
  static const bool enabled = knob_flag("EMU_SHARED_MR");
  if (!enabled || s >= e || !reg_file()) return false;
  std::vector<std::pair<uint64_t, uint64_t>> to_move;
  auto want_move = [&](uint64_t lo, uint64_t hi) {
    if (!to_move.empty() && to_move.back().second == lo)
      to_move.back().second = hi;
    else
      to_move.emplace_back(lo, hi);
  };
  uint64_t at = s;
  auto it = covered_runs().upper_bound(s);
  if (it != covered_runs().begin()) --it;
  for (; it != covered_runs().end() && it->first < e; ++it) {
    if (it->second.end <= s) continue;
    uint64_t lo = std::max(it->first, s), hi = std::min(it->second.end, e);
    if (lo > at) want_move(at, lo);
    if (!it->second.in_file) {
      if (it->second.covers) return false;
      want_move(lo, hi);
    }
    at = hi;
  }
  if (at < e) want_move(at, e);
  if (!mappings_agree(s, e, maps)) return false;
  for (auto [lo, hi] : to_move) {
    if (!move_into_file(g_reg.fd, lo, hi - lo)) return false;
    // Moved: the MR being registered covers these pages, and its deregistration moves them back.
    fill(lo, hi);
    for (auto r = covered_runs().find(lo); r != covered_runs().end() && r->first < hi; ++r)
      r->second.in_file = true;
  }
  set_share(ms, g_reg.fd, s, e - s, s, g_reg.uid);
  return true;
}

// Pages no MR covers any more go back to private memory (or, if the program replaced their
// mapping itself, are just freed from the file).
void release_pages(uint64_t lo, uint64_t hi) {
  for (auto it = covered_runs().lower_bound(lo); it != covered_runs().end() && it->first < hi;
       ++it) {
    Run& r = it->second;
    if (r.covers || !r.in_file) continue;
    constexpr int kMax = 64;
    Mapping m[kMax];
    int n = mappings_in(it->first, r.end, m, kMax);
    bool back = n >= 0;
    for (int i = 0; i < n; ++i) {
      uint64_t a = std::max(m[i].start, it->first), b = std::min(m[i].end, r.end);
      if (is_reg_file(m[i]))
        back = move_out_of_file(g_reg.fd, a, b - a) && back;
      else
        drop_from_file(g_reg.fd, a, b - a);
    }
    if (n == 0) drop_from_file(g_reg.fd, it->first, r.end - it->first);
    r.in_file = !back;  // a move that failed leaves the pages shared (still correct, just shared)
  }
}

void add_cover(uint64_t lo, uint64_t hi, int delta) {
  fill(lo, hi);
  for (auto it = covered_runs().find(lo); it != covered_runs().end() && it->first < hi; ++it)
    if (delta > 0 || it->second.covers) it->second.covers += static_cast<uint32_t>(delta);
}

// fork(): no move runs while the address space is copied, and the child gets the moved pages as
// private memory of its own (its parent's MRs are not its; its own registrations start afresh).
void before_fork() { g_mu.lock(); }
void parent_after_fork() { g_mu.unlock(); }
void child_after_fork() {
  forget_maps_file();
  for (auto& [start, r] : covered_runs()) {
    if (!r.in_file) continue;
    constexpr int kMax = 64;
    Mapping m[kMax];
    int n = mappings_in(start, r.end, m, kMax);
    for (int i = 0; i < n; ++i)
      if (is_reg_file(m[i])) {
        uint64_t a = std::max(m[i].start, start), b = std::min(m[i].end, r.end);
        privatize_in_child(g_reg.fd, a, b - a);
      }
  }
  covered_runs().clear();
  if (g_reg.fd >= 0) close(g_reg.fd);
  g_reg = {};
  g_mu.unlock();
}
[[maybe_unused]] const int g_fork_hooks =
    pthread_atfork(before_fork, parent_after_fork, child_after_fork);

}  // namespace

MrCover share_pages(void* addr, size_t len, bool odp, MrSlot& ms) {
  const uint64_t page = page_size();
  uint64_t a = reinterpret_cast<uint64_t>(addr);
  MrCover c;
  c.lo = a & ~(page - 1);
  c.hi = a + len < a || a + len > kRegFileSize ? kRegFileSize : (a + len + page - 1) & ~(page - 1);
  std::lock_guard<std::mutex> g(g_mu);
  // Before any engine can reach this MR: a device copy into its pages after the program unmapped
  // them ends in an error or the MR's file pages, not in SIGSEGV (emu/dma_guard.h).
  install_fault_handler();
  if (!odp) {
    MapsNow maps;
    maps.n = mappings_in(c.lo, c.hi, maps.m, MapsNow::kMax);
    // One shared file mapping holds the region: recorded as it is. Otherwise private pages move.
    const Mapping& first = maps.m[0];
    bool in_shared_file = maps.n == 1 && first.shared && first.rw && first.inode != 0 &&
                          !is_reg_file(first) && first.end >= c.hi;
    if (in_shared_file && share_existing(a, len, ms))
      c.file_uid = ms.share_uid;
    else if (!in_shared_file)
      share_by_moving((a + page - 1) & ~(page - 1), (a + len) & ~(page - 1), maps, ms);
  }
  add_cover(c.lo, c.hi, 1);
  prune(c.lo, c.hi);
  return c;
}

void unshare_pages(const MrCover& c) {
  std::lock_guard<std::mutex> g(g_mu);
  if (c.file_uid)
    for (size_t i = 0; i < backing_files().size(); ++i)
      if (backing_files()[i].uid == c.file_uid && --backing_files()[i].refs == 0) {
        close(backing_files()[i].fd);
        backing_files().erase(backing_files().begin() + static_cast<long>(i));
        break;
      }
  if (c.hi <= c.lo) return;
  add_cover(c.lo, c.hi, -1);
  release_pages(c.lo, c.hi);
  prune(c.lo, c.hi);
}

}  // namespace emu::prov
