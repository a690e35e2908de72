// SPDX-License-Identifier: BSD-2-Clause
#include "mmio_trap.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "fault_signals.h"
#include "store_decode.h"

namespace emu::mmio {
namespace {

constexpr int kWindows = 512;
constexpr uint64_t kTrapFlag = 0x100;       // EFLAGS.TF
constexpr uint64_t kDirectionFlag = 0x400;  // EFLAGS.DF

struct Window {
  std::atomic<uint64_t> lo{0}, hi{0};  // hi 0: the slot is free
  uint64_t device = 0;
  StoreSink sink = nullptr;
  void* cookie = nullptr;
};
Window g_windows[kWindows];
std::atomic<int> g_window_end{0};  // slots past this one were never used
std::mutex g_window_mutex;

std::atomic<uint64_t> g_decoded{0}, g_stepped{0}, g_unknown{0};

// Where a vector store lands during its single step: a page pair of its own per step in flight,
// so the bytes reported are the ones this store made even when another thread stores to the same
// register bytes at once (the shared device side would hold whichever came last). When every
// pair is taken the store lands on the device side itself, as it did before there were pairs.
constexpr int kScratchPairs = 32;
uint8_t* g_scratch = nullptr;  // kScratchPairs pairs of pages, mapped with the first window
uint64_t g_page = 4096;
std::atomic<bool> g_scratch_taken[kScratchPairs];

// A vector store in flight on this thread: its address register points at the device side until
// the single step's SIGTRAP.
struct Step {
  bool active = false;
  bool trap_flag_was_set = false;
  int greg = 0;
  uint64_t moved_by = 0;
  const Window* window = nullptr;
  uint64_t offset = 0;
  uint32_t bytes = 0;
  int scratch = -1;           // the pair the store lands in, or -1: the device side
  uint8_t* landed = nullptr;  // where its bytes are after the step
  sigset_t mask;
};
__attribute__((tls_model("initial-exec"))) thread_local Step t_step;
// The instruction whose store the thread's handler is completing (a vector store's single step
// comes next on the same thread, before any other store of it).
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_insn;

const Window* window_at(uint64_t addr) {
  int end = g_window_end.load(std::memory_order_acquire);
  for (int i = 0; i < end; ++i) {
    const Window& w = g_windows[i];
    if (addr >= w.lo.load(std::memory_order_acquire) && addr < w.hi.load(std::memory_order_acquire))
      return &w;
  }
  return nullptr;
}

// The ucontext slot of general register n (x86 encoding: RAX 0 ... RDI 7, R8 8 ... R15 15).
int greg_of(int n) {
  static constexpr int kSlots[16] = {REG_RAX, REG_RCX, REG_RDX, REG_RBX, REG_RSP, REG_RBP,
                                     REG_RSI, REG_RDI, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                     REG_R12, REG_R13, REG_R14, REG_R15};
  return kSlots[n & 15];
}

uint64_t effective_address(const StoreInsn& in, const greg_t* g) {
  uint64_t a = uint64_t(int64_t(in.disp));
  if (in.base == kRegRip)
    a += uint64_t(g[REG_RIP]) + in.length;
  else if (in.base != kNoReg)
    a += uint64_t(g[greg_of(in.base)]);
  if (in.index != kNoReg) a += uint64_t(g[greg_of(in.index)]) * in.scale;
  return a;
}

bool inside(const Window& w, uint64_t addr, uint64_t bytes) {
  return addr >= w.lo.load(std::memory_order_relaxed) &&
         addr + bytes <= w.hi.load(std::memory_order_relaxed);
}

void* device_at(const Window& w, uint64_t addr) {
  return reinterpret_cast<void*>(w.device + (addr - w.lo.load(std::memory_order_relaxed)));
}

void report(const Window& w, uint64_t addr, const void* stored, uint32_t bytes) {
  w.sink(w.cookie, addr - w.lo.load(std::memory_order_relaxed), static_cast<const uint8_t*>(stored),
         bytes);
}

// MOV/MOVNTI/MOVBE from a general register, MOV from an immediate: made here.
bool complete_scalar(const Window& w, const StoreInsn& in, greg_t* g) {
  uint64_t addr = effective_address(in, g);
  if (!inside(w, addr, in.width)) return false;
  uint64_t v = in.kind == StoreInsn::kImm ? in.imm : uint64_t(g[greg_of(in.src)]);
  if (in.src_high8) v >>= 8;
  if (in.byte_swap) v = __builtin_bswap64(v) >> (64 - 8 * in.width);
  std::memcpy(device_at(w, addr), &v, in.width);  // little-endian: the low bytes
  g[REG_RIP] += in.length;
  g_decoded.fetch_add(1, std::memory_order_relaxed);
  report(w, addr, &v, in.width);
  return true;
}

// MOVS/STOS, with REP: the elements whose destination is in the window, up to kStringPiece
// bytes, are made here; if the string goes on, the instruction resumes with the rest (RCX, RSI,
// RDI as the CPU leaves them after an interrupted iteration).
bool complete_string(const Window& w, const StoreInsn& in, greg_t* g) {
  const uint64_t count = in.rep ? uint64_t(g[REG_RCX]) : 1;
  const bool down = g[REG_EFL] & kDirectionFlag;
  const int64_t step = down ? -int64_t(in.width) : in.width;
  uint64_t dst = uint64_t(g[REG_RDI]), src = uint64_t(g[REG_RSI]);
  const uint64_t value = uint64_t(g[REG_RAX]);
  uint64_t done = 0;
  for (uint64_t d = dst; done < count && done < kStringPiece / in.width && inside(w, d, in.width);
       d += step)
    ++done;
  if (!done) return false;
  const uint64_t lo = down ? dst - (done - 1) * in.width : dst;
  const uint64_t hi = lo + done * in.width;
  uint8_t stored[kStringPiece];
  for (uint64_t k = 0; k < done; ++k, dst += step, src += step) {
    const void* from = in.from_memory ? reinterpret_cast<const void*>(src) : &value;
    std::memcpy(stored + (dst - lo), from, in.width);
    std::memcpy(device_at(w, dst), from, in.width);
  }
  g[REG_RDI] = greg_t(dst);
  if (in.from_memory) g[REG_RSI] = greg_t(src);
  if (in.rep) g[REG_RCX] = greg_t(count - done);
  if (done == count) g[REG_RIP] += in.length;
  g_decoded.fetch_add(1, std::memory_order_relaxed);
  report(w, lo, stored, uint32_t(hi - lo));
  return true;
}

// The page pair a vector store lands in (its bytes start where the store's address is in its
// page, prefilled from the device side: a masked store leaves the lanes it skips as they were),
// or -1 when every pair is in use.
int take_scratch(const Window& w, uint64_t addr, uint32_t width) {
  if (!g_scratch) return -1;
  for (int i = 0; i < kScratchPairs; ++i) {
    if (g_scratch_taken[i].exchange(true, std::memory_order_acquire)) continue;
    uint8_t* pair = g_scratch + size_t(i) * 2 * g_page;
    std::memcpy(pair + addr % g_page, device_at(w, addr), width);
    return i;
  }
  return -1;
}

// A vector store: its address register moves to the device side for one single step.
bool start_vector_step(const Window& w, const StoreInsn& in, ucontext_t* uc) {
  greg_t* g = uc->uc_mcontext.gregs;
  if (in.base == kRegRip || t_step.active) return false;
  uint64_t addr = effective_address(in, g);
  if (!inside(w, addr, in.width)) return false;
  Step& st = t_step;
  st.scratch = take_scratch(w, addr, in.width);
  const uint64_t page_of_addr = addr - addr % g_page;
  uint64_t delta = st.scratch < 0
                       ? w.device - w.lo.load(std::memory_order_relaxed)
                       : uint64_t(g_scratch + size_t(st.scratch) * 2 * g_page) - page_of_addr;
  st.landed = reinterpret_cast<uint8_t*>(addr + delta);
  // The base moves (never RSP: a signal frame could land on the device side), else the index,
  // by delta / scale (delta is whole pages).
  if (in.base != kNoReg && in.base != 4 && in.base != in.index) {
    st.greg = greg_of(in.base);
    st.moved_by = delta;
  } else if (in.base == kNoReg && in.index != kNoReg) {
    st.greg = greg_of(in.index);
    st.moved_by = delta / in.scale;
  } else {
    if (st.scratch >= 0) g_scratch_taken[st.scratch].store(false, std::memory_order_release);
    return false;
  }
  st.window = &w;
  st.offset = addr - w.lo.load(std::memory_order_relaxed);
  st.bytes = in.width;
  st.trap_flag_was_set = g[REG_EFL] & kTrapFlag;
  g[st.greg] = greg_t(uint64_t(g[st.greg]) + st.moved_by);
  g[REG_EFL] |= kTrapFlag;
  // No other signal's handler runs between here and the step (it would see the moved register,
  // and a store of its own to a window would find this step taken); SIGTRAP must not be blocked
  // or the kernel would end the process on the step's trap.
  st.mask = uc->uc_sigmask;
  sigfillset(&uc->uc_sigmask);
  for (int s : {SIGTRAP, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigdelset(&uc->uc_sigmask, s);
  st.active = true;
  return true;
}

void say_unknown(const uint8_t* rip) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  static const char kHex[] = "0123456789abcdef";
  char msg[160] =
      "emu: a store to an emulated device register by an instruction the MMIO trap "
      "does not decode:";
  size_t n = strlen(msg);
  for (int i = 0; i < 12 && n + 4 < sizeof msg; ++i) {
    msg[n++] = ' ';
    msg[n++] = kHex[rip[i] >> 4];
    msg[n++] = kHex[rip[i] & 15];
  }
  msg[n++] = '\n';
  ssize_t ignored = write(2, msg, n);
  (void)ignored;
}

bool claim_store(int sig, siginfo_t* si, void* ctx) {
  if (sig != SIGSEGV || si->si_code != SEGV_ACCERR) return false;
  const Window* w = window_at(reinterpret_cast<uint64_t>(si->si_addr));
  if (!w) return false;
  auto* uc = static_cast<ucontext_t*>(ctx);
  greg_t* g = uc->uc_mcontext.gregs;
  const auto* rip = reinterpret_cast<const uint8_t*>(g[REG_RIP]);
  t_insn = uint64_t(g[REG_RIP]);
  StoreInsn in = decode_store(rip);
  bool done = false;
  switch (in.kind) {
    case StoreInsn::kGpr:
    case StoreInsn::kImm:
      done = complete_scalar(*w, in, g);
      break;
    case StoreInsn::kString:
      done = complete_string(*w, in, g);
      break;
    case StoreInsn::kVector:
      done = start_vector_step(*w, in, uc);
      break;
    case StoreInsn::kNone:
      break;
  }
  if (!done) {
    g_unknown.fetch_add(1, std::memory_order_relaxed);
    say_unknown(rip);
  }
  return done;
}

bool claim_step(int sig, siginfo_t*, void* ctx) {
  Step& st = t_step;
  if (sig != SIGTRAP || !st.active) return false;
  auto* uc = static_cast<ucontext_t*>(ctx);
  greg_t* g = uc->uc_mcontext.gregs;
  g[st.greg] = greg_t(uint64_t(g[st.greg]) - st.moved_by);
  if (!st.trap_flag_was_set) g[REG_EFL] &= ~greg_t(kTrapFlag);
  uc->uc_sigmask = st.mask;
  st.active = false;
  g_stepped.fetch_add(1, std::memory_order_relaxed);
  const uint64_t addr = st.window->lo.load(std::memory_order_relaxed) + st.offset;
  if (st.scratch >= 0) std::memcpy(device_at(*st.window, addr), st.landed, st.bytes);
  report(*st.window, addr, st.landed, st.bytes);
  if (st.scratch >= 0) g_scratch_taken[st.scratch].store(false, std::memory_order_release);
  return true;
}

// The vector stores' page pairs, once (under the window mutex). Without them (no memory) vector
// stores land on the device side.
void map_scratch(uint64_t page) {
  if (g_scratch) return;
  void* p = mmap(nullptr, kScratchPairs * 2 * page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  g_page = page;
  g_scratch = static_cast<uint8_t*>(p);
}

}  // namespace

uint64_t storing_instruction() { return t_insn; }

uint64_t store_site() {
  void* frames[24];
  int n = backtrace(frames, 24);
  Dl_info self{}, libc{};
  dladdr(reinterpret_cast<void*>(&store_site), &self);
  dladdr(reinterpret_cast<void*>(&backtrace), &libc);
  for (int i = 0; i < n; ++i) {
    Dl_info at{};
    if (!dladdr(frames[i], &at)) continue;
    if (at.dli_fbase != self.dli_fbase && at.dli_fbase != libc.dli_fbase)
      return reinterpret_cast<uint64_t>(frames[i]);
  }
  return t_insn;
}

int trap_window_add(void* view, size_t len, void* device, StoreSink sink, void* cookie) {
  uint64_t lo = reinterpret_cast<uint64_t>(view);
  uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  if (!len || lo % page || len % page || !sink) return -EINVAL;
  fault_claimant_add(SIGSEGV, claim_store);
  fault_claimant_add(SIGTRAP, claim_step);
  std::lock_guard<std::mutex> lock(g_window_mutex);
  map_scratch(page);
  for (int i = 0; i < kWindows; ++i) {
    Window& w = g_windows[i];
    if (w.hi.load(std::memory_order_relaxed)) continue;
    w.device = reinterpret_cast<uint64_t>(device);
    w.sink = sink;
    w.cookie = cookie;
    w.lo.store(lo, std::memory_order_release);
    w.hi.store(lo + len, std::memory_order_release);
    if (g_window_end.load(std::memory_order_relaxed) <= i)
      g_window_end.store(i + 1, std::memory_order_release);
    return i;
  }
  return -ENOSPC;
}

void trap_window_remove(int handle) {
  if (handle < 0 || handle >= kWindows) return;
  std::lock_guard<std::mutex> lock(g_window_mutex);
  g_windows[handle].hi.store(0, std::memory_order_release);
  g_windows[handle].lo.store(0, std::memory_order_release);
}

int map_trapped_pages(int fd, uint64_t offset, size_t len, void** view, void** device) {
  void* v = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off_t(offset));
  if (v == MAP_FAILED) return -errno;
  void* d = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(offset));
  if (d == MAP_FAILED) {
    int e = errno;
    munmap(v, len);
    return -e;
  }
  *view = v;
  *device = d;
  return 0;
}

TrapCounts trap_counts() { return {g_decoded.load(), g_stepped.load(), g_unknown.load()}; }

}  // namespace emu::mmio
