// SPDX-License-Identifier: BSD-2-Clause
#include "dma/memory.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "emu/barriers.h"
#include "emu/dma_guard.h"
#include "emu/small_copy.h"

namespace emu {
namespace {

constexpr int kMaxIov = 256;  // per system call (IOV_MAX is 1024)
constexpr uint64_t kBounce = 64 * 1024;

// The bounce buffer of a copy between two other processes, allocated by the thread's first such
// copy and freed at its exit (as a thread_local array it was static TLS that every new thread of
// every program loading the provider zeroed). nullptr if it could not be allocated.
struct BounceOfThread {
  char* buffer = nullptr;
  ~BounceOfThread() {
    delete[] buffer;
    buffer = nullptr;
  }
};
char* bounce_buffer() {
  static thread_local BounceOfThread t_bounce;
  if (!t_bounce.buffer) t_bounce.buffer = new (std::nothrow) char[kBounce];
  return t_bounce.buffer;
}

// This process's pid, read once, and again in a child of fork() (its copies go to itself, and to
// its parent through the parent's pid).
int g_self_pid = [] {
  pthread_atfork(nullptr, nullptr, [] { g_self_pid = getpid(); });
  return getpid();
}();

bool is_self(int pid) { return pid == 0 || pid == g_self_pid; }

// Where a guarded copy of this thread resumes if it faults (dma_guard.h). Initial-exec TLS: the
// signal handler reads it, and must not be the one to allocate it.
//
// The resume point is GCC's __builtin_setjmp: it saves the frame and stack pointers and a label
// (the compiler saves the callee-saved registers in the function's own frame), under a
// nanosecond, where sigsetjmp (registers, pointer mangling, a call into libc) was 7-8 ns on
// every copy here. Leaving the signal handler by __builtin_longjmp is what siglongjmp does
// without the mask, which after_fault restores. Sanitizer builds use sigsetjmp/siglongjmp,
// which the sanitizers intercept to drop the state of the frames left behind.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EMU_GUARD_SET(g) sigsetjmp((g).env, 0)
#define EMU_GUARD_JUMP(g) siglongjmp((g).env, 1)
using ResumePoint = sigjmp_buf;
#else
#define EMU_GUARD_SET(g) __builtin_setjmp((g).env)
#define EMU_GUARD_JUMP(g) __builtin_longjmp((g).env, 1)
using ResumePoint = void* [5];
#endif
struct Guard {
  ResumePoint env;
  uint64_t fault_addr = 0;
  sigset_t mask;  // the thread's signal mask before the fault, restored after it
};
EMU_FAST_TLS Guard* t_guard = nullptr;

// After a fault: the handler left by siglongjmp, so the mask it ran under (the fault's signal
// blocked) is still the thread's; the one of the interrupted code comes back.
void after_fault(Guard& g) { pthread_sigmask(SIG_SETMASK, &g.mask, nullptr); }

// The guard is armed before the copy's first access and disarmed after its last: signal fences,
// since the compiler knows memcpy does not read t_guard and would otherwise move or drop the
// stores.
inline void arm(Guard* g) {
  t_guard = g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void disarm() {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
}

bool in_spans(uint64_t a, const MemSpan* s, int n) {
  for (int i = 0; i < n; ++i)
    if (a - s[i].addr < s[i].len) return true;
  return false;
}

// Whether any page of the spans is not mapped at all (msync's range check, no data moved): which
// side of a process_vm_* call that failed with EFAULT was ours. Only on the failure path.
bool any_unmapped(const iovec* iov, int n) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < n; ++i) {
    uint64_t a = reinterpret_cast<uint64_t>(iov[i].iov_base), lo = a & ~(page - 1);
    if (iov[i].iov_len &&
        msync(reinterpret_cast<void*>(lo), a + iov[i].iov_len - lo, MS_ASYNC) != 0 &&
        errno == ENOMEM)
      return true;
  }
  return false;
}

CopyResult fault_of(bool remote_is_dst) {
  if (errno == ESRCH) return remote_is_dst ? CopyResult::dst_gone : CopyResult::src_gone;
  return remote_is_dst ? CopyResult::dst_fault : CopyResult::src_fault;
}

// Walks a span list as a byte stream.
struct Cursor {
  const MemSpan* s;
  int n;
  int i = 0;
  uint64_t off = 0;
  bool done() const { return i >= n; }
  uint64_t avail() const { return s[i].len - off; }
  uint64_t addr() const { return s[i].addr + off; }
  void advance(uint64_t k) {
    off += k;
    while (i < n && off >= s[i].len) {
      off = 0;
      ++i;
    }
  }
  void skip_empty() {
    while (i < n && s[i].len == 0) ++i;
  }
};

// Fills up to kMaxIov iovecs from c covering at most max bytes; returns bytes covered.
uint64_t take(Cursor& c, iovec* iov, int* cnt, uint64_t max) {
  uint64_t total = 0;
  *cnt = 0;
  c.skip_empty();
  while (!c.done() && *cnt < kMaxIov && total < max) {
    uint64_t k = std::min(c.avail(), max - total);
    iov[*cnt].iov_base = reinterpret_cast<void*>(c.addr());
    iov[*cnt].iov_len = k;
    ++*cnt;
    total += k;
    c.advance(k);
  }
  return total;
}

// A program may name one buffer as both source and destination (a WRITE or SEND within one MR,
// in loopback): what lands is then one of the orders a DMA engine might give, and memmove keeps
// the copy defined (memcpy of overlapping ranges is not; found by the ASan fuzz run).
CopyResult local_copy(Cursor& src, Cursor& dst) {
  src.skip_empty();
  dst.skip_empty();
  while (!src.done() && !dst.done()) {
    uint64_t k = std::min(src.avail(), dst.avail());
    std::memmove(reinterpret_cast<void*>(dst.addr()), reinterpret_cast<const void*>(src.addr()), k);
    src.advance(k);
    dst.advance(k);
  }
  return CopyResult::ok;
}

// The copies a guard covers, each in a function of its own that the compiler may not look into:
// the resume point is only sound for a fault inside a call (the compiler keeps what the code after
// it needs where a call cannot clobber it; an access inlined next to the setjmp has no such edge).
__attribute__((noipa)) void opaque_copy(void* dst, const void* src, size_t n) {
  copy_small(dst, src, n);
}
__attribute__((noipa)) void opaque_local_copy(const MemSpan* src, int nsrc, const MemSpan* dst,
                                              int ndst) {
  if (nsrc == 1 && ndst == 1) {  // the common small message: one span each way
    uint64_t k = std::min(src->len, dst->len);
    auto* to = reinterpret_cast<void*>(dst->addr);
    auto* from = reinterpret_cast<const void*>(src->addr);
    if (k <= 16)
      copy_small(to, from, k);  // an atomic's 8 bytes, a small SEND: no libc call
    else
      std::memmove(to, from, k);  // they may overlap (local_copy says why)
    return;
  }
  Cursor s{src, nsrc}, d{dst, ndst};
  local_copy(s, d);
}

// One side local, the other remote: batches of iovecs through one system call each.
CopyResult cross_copy(Cursor& local, Cursor& remote, int pid, bool write_remote) {
  iovec liov[kMaxIov], riov[kMaxIov];
  for (;;) {
    int ln = 0, rn = 0;
    // Cover the same byte count on both sides: take from the side with fewer bytes first.
    Cursor lsave = local;
    uint64_t lb = take(local, liov, &ln, ~0ull);
    if (lb == 0) return CopyResult::ok;
    uint64_t rb = take(remote, riov, &rn, lb);
    if (rb == 0)
      return CopyResult::ok;  // the shorter list is done (a receive larger than the message)
    if (rb < lb) {            // trim the local side to what the remote batch covers
      local = lsave;
      lb = take(local, liov, &ln, rb);
    }
    ssize_t r = write_remote ? process_vm_writev(pid, liov, ln, riov, rn, 0)
                             : process_vm_readv(pid, liov, ln, riov, rn, 0);
    if (r >= 0 && static_cast<uint64_t>(r) == lb) continue;
    if (r >= 0) errno = EFAULT;
    // EFAULT names no side: a local buffer the program unmapped is the local side's fault (the
    // requester's protection error), not the remote's (which would put the responder in error).
    if (errno == EFAULT && any_unmapped(liov, ln))
      return write_remote ? CopyResult::src_fault : CopyResult::dst_fault;
    return fault_of(write_remote);
  }
}

// Both sides in this address space (the program's own buffers, or windows onto a peer's pages):
// memcpy, guarded (dma_guard.h). The guard is a resume point (Guard) and a thread-local store: no
// system call unless a page is missing. A function of its own, so that the resume point costs
// the other paths of dma_copy nothing.
[[gnu::noinline]] CopyResult guarded_local_copy(const MemSpan* src, int nsrc, const MemSpan* dst,
                                                int ndst) {
  Guard g;
  if (EMU_GUARD_SET(g)) [[unlikely]] {
    after_fault(g);
    return in_spans(g.fault_addr, dst, ndst) ? CopyResult::dst_fault : CopyResult::src_fault;
  }
  arm(&g);
  opaque_local_copy(src, nsrc, dst, ndst);
  disarm();
  return CopyResult::ok;
}

}  // namespace

