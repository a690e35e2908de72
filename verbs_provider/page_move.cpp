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

#include <atomic>
#include <cerrno>

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
struct sigaction g_prev;  // the handler ours stands in front of

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
  if (g_prev.sa_flags & SA_SIGINFO) {
    if (g_prev.sa_sigaction) g_prev.sa_sigaction(sig, si, ctx);
    return;
  }
  if (g_prev.sa_handler == SIG_DFL || g_prev.sa_handler == SIG_IGN) {
    // The default action: the faulting instruction runs again and the kernel ends the process.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
    return;
  }
  g_prev.sa_handler(sig);
}

// Async-signal-safe: atomics and the futex system call only.
void on_segv(int sig, siginfo_t* si, void* ctx) {
  int saved_errno = errno;
  uint64_t a = reinterpret_cast<uint64_t>(si->si_addr);
  bool ours = false;
  if (si->si_code == SEGV_ACCERR) {
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
  if (!ours) forward(sig, si, ctx);
}

// Ours in front of whatever handles SIGSEGV now (checked at every move: the program may have
// installed its own since).
void install_handler() {
  struct sigaction cur {};
  sigaction(SIGSEGV, nullptr, &cur);
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv) return;
  g_prev = cur;
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
}

// The pages of one move, read-only from open() to close(). The moving thread takes no signal
// meanwhile: a handler of the program's storing into the pages would wait for this very thread.
class StoreGuard {
 public:
  StoreGuard(uint64_t lo, uint64_t hi) : lo_(lo), hi_(hi) {
    sigset_t all;
    sigfillset(&all);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&all, s);
    pthread_sigmask(SIG_BLOCK, &all, &old_mask_);
    install_handler();
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

}  // namespace

void drop_from_file(int fd, uint64_t start, uint64_t len) {
  fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(start),
            static_cast<off_t>(len));
}

bool move_into_file(int fd, uint64_t start, uint64_t len) {
  // Mapped before the pages turn read-only, so that nothing which can fail for want of memory
  // runs while stores wait; populated, so that the program's next touch of each page does not
  // fault (page faults are the dearest part of a move on a VM).
  void* to = sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, start);
  if (to == MAP_FAILED) return false;
  StoreGuard guard(start, start + len);
  // The copy reads the pages: loads go on, stores wait.
  if (!guard.ok() || !file_io(true, fd, start, len, start) || !sys_mremap_to(to, len, start)) {
    guard.undo();
    sys_munmap(to, len);
    drop_from_file(fd, start, len);
    return false;
  }
  return true;
}

bool move_out_of_file(int fd, uint64_t start, uint64_t len) {
  void* to =
      sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (to == MAP_FAILED) return false;
  {
    StoreGuard guard(start, start + len);
    if (!guard.ok()) {
      sys_munmap(to, len);
      return false;
    }
    if (!file_io(false, fd, reinterpret_cast<uint64_t>(to), len, start) ||
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
  void* to =
      sys_mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (to == MAP_FAILED) return;  // the child keeps sharing these pages with its parent
  if (!file_io(false, fd, reinterpret_cast<uint64_t>(to), len, start) ||
      !sys_mremap_to(to, len, start))
    sys_munmap(to, len);
}

}  // namespace emu::prov
