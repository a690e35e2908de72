// SPDX-License-Identifier: BSD-2-Clause
// Moving registered pages into the registration file and back (page_move.h). Other threads of the
// program go on storing into those pages while a move runs; copying first and mapping after would
// lose a store made in between (the copy has the old byte, the new mapping replaces the page that
// took the store). So a move makes the pages read-only for its duration: a store faults, waits in
// the SIGSEGV handler below until the pages are remapped, and runs again when the handler returns,
// now on the new pages. Loads go on unhindered. No engine writes to pages being moved: only pages
// no MR covers move (shared_mr.cpp), and an engine needs an MR to reach memory.
//
// What still notices a move: a system call that writes into the pages during it (read(2) into a
// buffer another thread is registering) fails with EFAULT instead of waiting.
//
// Every mapping call goes to the kernel directly, not through libc: a program's memory-event hooks
// there (UCX's ucm patches mmap, mremap, munmap and madvise) must not see registration remap the
// region (on hardware it does not), or UCX's registration cache drops the buffer being registered.
#include "page_move.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "emu/dma_guard.h"

namespace emu::prov {
namespace {

void* sys_mmap(uint64_t addr, uint64_t len, int prot, int flags, int fd, uint64_t off) {
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
}
bool sys_mremap_to(void* from, uint64_t len, uint64_t to) {
  return syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to) !=
         static_cast<long>(-1);
}
void sys_munmap(void* p, uint64_t len) { syscall(SYS_munmap, p, len); }
bool sys_mprotect(uint64_t addr, uint64_t len, int prot) {
  return syscall(SYS_mprotect, addr, len, prot) == 0;
}

// The ranges of the last moves, so that a store which faulted during one and is handled after it
// ended is still known as ours (its thread may be preempted between the fault and the handler).
// seq is odd while a move runs; moves are serialized by shared_mr.cpp's lock.
constexpr int kRecent = 16;
struct MovedRange {
  std::atomic<uint64_t> lo{0}, hi{0};
};
MovedRange g_recent[kRecent];
std::atomic<uint32_t> g_seq{0};
// Faults in a recent range after its move ended, since the last move began: each runs its store
// again; past the bound they are the program's own (it made the pages read-only itself).
std::atomic<uint32_t> g_late_faults{0};
constexpr uint32_t kLateFaultBound = 1u << 14;
// The handlers ours stand in front of: SIGSEGV's, SIGBUS's.
struct sigaction g_prev[2];
struct sigaction& prev_of(int sig) {
  return g_prev[sig == SIGBUS ? 1 : 0];
}

bool in_range(const MovedRange& r, uint64_t a) {
  return a >= r.lo.load(std::memory_order_relaxed) && a < r.hi.load(std::memory_order_relaxed);
}

void futex_wait(std::atomic<uint32_t>* w, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr,
          nullptr, 0);
}

// Not ours: what the program (or a sanitizer) installed before us decides.
void forward(int sig, siginfo_t* si, void* ctx) {
  const struct sigaction& prev = prev_of(sig);
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, si, ctx);
    return;
  }
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
    // The default action: the faulting instruction runs again and the kernel ends the process.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
    return;
  }
  prev.sa_handler(sig);
}

// Async-signal-safe: atomics and the futex system call only. SIGSEGV: a store waiting for a move
// (below), else a device copy into memory the program unmapped (emu/dma_guard.h). SIGBUS: the
// latter only (a file truncated under a window).
void on_segv(int sig, siginfo_t* si, void* ctx) {
  int saved_errno = errno;
  uint64_t a = reinterpret_cast<uint64_t>(si->si_addr);
  bool ours = false;
  if (sig == SIGSEGV && si->si_code == SEGV_ACCERR) {
    for (;;) {
      uint32_t q = g_seq.load(std::memory_order_acquire);
      const MovedRange& now = g_recent[(q >> 1) % kRecent];
      if ((q & 1) && in_range(now, a)) {  // the move is still running: wait for its end
        futex_wait(&g_seq, q);
        ours = true;
        continue;
      }
      if (ours) break;
      for (const MovedRange& r : g_recent)
        if (in_range(r, a)) ours = g_late_faults.fetch_add(1) < kLateFaultBound;
      break;
    }
  }
  errno = saved_errno;
  if (ours) return;
  dma_fault_recover(si, ctx);  // does not return if the fault was a guarded device copy's
  forward(sig, si, ctx);
}

}  // namespace

