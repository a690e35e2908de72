// SPDX-License-Identifier: BSD-2-Clause
// Registered memory the program unmapped before deregistering it (issue 29 item 9;
// docs/design/registered-memory.md, "Registered memory a program unmapped"). Hardware keeps an MR's
// pages pinned until ibv_dereg_mr and goes on writing and reading them; the program that unmapped
// its buffer only lost its own view of them. emu0 must never end the process for it (the device's
// memcpy into a missing page was a SIGSEGV): with EMU_SHARED_MR on (the default) the MR's pages are
// in the registration file and the operation lands in them, as on hardware; with it off
// (the *_private variant) the operation completes with the error a device reports for memory it
// cannot reach (REM_ACCESS_ERR for the responder's buffer, LOC_PROT_ERR for the requester's own or
// for a receive buffer). WRITE, READ from an unmapped remote buffer and into an unmapped local
// one, fetch-and-add, SENDs into unmapped receive buffers (one that travels in the CQE and is
// placed by the receiver's poll, one copied by the device), with the memory's owner in this
// process and in another one.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// One RC QP pair per operation: an operation that fails puts its QPs in the error state.
enum Use { kWrite, kRead, kAtomic, kSendBig, kSendSmall, kLocal, kUses };
constexpr uint32_t kBigSend = 64;    // more than a CQE carries: the device copies or stages it
constexpr uint32_t kSmallSend = 16;  // to another process it travels in the CQE (poll places it)

// The target side's memory: T (kTargetPages pages: written, read, added to), receive buffers R0
// and R1 (a page each), all unmapped once the receives are posted; S stays mapped (the source
// and sink of the requester's local-buffer case).
constexpr size_t kTargetPages = 4;
constexpr uint8_t kTSeed = 11, kTStep = 3;  // T's bytes before it is unmapped
constexpr uint8_t kSSeed = 90, kSStep = 7;
constexpr uint8_t kRemapFill = 0xee;  // what the program maps at T's address afterwards
constexpr size_t kWarmOff = 2048;     // in S: the receive of the first SEND
// The WRITE of the remapped case: kRemapLen bytes of a pattern at T + kRemapOff.
constexpr size_t kRemapOff = 8, kRemapLen = 512;
constexpr uint8_t kRemapSeed = 5, kRemapStep = 17;

struct TargetInfo {
  uint32_t ok;
  uint16_t lid;
  uint32_t qpn[kUses];
  uint64_t t_addr, r_addr[2], s_addr;
  uint32_t t_rkey, r_rkey[2], s_rkey;
  char err[96];
};

struct RequesterInfo {
  uint16_t lid;
  uint32_t qpn[kUses];
};

// The target's receive completions: kSendBig's and kSendSmall's.
struct RecvResult {
  uint32_t ok;
  uint32_t status[2];
  char err[96];
};

struct FinalReport {
  uint32_t ok;
  char err[96];
};

