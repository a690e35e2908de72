// SPDX-License-Identifier: BSD-2-Clause
// Trapped register windows (verbs_provider/mmio/): every store form a program may use reaches the
// device side with its bytes and is reported once, on the storing thread; the program's own fault
// handlers keep getting their faults, set before or after the trap was installed.
#include <cpuid.h>
#include <gtest/gtest.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "mmio_trap.h"
#include "store_decode.h"

using emu::mmio::map_trapped_pages;
using emu::mmio::trap_window_add;
using emu::mmio::trap_window_remove;

namespace {

// What the sink saw: a fixed log (the sink runs in a signal handler).
struct Report {
  uint64_t offset;
  uint32_t bytes;
  uint32_t tid;
  uint8_t stored[16];  // the first bytes the sink was handed as this store's
};
constexpr int kLog = 1 << 16;
Report g_log[kLog];
std::atomic<int> g_logged{0};

uint32_t this_tid() { return uint32_t(syscall(SYS_gettid)); }

void record(void*, uint64_t offset, const uint8_t* stored, uint32_t bytes) {
  int i = g_logged.fetch_add(1);
  if (i >= kLog) return;
  g_log[i] = Report{offset, bytes, this_tid(), {}};
  memcpy(g_log[i].stored, stored, bytes < 16 ? bytes : 16);
}

class MmioTrap : public ::testing::Test {
 protected:
  static constexpr size_t kLen = 2 * 4096;
  void SetUp() override {
    fd_ = memfd_create("mmio-trap-test", 0);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(0, ftruncate(fd_, kLen));
    ASSERT_EQ(0, map_trapped_pages(fd_, 0, kLen, &view_, &dev_));
    handle_ = trap_window_add(view_, kLen, dev_, record, nullptr);
    ASSERT_GE(handle_, 0);
    g_logged = 0;
  }
  void TearDown() override {
    trap_window_remove(handle_);
    munmap(view_, kLen);
    munmap(dev_, kLen);
    close(fd_);
  }
  uint8_t* reg(size_t off) { return static_cast<uint8_t*>(view_) + off; }
  const uint8_t* device(size_t off) { return static_cast<uint8_t*>(dev_) + off; }
  // Exactly one report since SetUp (or the last take), of [off, off + bytes), on this thread.
  void expect_one(uint64_t off, uint32_t bytes) {
    ASSERT_EQ(1, g_logged.load());
    EXPECT_EQ(off, g_log[0].offset);
    EXPECT_EQ(bytes, g_log[0].bytes);
    EXPECT_EQ(this_tid(), g_log[0].tid);
    g_logged = 0;
  }
  void expect_bytes(size_t off, const void* want, size_t n) {
    EXPECT_EQ(0, memcmp(device(off), want, n)) << "at offset " << off << ", " << n << " bytes";
  }
  // Exactly these reports since SetUp, in this order (the thread not checked).
  struct Span {
    uint64_t offset;
    uint32_t bytes;
  };
  void expect_reports(std::initializer_list<Span> want) {
    ASSERT_EQ(int(want.size()), g_logged.load());
    int i = 0;
    for (const Span& w : want) {
      EXPECT_EQ(w.offset, g_log[i].offset) << "report " << i;
      EXPECT_EQ(w.bytes, g_log[i].bytes) << "report " << i;
      ++i;
    }
  }

  int fd_ = -1;
  int handle_ = -1;
  void* view_ = nullptr;
  void* dev_ = nullptr;
};

// Bytes that differ from their neighbours, to store.
void fill_pattern(uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(i * 37 + 11);
}

bool cpu_has_movbe() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_MOVBE);
}

