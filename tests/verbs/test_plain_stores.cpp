// SPDX-License-Identifier: BSD-2-Clause
// Code that posts as hardware drivers do: WQEs built in the send ring, the doorbell record stored,
// then the doorbell register or a BlueFlame copy written with plain stores of every width the CPU
// has, completions read from the CQ ring by the owner bit — no call into the provider on the way
// (emudv_init_qp's registers are trapped pages, EMU_MMIO=trap). WRITE, READ, SEND and atomics to
// a peer process, every byte checked (docs/design/doorbells-and-mmio.md, "Plain stores").
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "emu/wqe.h"
#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

using namespace vt;
using emu::be16;
using emu::be32;
using emu::be64;

namespace {

constexpr size_t kRegion = 64 * 1024;
constexpr int kSends = 16;
constexpr uint32_t kSendLen = 24;

struct TargetInfo {
  uint32_t ok = 0;
  char err[128] = {};
  uint32_t qpn = 0;
  uint16_t lid = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
};
struct ParentInfo {
  uint32_t qpn;
  uint16_t lid;
};
struct SendsDone {
  uint32_t sends;
};
struct TargetReport {
  uint32_t ok = 1;
  char err[160] = {};
};

uint8_t send_byte(uint32_t send, uint32_t i) { return uint8_t(send * 29 + i * 7 + 1); }

// The peer: an RC QP with receives posted for the SENDs and a region for WRITE, READ and atomics.
void run_target() {
  TargetInfo me;
  PeerDevice d = peer_open_device(me, 64);
  static uint8_t region[kRegion], inbox[kSends][64];
  ibv_mr* mr = ibv_reg_mr(d.pd, region, kRegion,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ibv_mr* in_mr = ibv_reg_mr(d.pd, inbox, sizeof inbox, IBV_ACCESS_LOCAL_WRITE);
  ibv_qp* qp = mr && in_mr ? create_rc_qp(d.pd, d.cq, d.cq) : nullptr;
  if (!qp) peer_fail(me, "reg_mr/create_qp");
  me = TargetInfo{1, {}, qp->qp_num, d.lid, reinterpret_cast<uintptr_t>(region), mr->rkey};
  peer_tell(me);
  auto parent = peer_hear<ParentInfo>();
  uint8_t ready = connect_qp(qp, parent.lid, parent.qpn, 0, 0) == 0;
  // The receives, before the parent hears that this side is ready.
  for (int i = 0; i < kSends && ready; ++i) {
    ibv_sge sg{reinterpret_cast<uintptr_t>(inbox[i]), 64, in_mr->lkey};
    ready = post_recv(qp, uint64_t(i), &sg, 1) == 0;
  }
  peer_tell(ready);
  auto done = peer_hear<SendsDone>();
  TargetReport rep;
  for (uint32_t s = 0; s < done.sends && rep.ok; ++s) {
    ibv_wc wc{};
    int n = 0;
    for (auto until = std::chrono::steady_clock::now() + kDeadline;
         n == 0 && std::chrono::steady_clock::now() < until;)
      n = ibv_poll_cq(d.cq, 1, &wc);
    if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != s || wc.byte_len != kSendLen) {
      peer_report_failure(rep, "receive %u: n %d status %d wr_id %llu len %u", s, n, wc.status,
                          static_cast<unsigned long long>(wc.wr_id), wc.byte_len);
      break;
    }
    for (uint32_t i = 0; i < kSendLen; ++i)
      if (inbox[s][i] != send_byte(s, i)) {
        peer_report_failure(rep, "receive %u byte %u: %u, sent %u", s, i, inbox[s][i],
                            send_byte(s, i));
        break;
      }
  }
  peer_finish(rep);
}
const PeerRole kTarget("plain-stores-target", run_target);

// How the register is written: the 8-byte doorbell, or a BlueFlame copy of the whole WQE in
// stores of one width.
enum class Ring { doorbell8, bf8, bf16, bf32, bf64, bf_movsb, bf_memcpy };

const char* ring_name(Ring r) {
  static const char* const kNames[] = {"doorbell8", "bf8",      "bf16",     "bf32",
                                       "bf64",      "bf_movsb", "bf_memcpy"};
  return kNames[int(r)];
}

__attribute__((target("avx2"))) void copy32(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    asm volatile("vmovdqu (%1), %%ymm0\n\tvmovdqu %%ymm0, (%0)\n\tvzeroupper" ::"r"(dst + i),
                 "r"(src + i)
                 : "xmm0", "memory");
}
__attribute__((target("avx512f"))) void copy64(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i += 64)
    asm volatile("vmovdqu64 (%1), %%zmm0\n\tvmovdqu64 %%zmm0, (%0)\n\tvzeroupper" ::"r"(dst + i),
                 "r"(src + i)
                 : "xmm0", "memory");
}