uint8_t* map_pages(size_t n) {
  void* p = mmap(nullptr, n * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// The side whose memory goes: in this process (one process, two sets of QPs in loopback) or in a
// peer process. Every step returns false with `err` set on a failure.
struct Target {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp[kUses] = {};
  uint8_t *t = nullptr, *r[2] = {}, *s = nullptr;
  ibv_mr *t_mr = nullptr, *r_mr[2] = {}, *s_mr = nullptr;
  bool remapped = false;
  std::string err;

  bool fail(const std::string& what) {
    err = what + " (errno " + std::to_string(errno) + ")";
    return false;
  }

  bool setup(ibv_context* ctx, TargetInfo* info) {
    std::memset(info, 0, sizeof *info);
    pd = ibv_alloc_pd(ctx);
    cq = pd ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : nullptr;
    if (!cq) return fail("pd/cq");
    t = map_pages(kTargetPages);
    r[0] = map_pages(1);
    r[1] = map_pages(1);
    s = map_pages(1);
    if (!t || !r[0] || !r[1] || !s) return fail("mmap");
    fill_pattern(t, kTargetPages * kPage, kTSeed, kTStep);
    fill_pattern(s, kPage, kSSeed, kSStep);
    std::memset(r[0], 0, kPage);
    std::memset(r[1], 0, kPage);
    t_mr = ibv_reg_mr(pd, t, kTargetPages * kPage, kAllAccess);
    r_mr[0] = ibv_reg_mr(pd, r[0], kPage, kAllAccess);
    r_mr[1] = ibv_reg_mr(pd, r[1], kPage, kAllAccess);
    s_mr = ibv_reg_mr(pd, s, kPage, kAllAccess);
    if (!t_mr || !r_mr[0] || !r_mr[1] || !s_mr) return fail("reg_mr");
    ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa)) return fail("query_port");
    info->lid = pa.lid;
    for (int i = 0; i < kUses; ++i) {
      qp[i] = create_rc_qp(pd, cq, cq);
      if (!qp[i]) return fail("create_qp");
      info->qpn[i] = qp[i]->qp_num;
    }
    info->t_addr = reinterpret_cast<uint64_t>(t);
    info->t_rkey = t_mr->rkey;
    for (int i = 0; i < 2; ++i) {
      info->r_addr[i] = reinterpret_cast<uint64_t>(r[i]);
      info->r_rkey[i] = r_mr[i]->rkey;
    }
    info->s_addr = reinterpret_cast<uint64_t>(s);
    info->s_rkey = s_mr->rkey;
    info->ok = 1;
    return true;
  }

  // Connects, posts the two receives, then unmaps T, R0 and R1 with their MRs still registered
  // (`remap`: and maps new memory at T's address, as a program reusing the address would).
  bool arm(const RequesterInfo& req, bool remap) {
    for (int i = 0; i < kUses; ++i)
      if (connect_qp(qp[i], req.lid, req.qpn[i], 100 + i, 200 + i)) return fail("connect");
    // First a receive into S (mapped) for a SEND that makes the CQ take a staging area (its poll
    // does), so that the next large SEND from another process is staged under EMU_SHARED_MR=0
    // and placed by this side's poll into a buffer that is gone.
    ibv_sge warm{reinterpret_cast<uint64_t>(s) + kWarmOff, kBigSend, s_mr->lkey};
    if (post_recv(qp[kSendBig], 9, &warm, 1)) return fail("post_recv");
    for (int i = 0; i < 2; ++i) {
      ibv_sge sg{reinterpret_cast<uint64_t>(r[i]), static_cast<uint32_t>(kPage), r_mr[i]->lkey};
      if (post_recv(qp[kSendBig + i], 10 + i, &sg, 1)) return fail("post_recv");
    }
    if (munmap(t, kTargetPages * kPage) || munmap(r[0], kPage) || munmap(r[1], kPage))
      return fail("munmap");
    if (remap) {
      void* again = mmap(t, kTargetPages * kPage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (again != t) return fail("mmap again");
      std::memset(t, kRemapFill, kTargetPages * kPage);
      remapped = true;
    }
    return true;
  }

  bool check_remapped() {
    const bool written = !moving_on();
    for (size_t i = 0; i < kTargetPages * kPage; ++i) {
      if (written && i == kRemapOff) {
        if (!has_pattern(t + i, kRemapLen, kRemapSeed, kRemapStep))
          return fail("EMU_SHARED_MR=0: the WRITE is not in the memory mapped anew");
        i += kRemapLen - 1;
      } else if (t[i] != kRemapFill) {
        return fail("the memory mapped anew was written at " + std::to_string(i));
      }
    }
    return true;
  }

  // The receive of the SEND into S: it must have succeeded.
  bool poll_warm(RecvResult* res) {
    std::memset(res, 0, sizeof *res);
    std::vector<ibv_wc> wcs = poll_n(cq, 1);
    if (wcs.size() != 1 || wcs[0].status != IBV_WC_SUCCESS || wcs[0].wr_id != 9)
      return fail("the receive into mapped memory");
    res->ok = 1;
    return true;
  }

  bool poll_receives(RecvResult* res) {
    std::memset(res, 0, sizeof *res);
    std::vector<ibv_wc> wcs = poll_n(cq, 2);
    if (wcs.size() != 2) return fail("receive completions: " + std::to_string(wcs.size()));
    for (const ibv_wc& wc : wcs) {
      int i = wc.qp_num == qp[kSendBig]->qp_num ? 0 : wc.qp_num == qp[kSendSmall]->qp_num ? 1 : -1;
      if (i < 0) return fail("a receive completion of another QP");
      res->status[i] = wc.status;
    }
    res->ok = 1;
    return true;
  }

  // The memory mapped anew at T's address was not written (hardware writes the MR's pages), or,
  // under EMU_SHARED_MR=0, where the device follows the page tables, holds the WRITE and nothing
  // else (docs/design/registered-memory.md); then everything goes, the MRs of unmapped memory
  // deregistered as any.
  bool finish() {
    bool ok = true;
    if (remapped) ok = check_remapped();
    for (ibv_qp*& q : qp)
      if (q && ibv_destroy_qp(q)) ok = fail("destroy_qp");
    for (ibv_mr* mr : {t_mr, r_mr[0], r_mr[1], s_mr})
      if (mr && ibv_dereg_mr(mr)) ok = fail("dereg_mr");
    if (cq && ibv_destroy_cq(cq)) ok = fail("destroy_cq");
    if (pd && ibv_dealloc_pd(pd)) ok = fail("dealloc_pd");
    if (remapped) munmap(t, kTargetPages * kPage);
    munmap(s, kPage);
    return ok;
  }
};

// ---- the peer process: the target, told what to do over its pipes ----

[[noreturn]] void run_target_peer() {
  TargetInfo info{};
  ibv_context* ctx = peer_open_emu0();
  if (!ctx) peer_fail(info, "open emu0");
  Target tg;
  if (!tg.setup(ctx, &info)) {
    errno = 0;
    peer_fail(info, tg.err.c_str());
  }
  peer_tell(info);
  auto req = peer_hear<RequesterInfo>();
  auto remap = peer_hear<uint8_t>();
  uint8_t ready = tg.arm(req, remap != 0);
  peer_tell(ready);
  // 3: the SEND into S completed, take its receive; 1: take the two into the unmapped buffers;
  // 2: done.
  for (uint8_t cmd; (cmd = peer_hear<uint8_t>()) != 2;) {
    if (cmd != 1 && cmd != 3) _exit(4);
    RecvResult res{};
    if (!(cmd == 1 ? tg.poll_receives(&res) : tg.poll_warm(&res)))
      std::snprintf(res.err, sizeof res.err, "%s", tg.err.c_str());
    peer_tell(res);
  }
  FinalReport rep{};
  rep.ok = tg.finish();
  std::snprintf(rep.err, sizeof rep.err, "%s", tg.err.c_str());
  ibv_close_device(ctx);
  peer_finish(rep);
}
const PeerRole g_target_role("unmapped-target", run_target_peer);

// ---- the requester: this test process ----

class UnmappedMr : public VerbsTest {
 protected:
  void TearDown() override {
    if (lmr_) ibv_dereg_mr(lmr_);
    if (local_) munmap(local_, kPage);
    if (!in_peer_ && !finished_) here_.finish();  // a test that stopped early
    VerbsTest::TearDown();
  }

  // The target, in this process or a peer, armed (its memory unmapped) and connected to kUses QPs
  // of ours on cq_.
  void start(bool in_peer, bool remap) {
    in_peer_ = in_peer;
    if (in_peer) {
      ASSERT_NO_FATAL_FAILURE(peer_.start("unmapped-target", &ti_));
    } else {
      ASSERT_TRUE(here_.setup(ctx, &ti_)) << here_.err;
    }
    cq_ = make_cq();
    ASSERT_NE(cq_, nullptr);
    RequesterInfo req{};
    req.lid = lid;
    for (int i = 0; i < kUses; ++i) {
      qp_[i] = make_qp(cq_, cq_);
      ASSERT_NE(qp_[i], nullptr);
      req.qpn[i] = qp_[i]->qp_num;
      ASSERT_EQ(connect_qp(qp_[i], ti_.lid, ti_.qpn[i], 200 + i, 100 + i), 0);
    }
    // Our memory is mapped before the target's goes: in one process a mapping made after the
    // munmap may be given the freed addresses, where the device would find it instead of the
    // MR's pages (the difference docs/design/registered-memory.md describes).
    m_ = make_buf(4 * kPage);
    ASSERT_NE(m_.mr, nullptr);
    local_ = map_pages(1);
    ASSERT_NE(local_, nullptr);
    lmr_ = ibv_reg_mr(pd, local_, kPage, kAllAccess);
    ASSERT_NE(lmr_, nullptr);
    if (in_peer) {
      uint8_t r = remap;
      ASSERT_TRUE(peer_.send(&req, sizeof req));
      ASSERT_TRUE(peer_.send(&r, 1));
      ASSERT_NO_FATAL_FAILURE(peer_.expect_ready());
    } else {
      ASSERT_TRUE(here_.arm(req, remap)) << here_.err;
    }
  }

  // One signaled WR on qp_[use]: its completion's status (and the completion in *out).
  ibv_wc_status run(Use use, ibv_send_wr wr, ibv_wc* out = nullptr) {
    ibv_wc wc{};
    if (post_one(qp_[use], &wr) != 0) return IBV_WC_GENERAL_ERR;
    std::vector<ibv_wc> got = poll_n(cq_, 1);
    if (got.size() != 1) return IBV_WC_GENERAL_ERR;  // no completion by the deadline
    wc = got[0];
    EXPECT_EQ(wc.wr_id, wr.wr_id);
    if (out) *out = wc;
    return wc.status;
  }
  ibv_wc_status read_into(Use use, uint64_t raddr, uint32_t rkey, ibv_sge into) {
    return run(use, rdma_wr(1, IBV_WR_RDMA_READ, &into, 1, raddr, rkey));
  }

  // The target's receive completions: the SEND into S (`warm`), or the two SENDs into the
  // unmapped buffers.
  RecvResult receives(bool warm = false) {
    RecvResult res{};
    if (in_peer_) {
      uint8_t cmd = warm ? 3 : 1;
      EXPECT_TRUE(peer_.send(&cmd, 1));
      EXPECT_TRUE(peer_.recv_by(&res, sizeof res, std::chrono::steady_clock::now() + kDeadline));
    } else {
      EXPECT_TRUE(warm ? here_.poll_warm(&res) : here_.poll_receives(&res)) << here_.err;
    }
    EXPECT_EQ(res.ok, 1u) << res.err;
    return res;
  }

  void finish() {
    if (in_peer_) {
      uint8_t cmd = 2;
      ASSERT_TRUE(peer_.send(&cmd, 1));
      FinalReport rep{};
      peer_.finish(&rep, kDeadline);  // the peer is alive and exits 0: it did not crash
    } else {
      finished_ = true;
      EXPECT_TRUE(here_.finish()) << here_.err;
    }
  }

  // Every operation against the unmapped memory, checked.
  void every_operation();

  bool in_peer_ = false;
  bool finished_ = false;
  Peer peer_;
  Target here_;
  TargetInfo ti_{};
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_[kUses] = {};
  Buf m_;                     // ours, mapped: sources and sinks
  uint8_t* local_ = nullptr;  // ours, registered (lmr_), then unmapped
  ibv_mr* lmr_ = nullptr;
};

void UnmappedMr::every_operation() {
  const bool lands = moving_on();  // the MRs' pages are in the registration file
  const ibv_wc_status remote_err = lands ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;

  // WRITE into T, then READ it back: the bytes are in the MR's pages.
  fill_pattern(m_.p, 256, 77, 5);
  ibv_sge src = m_.sge(0, 256);
  EXPECT_EQ(run(kWrite, rdma_wr(1, IBV_WR_RDMA_WRITE, &src, 1, ti_.t_addr + 100, ti_.t_rkey)),
            remote_err);
  if (lands) {
    EXPECT_EQ(read_into(kWrite, ti_.t_addr + 100, ti_.t_rkey, m_.sge(1024, 256)), IBV_WC_SUCCESS);
    EXPECT_TRUE(has_pattern(m_.p + 1024, 256, 77, 5)) << "the WRITE is not in the MR's pages";
  }

  // READ what T held when it was unmapped (a page the WRITE did not touch).
  EXPECT_EQ(read_into(kRead, ti_.t_addr + kPage, ti_.t_rkey, m_.sge(2048, 512)), remote_err);
  if (lands) {
    EXPECT_TRUE(
        has_pattern(m_.p + 2048, 512, static_cast<uint8_t>(kTSeed + kPage * kTStep), kTStep))
        << "the READ did not find the MR's pages";
  }

  // Fetch-and-add on T: the old value comes back, the sum is in the MR's pages.
  uint8_t pattern[8];
  for (size_t i = 0; i < 8; ++i)
    pattern[i] = static_cast<uint8_t>(kTSeed + (2 * kPage + i) * kTStep);
  uint64_t before;
  std::memcpy(&before, pattern, 8);
  ibv_sge res = m_.sge(3072, 8);
  ibv_send_wr faa =
      atomic_wr(1, IBV_WR_ATOMIC_FETCH_AND_ADD, &res, ti_.t_addr + 2 * kPage, ti_.t_rkey, 5, 0);
  EXPECT_EQ(run(kAtomic, faa), remote_err);
  if (lands) {
    uint64_t got, sum;
    std::memcpy(&got, m_.p + 3072, 8);
    EXPECT_EQ(got, before);
    EXPECT_EQ(read_into(kAtomic, ti_.t_addr + 2 * kPage, ti_.t_rkey, m_.sge(3584, 8)),
              IBV_WC_SUCCESS);
    std::memcpy(&sum, m_.p + 3584, 8);
    EXPECT_EQ(sum, before + 5);
  }

  // SENDs into the unmapped receive buffers. Without the pages the receiver's completion says
  // LOC_PROT_ERR. The sender's says SUCCESS where the receiver's poll places the bytes (they
  // reached the receiving side; the error is its own) and REM_OP_ERR where the device found the
  // buffer gone (a responder's NAK).
  fill_pattern(m_.p + 4096, kBigSend, 31, 1);
  fill_pattern(m_.p + 4096 + 1024, kSmallSend, 151, 9);
  ibv_sge warm = m_.sge(4096, kBigSend);
  EXPECT_EQ(run(kSendBig, send_wr(1, IBV_WR_SEND, &warm, 1)), IBV_WC_SUCCESS);
  receives(true);
  const uint32_t len[2] = {kBigSend, kSmallSend};
  for (int i = 0; i < 2; ++i) {
    ibv_sge sg = m_.sge(4096 + 1024 * i, len[i]);
    ibv_wc_status st = run(static_cast<Use>(kSendBig + i), send_wr(1, IBV_WR_SEND, &sg, 1));
    if (lands) {
      EXPECT_EQ(st, IBV_WC_SUCCESS) << i;
    } else {
      EXPECT_TRUE(st == IBV_WC_SUCCESS || st == IBV_WC_REM_OP_ERR) << i << ": " << st;
    }
  }
  RecvResult rr = receives();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rr.status[i], lands ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR) << i;
    if (!lands) continue;
    // Read back from the receive buffer's MR: the payload is in its pages.
    uint8_t* back = m_.p + 8192 + 1024 * i;
    EXPECT_EQ(read_into(static_cast<Use>(kSendBig + i), ti_.r_addr[i], ti_.r_rkey[i],
                        m_.sge(8192 + 1024 * i, len[i])),
              IBV_WC_SUCCESS);
    EXPECT_TRUE(i == 0 ? has_pattern(back, kBigSend, 31, 1) : has_pattern(back, kSmallSend, 151, 9))
        << "the SEND is not in the receive MR's pages (" << i << ")";
  }

  // Our own buffer unmapped: a READ into it (from S, mapped), then a WRITE out of it into S and
  // a READ of that back: what the READ put in the MR's pages is what the WRITE took from them.
  // Without the pages, the READ is the requester's local protection error.
  ibv_mr* lmr = lmr_;
  ASSERT_EQ(munmap(local_, kPage), 0);
  uint64_t l = reinterpret_cast<uint64_t>(local_);
  local_ = nullptr;
  ibv_sge into{l, 128, lmr->lkey};
  EXPECT_EQ(read_into(kLocal, ti_.s_addr, ti_.s_rkey, into),
            lands ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR);
  if (lands) {
    ibv_sge from{l, 128, lmr->lkey};
    EXPECT_EQ(run(kLocal, rdma_wr(2, IBV_WR_RDMA_WRITE, &from, 1, ti_.s_addr + 1024, ti_.s_rkey)),
              IBV_WC_SUCCESS);
    EXPECT_EQ(read_into(kLocal, ti_.s_addr + 1024, ti_.s_rkey, m_.sge(12288, 128)), IBV_WC_SUCCESS);
    EXPECT_TRUE(has_pattern(m_.p + 12288, 128, kSSeed, kSStep))
        << "the READ into our unmapped buffer is not in its MR's pages";
  }
  lmr_ = nullptr;
  EXPECT_EQ(ibv_dereg_mr(lmr), 0);
}