TEST_F(MmioTrap, GeneralRegisterStoresOfEveryWidth) {
  uint64_t v = 0x1122334455667788ull;
  asm volatile("movb %b0, (%1)" ::"q"(v), "r"(reg(0)) : "memory");
  expect_one(0, 1);
  asm volatile("movw %w0, (%1)" ::"r"(v), "r"(reg(8)) : "memory");
  expect_one(8, 2);
  asm volatile("movl %k0, (%1)" ::"r"(v), "r"(reg(16)) : "memory");
  expect_one(16, 4);
  asm volatile("movq %0, (%1)" ::"r"(v), "r"(reg(24)) : "memory");
  expect_one(24, 8);
  asm volatile("movb %%ah, (%1)" ::"a"(v), "r"(reg(40)) : "memory");  // the high byte register
  expect_one(40, 1);
  asm volatile("movnti %0, (%1)" ::"r"(v), "r"(reg(48)) : "memory");
  expect_one(48, 8);
  const uint8_t le[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  EXPECT_EQ(0, memcmp(g_log[0].stored, le, 8)) << "the movnti's bytes, as the sink got them";
  expect_bytes(0, le, 1);
  expect_bytes(8, le, 2);
  expect_bytes(16, le, 4);
  expect_bytes(24, le, 8);
  expect_bytes(48, le, 8);
  EXPECT_EQ(0x77, *device(40));
}

TEST_F(MmioTrap, ExtendedRegistersAndScaledIndex) {
  register uint64_t value asm("r9") = 0x0102030405060708ull;
  register uint8_t* base asm("r10") = reg(64);
  register uint64_t index asm("r11") = 3;
  asm volatile("movq %0, 8(%1,%2,4)" ::"r"(value), "r"(base), "r"(index) : "memory");
  expect_one(64 + 8 + 12, 8);
  uint64_t got;
  memcpy(&got, device(84), 8);
  EXPECT_EQ(0x0102030405060708ull, got);
  // No base: the index alone, scaled.
  uint64_t scaled = reinterpret_cast<uint64_t>(reg(128)) / 8;
  asm volatile("movl $0xabcdef01, 0(,%0,8)" ::"r"(scaled) : "memory");
  expect_one(128, 4);
  uint32_t w;
  memcpy(&w, device(128), 4);
  EXPECT_EQ(0xabcdef01u, w);
}

TEST_F(MmioTrap, ImmediateStoresSignExtendAsTheCpuDoes) {
  asm volatile("movb $0x5a, (%0)" ::"r"(reg(0)) : "memory");
  expect_one(0, 1);
  asm volatile("movw $0x1234, (%0)" ::"r"(reg(8)) : "memory");
  expect_one(8, 2);
  asm volatile("movq $-2, (%0)" ::"r"(reg(16)) : "memory");
  expect_one(16, 8);
  uint64_t q;
  memcpy(&q, device(16), 8);
  EXPECT_EQ(uint64_t(-2), q);
  EXPECT_EQ(0x5a, *device(0));
  uint16_t h;
  memcpy(&h, device(8), 2);
  EXPECT_EQ(0x1234, h);
}

TEST_F(MmioTrap, MovbeStoresBigEndian) {
  if (!cpu_has_movbe()) {  // no MOVBE to run here: its encoding is still decoded as a store
    const uint8_t movbe[16] = {0x48, 0x0f, 0x38, 0xf1, 0x07};
    EXPECT_TRUE(emu::mmio::decode_store(movbe).byte_swap);
    return;
  }
  uint64_t v = 0x1122334455667788ull;
  asm volatile("movbe %0, (%1)" ::"r"(v), "r"(reg(0)) : "memory");
  expect_one(0, 8);
  const uint8_t be[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  expect_bytes(0, be, 8);
  asm volatile("movbe %k0, (%1)" ::"r"(v), "r"(reg(8)) : "memory");
  expect_one(8, 4);
  expect_bytes(8, be + 4, 4);
}

// Loads the 16 bytes at src into xmm<n> and stores from there by `insn %xmm<n>, dst`, with %0 =
// at; then expects that store reported once, at offset `off`, `bytes` long. Each store takes a
// register of its own: the trap reads the one the instruction names.
#define EXPECT_ONE_XMM_STORE(n, insn, dst, at, src, off, bytes)                               \
  do {                                                                                        \
    asm volatile("movdqu (%1), %%xmm" #n "\n\t" insn " %%xmm" #n ", " dst ::"r"(at), "r"(src) \
                 : "xmm" #n, "memory");                                                       \
    expect_one(off, bytes);                                                                   \
  } while (0)

TEST_F(MmioTrap, SseStores) {
  alignas(16) uint8_t src[16];
  fill_pattern(src, sizeof src);
  EXPECT_ONE_XMM_STORE(0, "movups", "(%0)", reg(0), src, 0, 16);
  EXPECT_ONE_XMM_STORE(1, "movdqa", "(%0)", reg(32), src, 32, 16);
  EXPECT_ONE_XMM_STORE(2, "movntdq", "16(%0)", reg(48), src, 64, 16);
  EXPECT_ONE_XMM_STORE(3, "movq", "(%0)", reg(96), src, 96, 8);
  EXPECT_ONE_XMM_STORE(4, "movhps", "(%0)", reg(112), src, 112, 8);
  EXPECT_ONE_XMM_STORE(5, "pextrw $3,", "(%0)", reg(120), src, 120, 2);
  EXPECT_ONE_XMM_STORE(6, "movss", "(%0)", reg(124), src, 124, 4);
  expect_bytes(0, src, 16);
  expect_bytes(32, src, 16);
  expect_bytes(64, src, 16);
  expect_bytes(96, src, 8);
  expect_bytes(112, src + 8, 8);
  expect_bytes(120, src + 6, 2);
  expect_bytes(124, src, 4);
}
#undef EXPECT_ONE_XMM_STORE

__attribute__((target("avx2"))) void avx_stores(uint8_t* dst, const uint8_t* src) {
  asm volatile(
      "vmovdqu (%1), %%ymm0\n\t"
      "vmovdqu %%ymm0, (%0)\n\t"
      "vmovups %%xmm0, 64(%0)\n\t"
      "vextracti128 $1, %%ymm0, 96(%0)\n\t"
      "vzeroupper" ::"r"(dst),
      "r"(src)
      : "xmm0", "memory");
}

TEST_F(MmioTrap, AvxStores) {
  if (!__builtin_cpu_supports("avx2")) {  // no AVX2 to run here: its encoding is still decoded
    const uint8_t vmovdqu[16] = {0xc5, 0xfe, 0x7f, 0x07};
    EXPECT_EQ(32, emu::mmio::decode_store(vmovdqu).width);
    return;
  }
  uint8_t src[32];
  fill_pattern(src, sizeof src);
  avx_stores(reg(0), src);
  expect_reports({{0, 32}, {64, 16}, {96, 16}});
  expect_bytes(0, src, 32);
  expect_bytes(64, src, 16);
  expect_bytes(96, src + 16, 16);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void avx512_stores(uint8_t* dst,
                                                                        const uint8_t* src) {
  // A zmm store with a compressed displacement (disp8 1 = 64 bytes), and a byte-masked store
  // from an upper register (as glibc's EVEX memmove writes): the mask keeps bytes 4..7 as they
  // were.
  uint64_t mask = ~0xf0ull;
  asm volatile(
      "vmovdqu64 (%1), %%zmm0\n\t"
      "vmovdqu64 %%zmm0, 64(%0)\n\t"
      "vmovdqu8 (%1), %%ymm17\n\t"
      "kmovq %2, %%k1\n\t"
      "vmovdqu8 %%ymm17, 256(%0)%{%%k1%}\n\t"
      "vzeroupper" ::"r"(dst),
      "r"(src), "r"(mask)
      : "xmm0", "xmm17", "k1", "memory");
}

TEST_F(MmioTrap, Avx512StoresMaskedAndCompressedDisplacement) {
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl")) {
    // No AVX-512 to run here: its encoding is still decoded, disp8 compressed.
    const uint8_t zmm[16] = {0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x47, 0x01};
    EXPECT_EQ(64, emu::mmio::decode_store(zmm).disp);
    return;
  }
  uint8_t src[64];
  fill_pattern(src, sizeof src);
  avx512_stores(reg(0), src);
  expect_reports({{64, 64}, {256, 32}});
  expect_bytes(64, src, 64);
  expect_bytes(256, src, 4);
  expect_bytes(256 + 8, src + 8, 24);
  const uint8_t zero[4] = {};
  expect_bytes(256 + 4, zero, 4);  // masked off: the device side kept its bytes
}

TEST_F(MmioTrap, StringStoresForwardAndBackward) {
  uint8_t src[256];
  fill_pattern(src, sizeof src);
  {
    void* d = reg(0);
    const void* s = src;
    size_t n = 200;
    asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    EXPECT_EQ(0u, n);
    EXPECT_EQ(reg(200), d);
  }
  expect_one(0, 200);
  expect_bytes(0, src, 200);
  {
    void* d = reg(512);
    size_t n = 4;
    uint64_t v = 0x0123456789abcdefull;
    asm volatile("rep stosq" : "+D"(d), "+c"(n) : "a"(v) : "memory");
  }
  expect_one(512, 32);
  for (int i = 0; i < 4; ++i) {
    uint64_t q;
    memcpy(&q, device(512 + 8 * i), 8);
    EXPECT_EQ(0x0123456789abcdefull, q);
  }
  {  // backward (DF set): 16 quadwords ending at offset 1024 + 15 * 8
    void* d = reg(1024 + 15 * 8);
    const void* s = src + 15 * 8;
    size_t n = 16;
    asm volatile("std\n\trep movsq\n\tcld" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  }
  expect_one(1024, 128);
  expect_bytes(1024, src, 128);
  {
    void* d = reg(2000);
    asm volatile("stosb" : "+D"(d) : "a"(0x7e) : "memory");
  }
  expect_one(2000, 1);
  EXPECT_EQ(0x7e, *device(2000));
}

// A long string store reaches the sink in pieces of kStringPiece bytes, in order, each with the
// bytes it stored (the instruction resumes after each, as after an interrupt).
TEST_F(MmioTrap, LongStringStoresAreReportedInPieces) {
  constexpr uint32_t kPiece = emu::mmio::kStringPiece;
  std::vector<uint8_t> src(2 * kPiece + 88);
  fill_pattern(src.data(), src.size());
  void* d = reg(64);
  const void* s = src.data();
  size_t n = src.size();
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
  EXPECT_EQ(0u, n);
  EXPECT_EQ(reg(64 + src.size()), d);
  ASSERT_EQ(3, g_logged.load());
  const uint32_t sizes[3] = {kPiece, kPiece, 88};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(64u + k * kPiece, g_log[k].offset);
    EXPECT_EQ(sizes[k], g_log[k].bytes);
    EXPECT_EQ(0, memcmp(g_log[k].stored, src.data() + k * kPiece, 16)) << k;
  }
  expect_bytes(64, src.data(), src.size());
}

// glibc's memcpy and memmove pick their stores by size and CPU (vector widths, overlapping head
// and tail stores, REP MOVSB): every byte lands and every report lies inside the copy.
TEST_F(MmioTrap, LibcCopiesOfEverySizeLand) {
  std::vector<uint8_t> src(4096);
  fill_pattern(src.data(), src.size());
  for (size_t n : {1,  2,  3,   7,   8,   15,  16,  31,  32,   48,   63,
                   64, 65, 100, 128, 200, 256, 257, 512, 1000, 2048, 4000}) {
    for (size_t off : {0, 8, 64, 4096 - 64}) {
      if (off + n > kLen) continue;
      g_logged = 0;
      memset(dev_, 0, kLen);
      memcpy(reg(off), src.data() + 3, n);
      expect_bytes(off, src.data() + 3, n);
      int reports = g_logged.load();
      ASSERT_GT(reports, 0);
      ASSERT_LT(reports, kLog);
      for (int i = 0; i < reports; ++i) {
        EXPECT_GE(g_log[i].offset, off) << n;
        EXPECT_LE(g_log[i].offset + g_log[i].bytes, off + n) << n;
      }
      g_logged = 0;
      memmove(reg(off), src.data() + 5, n);
      expect_bytes(off, src.data() + 5, n);
    }
  }
}

// Threads storing at once: each store is its own thread's (no open window another thread's store
// could slip through unreported), and every byte is right.
TEST_F(MmioTrap, ThreadsStoringAtOnceAreEachReported) {
  constexpr int kThreads = 4, kStores = 2000;
  std::vector<std::thread> threads;
  std::atomic<int> go{0};
  uint32_t tids[kThreads] = {};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tids[t] = this_tid();
      while (!go.load()) {
      }
      alignas(16) uint8_t v[16];
      for (int i = 0; i < kStores; ++i) {
        memset(v, t * 16 + (i & 15), 16);
        uint8_t* at = reg(size_t(t) * 1024 + size_t(i % 32) * 32);
        if (i & 1)
          asm volatile("movdqu (%1), %%xmm0\n\tmovdqu %%xmm0, (%0)" ::"r"(at), "r"(v)
                       : "xmm0", "memory");
        else
          asm volatile("movq %0, (%1)" ::"r"(*reinterpret_cast<uint64_t*>(v)), "r"(at) : "memory");
      }
    });
  }
  go = 1;
  for (auto& th : threads) th.join();
  ASSERT_EQ(kThreads * kStores, g_logged.load());
  int per[kThreads] = {};
  for (int i = 0; i < kThreads * kStores; ++i) {
    int t = int(g_log[i].offset / 1024);
    ASSERT_LT(t, kThreads);
    EXPECT_EQ(tids[t], g_log[i].tid) << "a store reported on another thread";
    ++per[t];
  }
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(kStores, per[t]);
    // The last store at each of the thread's slots.
    for (int s = 0; s < 32; ++s) {
      int last = kStores - 32 + s;
      uint8_t want = uint8_t(t * 16 + (last & 15));
      size_t n = (last & 1) ? 16 : 8;
      for (size_t k = 0; k < n; ++k)
        ASSERT_EQ(want, *device(size_t(t) * 1024 + size_t(s) * 32 + k)) << t << " " << s;
    }
  }
}