void dma_fault_recover(const siginfo_t* si, void* ucontext) {
  Guard* g = t_guard;
  if (!g) return;
  t_guard = nullptr;  // a second fault (in the handler's caller) is not the copy's
  g->fault_addr = reinterpret_cast<uint64_t>(si->si_addr);
  g->mask = static_cast<const ucontext_t*>(ucontext)->uc_sigmask;
  EMU_GUARD_JUMP(*g);
}

bool guarded_copy(void* dst, const void* src, size_t n) {
  Guard g;
  if (EMU_GUARD_SET(g)) [[unlikely]] {
    after_fault(g);
    return false;
  }
  arm(&g);
  opaque_copy(dst, src, n);
  disarm();
  return true;
}

CopyResult dma_copy(int src_pid, const MemSpan* src, int nsrc, int dst_pid, const MemSpan* dst,
                    int ndst) {
  bool ls = is_self(src_pid), ld = is_self(dst_pid);
  if (ls && ld) return guarded_local_copy(src, nsrc, dst, ndst);
  Cursor s{src, nsrc}, d{dst, ndst};
  if (ls) return cross_copy(s, d, dst_pid, true);
  if (ld) return cross_copy(d, s, src_pid, false);
  // Neither side is ours (the engine runs in a third process): bounce through a local buffer,
  // the thread's, or a page of the stack if it could not be had.
  char page[4096];
  char* bounce = bounce_buffer();
  const uint64_t cap = bounce ? kBounce : sizeof page;
  if (!bounce) bounce = page;
  for (;;) {
    int n = 0;
    iovec riov[kMaxIov];
    uint64_t b = take(s, riov, &n, cap);
    if (b == 0) return CopyResult::ok;
    iovec liov{bounce, b};
    ssize_t r = process_vm_readv(src_pid, &liov, 1, riov, n, 0);
    if (r < 0 || static_cast<uint64_t>(r) != b) return fault_of(false);
    MemSpan bs{reinterpret_cast<uint64_t>(bounce), b};
    Cursor bc{&bs, 1};
    CopyResult cr = cross_copy(bc, d, dst_pid, true);
    if (cr != CopyResult::ok) return cr;
  }
}

CopyResult dma_read64(int pid, uint64_t addr, uint64_t* out) {
  MemSpan src{addr, 8}, dst{reinterpret_cast<uint64_t>(out), 8};
  return dma_copy(pid, &src, 1, 0, &dst, 1);
}

CopyResult dma_write64(int pid, uint64_t addr, uint64_t value) {
  MemSpan src{reinterpret_cast<uint64_t>(&value), 8}, dst{addr, 8};
  return dma_copy(0, &src, 1, pid, &dst, 1);
}

}  // namespace emu