// Ours in front of whatever handles SIGSEGV and SIGBUS now (checked at every move and every
// registration: the program may have installed its own since). Each pair of calls is serialized
// by the caller's lock (shared_mr.cpp's).
void install_fault_handler() {
  for (int sig : {SIGSEGV, SIGBUS}) {
    struct sigaction cur {};
    sigaction(sig, nullptr, &cur);
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv) continue;
    prev_of(sig) = cur;
    struct sigaction sa {};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

namespace {

// The pages of one move, read-only from open() to close(). The moving thread takes no signal
// meanwhile: a handler of the program's storing into the pages would wait for this very thread.
class StoreGuard {
 public:
  StoreGuard(uint64_t lo, uint64_t hi) : lo_(lo), hi_(hi) {
    sigset_t all;
    sigfillset(&all);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&all, s);
    pthread_sigmask(SIG_BLOCK, &all, &old_mask_);
    install_fault_handler();
    uint32_t q = g_seq.load(std::memory_order_relaxed);
    MovedRange& r = g_recent[(q >> 1) % kRecent];  // the slot on_segv reads at seq q + 1
    r.lo.store(lo, std::memory_order_relaxed);
    r.hi.store(hi, std::memory_order_relaxed);
    g_late_faults.store(0, std::memory_order_relaxed);
    g_seq.store(q + 1, std::memory_order_seq_cst);  // odd: the range above is being moved
    protected_ = sys_mprotect(lo, hi - lo, PROT_READ);
  }
  bool ok() const { return protected_; }
  // The move failed before remapping: the old pages take stores again.
  void undo() {
    if (protected_) sys_mprotect(lo_, hi_ - lo_, PROT_READ | PROT_WRITE);
  }
  ~StoreGuard() {
    g_seq.fetch_add(1, std::memory_order_seq_cst);  // even: waiting stores run again
    futex_wake_all(&g_seq);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  uint64_t lo_, hi_;
  sigset_t old_mask_;
  bool protected_ = false;
};

// The copies are the kernel's (pwrite from the pages into the file, pread from the file into new
// pages), as a DMA engine's would be: no load of the program's pages runs in this thread, where a
// race detector would pair it with the program's own stores (which the read-only window orders).
bool file_io(bool write, int fd, uint64_t buf, uint64_t len, uint64_t off) {
  while (len) {
    long k = syscall(write ? SYS_pwrite64 : SYS_pread64, fd, buf, len, off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    buf += static_cast<uint64_t>(k);
    off += static_cast<uint64_t>(k);
    len -= static_cast<uint64_t>(k);
  }
  return true;
}

// Maps the pages of [addr, addr + len) now (MADV_POPULATE_WRITE, Linux 5.14), so that the
// program's next touch of each does not fault: page faults are the dearest part of a move on a VM.
void populate(uint64_t addr, uint64_t len) {
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, for headers that predate it
  syscall(SYS_madvise, addr, len, kPopulateWrite);
}

// Calls fn(lo, hi) for each run of pages of [start, start + len) that hold data: present or
// swapped out (/proc/self/pagemap bits 63 and 62). The rest were never touched (or were given
// back): zeros, which a hole of the file reads as too, so a move copies (and allocates) only what
// the program uses, however large the MR. False if the page map cannot be read.
template <class Fn>
bool each_resident_run(uint64_t start, uint64_t len, Fn fn) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  int fd =
      static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  constexpr int kBatch = 512;
  uint64_t entries[kBatch];
  uint64_t run_lo = 0, npages = len / page;
  bool in_run = false, ok = true;
  for (uint64_t i = 0; i < npages && ok;) {
    uint64_t n = std::min<uint64_t>(kBatch, npages - i);
    uint64_t off = (start / page + i) * sizeof(uint64_t);
    ok = syscall(SYS_pread64, fd, entries, n * sizeof(uint64_t), off) ==
         static_cast<long>(n * sizeof(uint64_t));
    for (uint64_t k = 0; ok && k < n; ++k, ++i) {
      bool data = entries[k] >> 62;  // present or swapped
      uint64_t at = start + i * page;
      if (data && !in_run) run_lo = at;
      if (!data && in_run) fn(run_lo, at);
      in_run = data;
    }
  }
  if (ok && in_run) fn(run_lo, start + len);
  close(fd);
  return ok;
}

// Calls fn(lo, hi) for each run of [start, start + len) that holds data in the file (not a hole).
template <class Fn>
void each_data_run(int fd, uint64_t start, uint64_t len, Fn fn) {
  uint64_t end = start + len;
  for (uint64_t at = start; at < end;) {
    off_t d = lseek(fd, static_cast<off_t>(at), SEEK_DATA);
    if (d < 0 || static_cast<uint64_t>(d) >= end) return;
    off_t h = lseek(fd, d, SEEK_HOLE);
    uint64_t hi = h < 0 ? end : std::min(end, static_cast<uint64_t>(h));
    fn(static_cast<uint64_t>(d), hi);
    at = hi;
  }
}

// Private anonymous memory at `to` holding the file's data of [start, start + len) (its holes
// stay untouched zeros).
bool copy_out(int fd, uint64_t start, uint64_t len, uint64_t to) {
  bool ok = true;
  each_data_run(fd, start, len, [&](uint64_t lo, uint64_t hi) {
    populate(to + (lo - start), hi - lo);
    ok = ok && file_io(false, fd, to + (lo - start), hi - lo, lo);
  });
  return ok;
}

}  // namespace

void drop_from_file(int fd, uint64_t start, uint64_t len) {
  fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(start),
            static_cast<off_t>(len));
}