// Two threads storing to the same 8 bytes at once: each store is reported with its own value
// (the device side holds one of them at a time; a doorbell word rung by two threads is two
// doorbells). Scalar stores are decoded; vector stores land in a page of their own first.
TEST_F(MmioTrap, ThreadsStoringOneWordEachReportTheirOwnValue) {
  constexpr int kThreads = 2, kStores = 4000;
  std::vector<std::thread> threads;
  std::atomic<int> go{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {
      }
      for (int i = 0; i < kStores; ++i) {
        uint64_t v = uint64_t(t + 1) << 32 | uint32_t(i);
        if (i & 1)
          asm volatile("movq %0, %%xmm1\n\tmovq %%xmm1, (%1)" ::"r"(v), "r"(reg(40))
                       : "xmm1", "memory");
        else
          asm volatile("movq %0, (%1)" ::"r"(v), "r"(reg(40)) : "memory");
      }
    });
  }
  go = 1;
  for (auto& th : threads) th.join();
  ASSERT_EQ(kThreads * kStores, g_logged.load());
  std::vector<int> seen(size_t(kThreads) * kStores, 0);
  for (int i = 0; i < kThreads * kStores; ++i) {
    ASSERT_EQ(40u, g_log[i].offset);
    ASSERT_EQ(8u, g_log[i].bytes);
    uint64_t v;
    memcpy(&v, g_log[i].stored, 8);
    uint64_t t = (v >> 32) - 1, k = uint32_t(v);
    ASSERT_LT(t, uint64_t(kThreads));
    ASSERT_LT(k, uint64_t(kStores));
    ++seen[t * kStores + k];
  }
  for (size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(1, seen[i]) << "store " << i % kStores << " of thread " << i / kStores;
}

