// SPDX-License-Identifier: BSD-2-Clause
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <vector>

#include "dma/memory.h"
#include "emu/dma_guard.h"

using namespace emu;

namespace {
uint64_t a(const void* p) { return reinterpret_cast<uint64_t>(p); }
}  // namespace

TEST(Dma, LocalGatherScatterAcrossUnevenSpans) {
  char src1[5] = {'a', 'b', 'c', 'd', 'e'}, src2[3] = {'f', 'g', 'h'};
  char dst1[2] = {}, dst2[6] = {};
  MemSpan s[] = {{a(src1), 5}, {a(src2), 3}};
  MemSpan d[] = {{a(dst1), 2}, {a(dst2), 6}};
  ASSERT_EQ(dma_copy(0, s, 2, 0, d, 2), CopyResult::ok);
  EXPECT_EQ(std::string(dst1, 2) + std::string(dst2, 6), "abcdefgh");
}

// One span each way in this process, every length up to past the small-copy limit (16 bytes):
// the shorter span's bytes move, nothing after them.
TEST(Dma, OneLocalSpanEachWayMovesTheShorterLength) {
  for (uint64_t n = 0; n <= 40; ++n) {
    for (uint64_t extra : {uint64_t{0}, uint64_t{3}}) {
      char src[48], dst[48];
      for (int i = 0; i < 48; ++i) src[i] = static_cast<char>(i + 1);
      std::memset(dst, 0x55, sizeof dst);
      MemSpan s{a(src), n + extra}, d{a(dst), n};
      ASSERT_EQ(dma_copy(0, &s, 1, getpid(), &d, 1), CopyResult::ok);
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], src[i]) << "length " << n << " byte " << i;
      for (uint64_t i = n; i < sizeof dst; ++i) ASSERT_EQ(dst[i], 0x55) << "length " << n;
    }
  }
}

TEST(Dma, CrossProcessWriteAndRead) {
  // A child keeps a buffer; the parent writes into it and reads it back without the child acting.
  static char buf[4096];
  std::memset(buf, 0, sizeof buf);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    (void)!read(go[0], &c, 1);  // blocks: the parent does the DMA meanwhile
    _exit(0);
  }
  std::vector<char> payload(3000, 'x');
  MemSpan s{a(payload.data()), payload.size()}, d{a(buf + 100), payload.size()};
  ASSERT_EQ(dma_copy(0, &s, 1, child, &d, 1), CopyResult::ok);
  std::vector<char> back(payload.size());
  MemSpan rs{a(buf + 100), back.size()}, rd{a(back.data()), back.size()};
  ASSERT_EQ(dma_copy(child, &rs, 1, 0, &rd, 1), CopyResult::ok);
  EXPECT_EQ(back, payload);
  uint64_t v = 0;
  ASSERT_EQ(dma_write64(child, a(buf), 0x1122334455667788ull), CopyResult::ok);
  ASSERT_EQ(dma_read64(child, a(buf), &v), CopyResult::ok);
  EXPECT_EQ(v, 0x1122334455667788ull);
  EXPECT_EQ(buf[100], 0) << "our own copy of the buffer is untouched: the child's was written";
  (void)!write(go[1], "g", 1);
  waitpid(child, nullptr, 0);
  // The child is gone: the device sees a vanished peer, not a fault.
  EXPECT_EQ(dma_copy(0, &s, 1, child, &d, 1), CopyResult::dst_gone);
}