bool move_into_file(int fd, uint64_t start, uint64_t len) {
  // Mapped before the pages turn read-only, so that nothing which can fail for want of memory
  // runs while stores wait.
  void* to = sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, start);
  if (to == MAP_FAILED) return false;
  StoreGuard guard(start, start + len);
  // Which pages hold data is read once stores wait (a store now would make a page resident too
  // late to be copied). The copy reads the pages: loads go on.
  const uint64_t base = reinterpret_cast<uint64_t>(to);
  bool copied = true;
  bool read = guard.ok() && each_resident_run(start, len, [&](uint64_t lo, uint64_t hi) {
                copied = copied && file_io(true, fd, lo, hi - lo, lo);
                populate(base + (lo - start), hi - lo);
              });
  if (!read || !copied || !sys_mremap_to(to, len, start)) {
    guard.undo();
    sys_munmap(to, len);
    drop_from_file(fd, start, len);
    return false;
  }
  return true;
}

bool move_out_of_file(int fd, uint64_t start, uint64_t len) {
  void* to = sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (to == MAP_FAILED) return false;
  {
    StoreGuard guard(start, start + len);
    if (!guard.ok() || !copy_out(fd, start, len, reinterpret_cast<uint64_t>(to)) ||
        !sys_mremap_to(to, len, start)) {
      guard.undo();
      sys_munmap(to, len);
      return false;
    }
  }
  drop_from_file(fd, start, len);
  return true;
}

void privatize_in_child(int fd, uint64_t start, uint64_t len) {
  void* to = sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (to == MAP_FAILED) return;  // the child keeps sharing these pages with its parent
  if (!copy_out(fd, start, len, reinterpret_cast<uint64_t>(to)) || !sys_mremap_to(to, len, start))
    sys_munmap(to, len);
}

}  // namespace emu::prov