// ---- the program's own handlers ----

sigjmp_buf g_jump;
std::atomic<int> g_program_faults{0};
void* g_program_fault_addr = nullptr;
void program_segv(int, siginfo_t* si, void*) {
  g_program_faults.fetch_add(1);
  g_program_fault_addr = si->si_addr;
  siglongjmp(g_jump, 1);
}

// Makes `handler` the program's SIGSEGV handler (an SA_SIGINFO one): sigaction's result, with the
// handler before in *old when old is not null.
int set_segv_handler(void (*handler)(int, siginfo_t*, void*), struct sigaction* old) {
  struct sigaction sa {};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO;
  return sigaction(SIGSEGV, &sa, old);
}

// A guard page the program probes: the fault is its own, its handler gets it.
bool probe(void* guard) {
  if (sigsetjmp(g_jump, 1) == 0) {
    *static_cast<volatile uint8_t*>(guard) = 1;
    return false;
  }
  return true;
}

TEST_F(MmioTrap, ProgramHandlerSetAfterTheTrapGetsItsFaults) {
  struct sigaction old {};
  struct sigaction back {};
  ASSERT_EQ(0, set_segv_handler(program_segv, &old));
  void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  g_program_faults = 0;
  EXPECT_TRUE(probe(guard));
  EXPECT_EQ(1, g_program_faults.load());
  EXPECT_EQ(guard, g_program_fault_addr);
  // Window stores still reach the device, and the program reads back its own handler.
  asm volatile("movq %0, (%1)" ::"r"(42ull), "r"(reg(0)) : "memory");
  expect_one(0, 8);
  ASSERT_EQ(0, sigaction(SIGSEGV, nullptr, &back));
  EXPECT_EQ(reinterpret_cast<void*>(program_segv), reinterpret_cast<void*>(back.sa_sigaction));
  // signal() answers with the handler it replaces.
  EXPECT_EQ(reinterpret_cast<void*>(program_segv),
            reinterpret_cast<void*>(signal(SIGSEGV, SIG_DFL)));
  ASSERT_EQ(0, sigaction(SIGSEGV, &old, nullptr));
  munmap(guard, 4096);
}