TEST(Dma, UnmappedRemoteAddressIsAFault) {
  pid_t child = fork();
  int go[2];
  if (child == 0) {
    pause();
    _exit(0);
  }
  (void)go;
  char x[8] = {};
  MemSpan s{a(x), 8}, d{8, 8};  // page zero is never mapped
  EXPECT_EQ(dma_copy(0, &s, 1, child, &d, 1), CopyResult::dst_fault);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// The engine copies a message into a larger scatter list (a receive bigger than the SEND), in
// both directions of a cross-process copy: the copy ends with the shorter list.
TEST(Dma, ScatterLongerThanGatherEndsWithTheMessage) {
  static char buf[4096];
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  char small[100];
  std::memset(small, 'm', sizeof small);
  char big[4096] = {};
  // Remote 100 bytes -> local 4096-byte list.
  MemSpan rs{a(buf), 100}, ld{a(big), sizeof big};
  EXPECT_EQ(dma_copy(child, &rs, 1, 0, &ld, 1), CopyResult::ok);
  // Local 100 bytes -> remote 4096-byte list.
  MemSpan ls{a(small), sizeof small}, rd{a(buf), sizeof buf};
  EXPECT_EQ(dma_copy(0, &ls, 1, child, &rd, 1), CopyResult::ok);
  (void)!write(go[1], "g", 1);
  waitpid(child, nullptr, 0);
}

// ---- guarded copies (emu/dma_guard.h): a page the program unmapped is a fault, not a SIGSEGV ----

namespace {

// What the provider's handler does first (verbs_provider/memory/page_move.cpp), installed for the
// test.
struct RecoveringHandler {
  struct sigaction old_segv {
  }, old_bus{};
  RecoveringHandler() {
    struct sigaction sa {};
    sa.sa_sigaction = [](int, siginfo_t* si, void* ctx) {
      dma_fault_recover(si, ctx);
      std::abort();  // not a guarded copy's fault: the test has failed
    };
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
  }
  ~RecoveringHandler() {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
  }
};

// Two pages, the second unmapped: a span over both reaches a missing page after a mapped one.
char* page_then_hole() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  munmap(static_cast<char*>(p) + page, page);
  return static_cast<char*>(p);
}

}  // namespace

// Local copies into and out of a page that is gone fail on the side that holds it; the thread's
// signal mask is as before (the next fault is caught again), and copies go on working.
TEST(Dma, AMissingLocalPageIsTheFaultOfItsSide) {
  RecoveringHandler h;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* p = page_then_hole();
  ASSERT_NE(p, nullptr);
  std::vector<char> ok(2 * page, 'k');
  MemSpan into{a(p + page - 64), 128}, from{a(ok.data()), 128};
  EXPECT_EQ(dma_copy(0, &from, 1, 0, &into, 1), CopyResult::dst_fault);
  EXPECT_EQ(dma_copy(0, &into, 1, 0, &from, 1), CopyResult::src_fault);
  // Gather and scatter lists, the missing page in the second span of each.
  MemSpan two_into[] = {{a(ok.data() + 1000), 10}, {a(p + page), 8}};
  MemSpan two_from[] = {{a(ok.data()), 10}, {a(ok.data() + 500), 8}};
  EXPECT_EQ(dma_copy(0, two_from, 2, 0, two_into, 2), CopyResult::dst_fault);
  EXPECT_EQ(dma_copy(0, two_into, 2, 0, two_from, 2), CopyResult::src_fault);
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  EXPECT_FALSE(sigismember(&mask, SIGSEGV));
  EXPECT_FALSE(guarded_copy(p + page, ok.data(), 8));
  EXPECT_TRUE(guarded_copy(p, ok.data(), 8));
  MemSpan fine{a(p), 64};
  EXPECT_EQ(dma_copy(0, &from, 1, 0, &fine, 1), CopyResult::ok);
  munmap(p, page);
}

// Between processes the kernel's EFAULT names no side: a local buffer that is not mapped makes
// it ours (a READ into it is the requester's protection error, not the responder's).
TEST(Dma, AMissingLocalPageAcrossProcessesIsTheLocalSides) {
  static char buf[4096];
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    close(go[1]);  // so that the parent's close is the end of the pipe
    char c;
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* p = page_then_hole();
  ASSERT_NE(p, nullptr);
  MemSpan remote{a(buf), 128}, local{a(p + page - 64), 128};
  EXPECT_EQ(dma_copy(child, &remote, 1, 0, &local, 1), CopyResult::dst_fault);  // READ into it
  EXPECT_EQ(dma_copy(0, &local, 1, child, &remote, 1), CopyResult::src_fault);  // WRITE from it
  MemSpan mapped{a(p), 128}, far{a(buf) + (1ull << 46), 128};  // the child's side is missing
  EXPECT_EQ(dma_copy(child, &far, 1, 0, &mapped, 1), CopyResult::src_fault);
  EXPECT_EQ(dma_copy(0, &mapped, 1, child, &far, 1), CopyResult::dst_fault);
  close(go[1]);
  waitpid(child, nullptr, 0);
  close(go[0]);
  munmap(p, page);
}