void copy_by(Ring r, uint8_t* dst, const uint8_t* src, size_t n) {
  switch (r) {
    case Ring::bf8:
      for (size_t i = 0; i < n; i += 8)
        asm volatile("movq %0, (%1)" ::"r"(*reinterpret_cast<const uint64_t*>(src + i)),
                     "r"(dst + i)
                     : "memory");
      break;
    case Ring::bf16:
      for (size_t i = 0; i < n; i += 16)
        asm volatile("movdqu (%1), %%xmm0\n\tmovdqu %%xmm0, (%0)" ::"r"(dst + i), "r"(src + i)
                     : "xmm0", "memory");
      break;
    case Ring::bf32:
      copy32(dst, src, n);
      break;
    case Ring::bf64:
      copy64(dst, src, n);
      break;
    case Ring::bf_movsb: {
      void* d = dst;
      const void* s = src;
      asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
      break;
    }
    default:
      std::memcpy(dst, src, n);
      break;
  }
}

// Every way of writing the register this CPU has.
std::vector<Ring> rings() {
  std::vector<Ring> r = {Ring::doorbell8, Ring::bf8, Ring::bf16, Ring::bf_movsb, Ring::bf_memcpy};
  if (__builtin_cpu_supports("avx2")) r.push_back(Ring::bf32);
  if (__builtin_cpu_supports("avx512f")) r.push_back(Ring::bf64);
  return r;
}

class PlainStores : public VerbsTest {
 protected:
  void SetUpObjects() override {
    dv_ = uctlite::emudv_fns();
    ASSERT_NE(dv_, nullptr) << "the provider's emudv_* functions";
    cq_ = make_cq(64);
    QpCaps caps;
    caps.max_inline_data = 64;
    qp_ = make_qp(cq_, cq_, caps);
    ASSERT_EQ(dv_->init_qp(qp_, &q_), 0);
    ASSERT_EQ(dv_->init_cq(cq_, &c_), 0);
    local_ = make_buf(4096);
    ci_ = *c_.dbrec;
  }

  // The WQE at the producer index: ring, record, register, as a driver posts.
  void post(emu::CtrlSeg ctrl, const void* segs, uint32_t seg_bytes, Ring ring) {
    alignas(64) uint8_t wqe[256] = {};
    uint32_t size = sizeof ctrl + seg_bytes;
    uint32_t bbs = (size + 63) / 64;
    emu::ctrl_set_index_opcode(ctrl, pi_, emu::ctrl_opcode(ctrl));
    emu::ctrl_set_qpn_ds(ctrl, q_.qpn, (size + 15) / 16);
    ctrl.fm_ce_se = emu::kCtrlCqUpdate;
    std::memcpy(wqe, &ctrl, sizeof ctrl);
    std::memcpy(wqe + sizeof ctrl, segs, seg_bytes);
    auto* sq = static_cast<uint8_t*>(q_.sq_buf);
    for (uint32_t b = 0; b < bbs; ++b)
      std::memcpy(sq + ((pi_ + b) & (q_.sq_wqe_cnt - 1)) * 64, wqe + b * 64, 64);
    pi_ += bbs;
    std::atomic_thread_fence(std::memory_order_release);  // udma_to_device_barrier
    q_.dbrec[1] = be32(pi_ & 0xffff);
    __builtin_ia32_sfence();  // mmio_wc_start
    if (ring == Ring::doorbell8) {
      uint64_t head;
      std::memcpy(&head, wqe, sizeof head);
      *q_.uar.db = head;
    } else {
      copy_by(ring, static_cast<uint8_t*>(q_.uar.bf) + bf_off_, wqe, bbs * 64);
      bf_off_ ^= q_.uar.bf_size;
    }
    __builtin_ia32_sfence();  // mmio_flush_writes
  }

  // The next CQE, read from the ring by its owner bit; its opcode (kCqeReq) and status checked.
  void expect_completion(const char* what, Ring ring) {
    const uint32_t log_cnt = __builtin_ctz(c_.cqe_cnt);
    auto* ring_buf = static_cast<const uint8_t*>(c_.buf);
    const uint8_t* p = ring_buf + (ci_ & (c_.cqe_cnt - 1)) * c_.cqe_size;
    uint8_t op_own = 0;
    for (auto until = std::chrono::steady_clock::now() + kDeadline;
         std::chrono::steady_clock::now() < until;) {
      op_own = __atomic_load_n(p + offsetof(emu::Cqe64, op_own), __ATOMIC_ACQUIRE);
      if (emu::cqe_is_new(op_own, ci_, log_cnt)) break;
      std::this_thread::yield();
    }
    ASSERT_TRUE(emu::cqe_is_new(op_own, ci_, log_cnt))
        << what << " by " << ring_name(ring) << ": no completion";
    emu::Cqe64 cqe;
    std::memcpy(&cqe, p, sizeof cqe);
    EXPECT_EQ(emu::cqe_opcode_of(op_own), emu::kCqeReq)
        << what << " by " << ring_name(ring) << ": an error completion";
    EXPECT_EQ(be16(cqe.wqe_counter), uint16_t(last_index_));
    ++ci_;
    __atomic_store_n(c_.dbrec, ci_, __ATOMIC_RELEASE);
  }