TEST_F(MmioTrap, StoreTheTrapCannotDecodeIsTheProgramsFault) {
  struct sigaction old {};
  ASSERT_EQ(0, set_segv_handler(program_segv, &old));
  g_program_faults = 0;
  uint64_t v = 1;
  if (sigsetjmp(g_jump, 1) == 0)
    asm volatile("lock xaddq %0, (%1)" : "+r"(v) : "r"(reg(8)) : "memory");
  EXPECT_EQ(1, g_program_faults.load());
  EXPECT_EQ(reg(8), g_program_fault_addr);
  EXPECT_EQ(0, g_logged.load());
  ASSERT_EQ(0, sigaction(SIGSEGV, &old, nullptr));
}

int child_status(void (*body)());

// In a child: a page of trapped window whose stores go to `sink`, or the child's exit with 2 or 3.
struct TrappedPage {
  void* view;
  void* dev;
};
TrappedPage trapped_page_or_exit(emu::mmio::StoreSink sink) {
  TrappedPage page{};
  int fd = memfd_create("mmio-child", 0);
  if (ftruncate(fd, 4096) || map_trapped_pages(fd, 0, 4096, &page.view, &page.dev)) _exit(2);
  if (trap_window_add(page.view, 4096, page.dev, sink, nullptr) < 0) _exit(3);
  return page;
}