TEST_F(UnmappedMr, OperationsOnMemoryUnmappedInThisProcess) {
  ASSERT_NO_FATAL_FAILURE(start(false, false));
  every_operation();
  finish();
}

TEST_F(UnmappedMr, OperationsOnMemoryUnmappedInAnotherProcess) {
  ASSERT_NO_FATAL_FAILURE(start(true, false));
  every_operation();
  finish();
}

// The owner maps new memory where the registered buffer was: the MR still means the old pages, so
// a WRITE lands there (read back through the MR) and the new memory keeps its bytes — where the
// device reaches the MR through its pages: another process's, moved into its registration file.
// (In the owner's own process the engine copies through the program's addresses, and an address
// that works is not told from the old pages.) Under EMU_SHARED_MR=0 process_vm_writev follows
// the page tables: the WRITE lands in the new memory, which the peer checks instead
// (docs/design/registered-memory.md lists it among the differences from hardware).
TEST_F(UnmappedMr, MemoryMappedAnewAtTheAddressIsNotWritten) {
  ASSERT_NO_FATAL_FAILURE(start(true, true));
  fill_pattern(m_.p, kRemapLen, kRemapSeed, kRemapStep);
  ibv_sge src = m_.sge(0, kRemapLen);
  const uint64_t at = ti_.t_addr + kRemapOff;
  EXPECT_EQ(run(kWrite, rdma_wr(1, IBV_WR_RDMA_WRITE, &src, 1, at, ti_.t_rkey)), IBV_WC_SUCCESS);
  EXPECT_EQ(read_into(kWrite, at, ti_.t_rkey, m_.sge(1024, kRemapLen)), IBV_WC_SUCCESS);
  EXPECT_TRUE(has_pattern(m_.p + 1024, kRemapLen, kRemapSeed, kRemapStep));
  // The peer's poll takes two receives: kSendBig's first, into S (mapped), and kSendSmall's,
  // into R1 (unmapped: its MR's pages, or under EMU_SHARED_MR=0 the error every_operation shows).
  const bool lands = moving_on();
  for (int i = 0; i < 2; ++i) {
    ibv_sge sg = m_.sge(2048, 8);
    ibv_wc_status st = run(static_cast<Use>(kSendBig + i), send_wr(1, IBV_WR_SEND, &sg, 1));
    if (lands || i == 0) {
      EXPECT_EQ(st, IBV_WC_SUCCESS) << i;
    } else {
      EXPECT_TRUE(st == IBV_WC_SUCCESS || st == IBV_WC_REM_OP_ERR) << i << ": " << st;
    }
  }
  RecvResult rr = receives();
  EXPECT_EQ(rr.status[0], IBV_WC_SUCCESS);
  EXPECT_EQ(rr.status[1], lands ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR);
  finish();  // the peer checks that its new memory was not written
}

}  // namespace
}  // namespace vt
