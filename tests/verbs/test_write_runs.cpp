// SPDX-License-Identifier: BSD-2-Clause
// Runs of RDMA WRITEs posted in one call: the device may execute a run with one copy, and must give
// exactly what one-at-a-time execution gives — every byte, the completions of the signaled WRs, and
// an error at the first bad WR with the ones before it done and the ones after it flushed.
#include <cstring>
#include <vector>

#include "verbs_fixture.h"

namespace vt {
namespace {

class WriteRuns : public VerbsTest {
 protected:
  void SetUpObjects() override {
    QpCaps caps;
    caps.max_send_wr = 128;
    caps.max_inline_data = 64;
    p = make_pair(caps);
    ASSERT_TRUE(p.a && p.b);
    src = make_buf(1 << 16, kAllAccess, 0);
    dst = make_buf(1 << 16, kAllAccess, 0);
    for (size_t i = 0; i < src.len; ++i) src.p[i] = static_cast<uint8_t>(i * 31 + 5);
  }
  // A chain of n writes of varied sizes to disjoint places, every 8th inline, the last signaled.
  std::vector<ibv_send_wr> chain(int n, std::vector<ibv_sge>& sges, size_t* off_end) {
    std::vector<ibv_send_wr> wrs(n);
    sges.resize(n);
    size_t off = 0;
    for (int i = 0; i < n; ++i) {
      uint32_t len = 1 + (i * 37) % 600;
      if (i % 8 == 0) len = 1 + i % 60;  // inline-sized
      sges[i] = src.sge(off, len);
      unsigned flags = (i % 8 == 0) ? IBV_SEND_INLINE : 0;
      if (i == n - 1) flags |= IBV_SEND_SIGNALED;
      wrs[i] =
          rdma_wr(1000 + i, IBV_WR_RDMA_WRITE, &sges[i], 1, dst.addr() + off, dst.rkey(), flags);
      if (i + 1 < n) wrs[i].next = &wrs[i + 1];
      off += len + 3;
    }
    *off_end = off;
    return wrs;
  }
  // The same chain as RDMA READs of src's bytes into the same places of dst (no inline).
  void as_reads(std::vector<ibv_send_wr>& wrs, std::vector<ibv_sge>& sges) {
    for (size_t i = 0; i < wrs.size(); ++i) {
      uint64_t off = sges[i].addr - src.addr();
      sges[i] = dst.sge(off, sges[i].length);
      wrs[i].opcode = IBV_WR_RDMA_READ;
      wrs[i].send_flags &= ~IBV_SEND_INLINE;
      wrs[i].wr.rdma.remote_addr = src.addr() + off;
      wrs[i].wr.rdma.rkey = src.rkey();
    }
  }
  void chain_moves_every_byte(bool reads);
  Pair p;
  Buf src, dst;
};

// A chain of 100 writes (or, as_reads, reads) posted in one call moves every byte to dst, and only
// the signaled last one completes.
TEST_F(WriteRuns, ChainOfWritesMovesEveryByte) { chain_moves_every_byte(false); }
// A run of READs (one DMA call: one process_vm_readv for another process's private memory).
TEST_F(WriteRuns, ChainOfReadsMovesEveryByte) { chain_moves_every_byte(true); }

void WriteRuns::chain_moves_every_byte(bool reads) {
  std::vector<ibv_sge> sges;
  size_t end = 0;
  auto wrs = chain(100, sges, &end);
  if (reads) as_reads(wrs, sges);
  const char* what = reads ? "read " : "write ";
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, wrs.data(), &bad), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 1099));
  for (int i = 0; i < 100; ++i) {
    size_t off = sges[i].addr - (reads ? dst.addr() : src.addr());
    ASSERT_EQ(std::memcmp(dst.p + off, src.p + off, sges[i].length), 0) << what << i;
    ASSERT_EQ(dst.p[off + sges[i].length], 0) << what << i << " overran";
  }
  EXPECT_TRUE(drain(p.cqa).empty()) << "unsignaled WRs completed";
}

// A stream of inline writes into consecutive slots (the device joins adjacent targets into one
// span and gathers the inline payloads into one source), with a gap after every 16th and a
// non-inline write among them: every slot holds its own bytes, the gaps stay untouched.
TEST_F(WriteRuns, AdjacentInlineWritesMoveEveryByte) {
  constexpr int kN = 64;
  std::vector<ibv_send_wr> wrs(kN);
  std::vector<ibv_sge> sges(kN);
  std::vector<size_t> at(kN);
  size_t off = 0;
  for (int i = 0; i < kN; ++i) {
    at[i] = off;
    sges[i] = src.sge(static_cast<size_t>(i) * 8, 8);
    unsigned flags = i == 40 ? 0 : IBV_SEND_INLINE;
    if (i == kN - 1) flags |= IBV_SEND_SIGNALED;
    wrs[i] = rdma_wr(2000 + i, IBV_WR_RDMA_WRITE, &sges[i], 1, dst.addr() + off, dst.rkey(), flags);
    if (i + 1 < kN) wrs[i].next = &wrs[i + 1];
    off += 8 + (i % 16 == 15 ? 8 : 0);
  }
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, wrs.data(), &bad), 0);
  ASSERT_TRUE(wait_wc(p.cqa, IBV_WC_SUCCESS, 2000 + kN - 1));
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(std::memcmp(dst.p + at[i], src.p + static_cast<size_t>(i) * 8, 8), 0)
        << "write " << i;
    if (i % 16 != 15) continue;
    for (int g = 8; g < 16; ++g) ASSERT_EQ(dst.p[at[i] + g], 0) << "gap after write " << i;
  }
  EXPECT_TRUE(drain(p.cqa).empty()) << "unsignaled WRs completed";
}

TEST_F(WriteRuns, BadRkeyInTheMiddleStopsTheRunThere) {
  std::vector<ibv_sge> sges;
  size_t end = 0;
  auto wrs = chain(20, sges, &end);
  wrs[9].wr.rdma.rkey ^= 0x5500;  // the tenth write names no MR
  for (auto& w : wrs) w.send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(p.a, wrs.data(), &bad), 0);
  auto wcs = poll_n(p.cqa, 20);
  ASSERT_EQ(wcs.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 1000u + i);
    ibv_wc_status want = i < 9    ? IBV_WC_SUCCESS
                         : i == 9 ? IBV_WC_REM_ACCESS_ERR
                                  : IBV_WC_WR_FLUSH_ERR;
    EXPECT_EQ(wcs[i].status, want) << "write " << i;
    size_t off = sges[i].addr - src.addr();
    if (i < 9)
      EXPECT_EQ(std::memcmp(dst.p + off, src.p + off, sges[i].length), 0) << "write " << i;
    else
      EXPECT_EQ(dst.p[off], 0) << "write " << i << " landed after the error";
  }
}

}  // namespace
}  // namespace vt