// A fault inside the handling of an exit (as a guarded device copy into unmapped memory would
// take) reaches its handler: the fault signal is not blocked while ours runs.
sigjmp_buf g_in_sink;
void* g_sink_guard = nullptr;
std::atomic<int> g_sink_faults{0};
void sink_fault_handler(int, siginfo_t*, void*) {
  g_sink_faults.fetch_add(1);
  siglongjmp(g_in_sink, 1);
}
void probing_sink(void*, uint64_t offset, const uint8_t* stored, uint32_t bytes) {
  if (sigsetjmp(g_in_sink, 1) == 0) *static_cast<volatile uint8_t*>(g_sink_guard) = 1;
  record(nullptr, offset, stored, bytes);
}

TEST(MmioTrapChild, AFaultWhileAnExitIsHandledReachesItsHandler) {
  int status = child_status([] {
    set_segv_handler(sink_fault_handler, nullptr);
    g_logged = 0;
    g_sink_guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TrappedPage page = trapped_page_or_exit(probing_sink);
    *static_cast<volatile uint64_t*>(page.view) = 9;
    if (g_sink_faults.load() != 1 || g_logged.load() != 1 || *static_cast<uint64_t*>(page.dev) != 9)
      _exit(4);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(0, WEXITSTATUS(status));
}

std::atomic<int> g_program_traps{0};
void program_trap(int) { g_program_traps.fetch_add(1); }

TEST_F(MmioTrap, ProgramSigtrapHandlerGetsItsBreakpoints) {
  sighandler_t old = signal(SIGTRAP, program_trap);
  g_program_traps = 0;
  asm volatile("int3");
  EXPECT_EQ(1, g_program_traps.load());
  // A vector store's single step in between is not the program's.
  alignas(16) uint8_t v[16] = {1};
  asm volatile("movdqu (%1), %%xmm0\n\tmovdqu %%xmm0, (%0)" ::"r"(reg(0)), "r"(v)
               : "xmm0", "memory");
  expect_one(0, 16);
  EXPECT_EQ(1, g_program_traps.load());
  signal(SIGTRAP, old);
}

// In a child of its own. ctest runs each test in a process of its own, so there the program's
// handler is set before any trap is installed (run directly, the parent's trap came first).
int child_status(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(MmioTrapChild, ProgramHandlerSetBeforeTheTrapGetsItsFaults) {
  int status = child_status([] {
    set_segv_handler(program_segv, nullptr);
    g_program_faults = 0;
    g_logged = 0;
    TrappedPage page = trapped_page_or_exit(record);
    void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!probe(guard) || g_program_faults.load() != 1) _exit(4);
    *static_cast<volatile uint64_t*>(page.view) = 7;
    if (*static_cast<uint64_t*>(page.dev) != 7 || g_logged.load() != 1) _exit(5);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(0, WEXITSTATUS(status));
}

TEST(MmioTrapChild, UnhandledFaultsEndTheProcessAsWithoutTheTrap) {
  int status = child_status([] {
    trapped_page_or_exit(record);
    void* guard = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *static_cast<volatile uint8_t*>(guard) = 1;
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(SIGSEGV, WTERMSIG(status));
  status = child_status([] {
    trapped_page_or_exit(record);
    asm volatile("int3");
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(SIGTRAP, WTERMSIG(status));
}

}  // namespace