  // One signaled WQE and its completion.
  void run(uint8_t opcode, const void* segs, uint32_t seg_bytes, const char* what, Ring ring) {
    emu::CtrlSeg ctrl{};
    emu::ctrl_set_index_opcode(ctrl, 0, opcode);
    last_index_ = pi_;
    post(ctrl, segs, seg_bytes, ring);
    expect_completion(what, ring);
  }

  const uctlite::EmudvFns* dv_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  emudv_qp q_{};
  emudv_cq c_{};
  Buf local_;
  uint32_t pi_ = 0, ci_ = 0, last_index_ = 0, bf_off_ = 0;
};

TEST_F(PlainStores, WriteReadSendAndAtomicsAcrossProcessesByEveryStoreWidth) {
  Peer peer;
  TargetInfo t;
  peer.start("plain-stores-target", &t);
  ParentInfo me{qp_->qp_num, lid};
  ASSERT_TRUE(peer.send(&me, sizeof me));
  ASSERT_EQ(connect_qp(qp_, t.lid, t.qpn, 0, 0), 0);
  peer.expect_ready();

  uint32_t sends = 0;
  uint64_t counter = 0;
  const uint64_t counter_at = t.addr + kRegion - 8;
  for (Ring ring : rings()) {
    SCOPED_TRACE(ring_name(ring));
    const uint32_t n = uint32_t(ring);
    const uint64_t at = t.addr + n * 256;
    // RDMA WRITE, 40 bytes inline (a two-block WQE: 16 + 16 + 4 + 40 bytes).
    uint8_t payload[40];
    for (uint32_t i = 0; i < sizeof payload; ++i) payload[i] = uint8_t(n * 31 + i);
    uint8_t w[16 + 4 + sizeof payload] = {};
    emu::RaddrSeg r{be64(at), be32(t.rkey), 0};
    std::memcpy(w, &r, sizeof r);
    uint32_t hdr = be32(uint32_t(sizeof payload) | emu::kInlineSegFlag);
    std::memcpy(w + 16, &hdr, 4);
    std::memcpy(w + 20, payload, sizeof payload);
    run(emu::kOpRdmaWrite, w, sizeof w, "RDMA WRITE", ring);
    // RDMA READ of it back into local memory.
    std::memset(local_.p, 0, sizeof payload);
    uint8_t rd[32];
    emu::DataSeg ds{be32(sizeof payload), be32(local_.mr->lkey), be64(local_.addr())};
    std::memcpy(rd, &r, sizeof r);
    std::memcpy(rd + 16, &ds, sizeof ds);
    run(emu::kOpRdmaRead, rd, sizeof rd, "RDMA READ", ring);
    EXPECT_EQ(0, std::memcmp(local_.p, payload, sizeof payload)) << "read back what was written";
    // SEND, 24 bytes inline.
    uint8_t s[4 + kSendLen + 4] = {};
    uint32_t shdr = be32(kSendLen | emu::kInlineSegFlag);
    std::memcpy(s, &shdr, 4);
    for (uint32_t i = 0; i < kSendLen; ++i) s[4 + i] = send_byte(sends, i);
    run(emu::kOpSend, s, sizeof s, "SEND", ring);
    ++sends;
    // Fetch-and-add of n + 1, then compare-and-swap from the sum to a marker; each returns the
    // old value into local memory.
    uint8_t at_segs[48];
    emu::RaddrSeg cr{be64(counter_at), be32(t.rkey), 0};
    emu::AtomicSeg fa{be64(n + 1), 0};
    emu::DataSeg old{be32(8), be32(local_.mr->lkey), be64(local_.addr() + 64)};
    std::memcpy(at_segs, &cr, 16);
    std::memcpy(at_segs + 16, &fa, 16);
    std::memcpy(at_segs + 32, &old, 16);
    run(emu::kOpAtomicFa, at_segs, sizeof at_segs, "fetch-and-add", ring);
    uint64_t got;
    std::memcpy(&got, local_.p + 64, 8);
    EXPECT_EQ(got, counter) << "fetch-and-add returns the old value";
    counter += n + 1;
    emu::AtomicSeg cs{be64(counter * 2), be64(counter)};
    std::memcpy(at_segs + 16, &cs, 16);
    run(emu::kOpAtomicCs, at_segs, sizeof at_segs, "compare-and-swap", ring);
    std::memcpy(&got, local_.p + 64, 8);
    EXPECT_EQ(got, counter) << "compare-and-swap returns the old value";
    counter *= 2;
  }
  SendsDone done{sends};
  ASSERT_TRUE(peer.send(&done, sizeof done));
  TargetReport rep;
  peer.finish(&rep, kDeadline);
}

}  // namespace
