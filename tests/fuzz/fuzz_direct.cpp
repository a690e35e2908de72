// SPDX-License-Identifier: BSD-2-Clause
// Garbage through the direct API (issue 16 item 5): what a program that writes WQEs, doorbell
// records and BlueFlame buffers itself (emudv.h, stress/uctlite_direct.cpp) can hand the device.
// Random WQEs in the ring (opcodes, segment counts, keys, addresses and lengths, the QP number),
// doorbell records behind and ahead of the producer, 8-byte doorbells naming any QP, BlueFlame
// buffers filled with garbage or torn between two writes, a CQ consumer index moved backwards.
// The device must answer with error completions and QPs in ERR, never crash (its engine may run
// in a peer's process), and the segment checker must find the segment consistent afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emu/barriers.h"
#include "emu/check.h"
#include "emu/device.h"
#include "emu/mmio.h"
#include "emu/objects.h"
#include "emu/wqe.h"
#include "fuzz_rng.h"

using namespace emu;

namespace {

constexpr uint32_t kSqBbs = 64, kLogCq = 6, kBuf = 1 << 16;

struct Outcomes {
  uint64_t ok = 0, errors = 0, qps_in_err = 0;
};

class DirectFuzz {
 public:
  explicit DirectFuzz(uint64_t seed) : rng_(seed) {
    EXPECT_EQ(create_ctx(s_, ContextSpec{0, 1, -1}, &ctx_), Status::ok);
    EXPECT_EQ(create_pd(s_, 0, ctx_, &pd_), Status::ok);
    EXPECT_EQ(create_cq(s_, CqSpec{0, ctx_, kLogCq, -1, 0}, &cq_), Status::ok);
    buf_.assign(kBuf, 0x5a);
    uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    uint32_t mi = 0;
    EXPECT_EQ(create_mr(s_, MrSpec{pd_, all, addr(0), kBuf / 2, addr(0)}, &mi), Status::ok);
    key_[0] = mr_slot(h_, mi).key;
    EXPECT_EQ(
        create_mr(s_, MrSpec{pd_, kAccessLocalWrite, addr(kBuf / 2), kBuf / 2, addr(kBuf / 2)},
                  &mi),
        Status::ok);
    key_[1] = mr_slot(h_, mi).key;
    for (uint32_t& q : qp_) q = make_qp();
    for (int k = 0; k < 2; ++k) qp_slot(h_, qp_[k]).dest_qpn = qp_slot(h_, qp_[1 - k]).qpn;
    for (uint32_t q : qp_) to_rts(q);
  }
  ~DirectFuzz() {
    for (uint32_t q : qp_) retire_qp(s_, qp_slot(h_, q));
    for (uint32_t k : key_) retire_mr(s_, *s_->find_mr(k));
    retire_cq(s_, cq_slot(h_, cq_));
    retire_pd(pd_slot(h_, pd_));
    // The context's slot and registers go as its process's would (no object is left on it).
    s_->release_context_objects(ctx_);
  }

  void step() {
    uint32_t q = qp_[rng_.below(2)];
    switch (rng_.below(8)) {
      case 0:
      case 1:
      case 2:
        ring_wqe(q);
        break;
      case 3:
        dbrec_garbage(q);
        break;
      case 4:
        doorbell_garbage();
        break;
      case 5:
        blueflame(q, /*torn=*/false);
        break;
      case 6:
        blueflame(q, /*torn=*/true);
        break;
      default:
        post_recv(qp_[rng_.below(2)]);
        break;
    }
    if (rng_.chance(10)) cq_ci_backwards();
    drain();
  }
  const Outcomes& outcomes() const { return out_; }
  Segment* seg() { return s_; }

 private:
  uint64_t addr(uint64_t off) { return reinterpret_cast<uint64_t>(buf_.data()) + off; }

  uint32_t make_qp() {
    // dev 0, RC, not sq_sig_all, register 0; 16 receives of one SGE each.
    QpSpec spec{0, ctx_, kQptRc, 0, 0, pd_, cq_, cq_, 0, kSqBbs, 16, 16};
    uint32_t i = 0;
    EXPECT_EQ(create_qp(s_, spec, &i), Status::ok);
    QpSlot& qp = qp_slot(h_, i);
    qp.access = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    qp.dlid = h_->devices[0].ports[0].lid;
    qp.retry_cnt = 1;
    qp.timeout = 1;
    qp.rnr_retry = 0;  // an empty receive queue fails at once rather than wait
    return i;
  }
  // As a driver's modify to RESET then RTS: the device forgets the rings, the driver restarts.
  void to_rts(uint32_t q) {
    reset_qp_device_state(s_, qp_slot(h_, q));
    head_[q == qp_[1]] = 0;
    recv_head_[q == qp_[1]] = 0;
    qp_slot(h_, q).qp_state.store(kQpsRts);
  }
  uint32_t& head(uint32_t q) { return head_[q == qp_[1]]; }
  uint32_t* dbrec(uint32_t q) { return s_->at<uint32_t>(qp_slot(h_, q).dbrec_off); }

  // A key the device knows, one it does not, or garbage; an address inside, at the edge or outside.
  uint32_t any_key() {
    return rng_.chance(70) ? key_[rng_.below(2)] : static_cast<uint32_t>(rng_.next());
  }
  uint64_t any_addr(uint32_t len) {
    if (rng_.chance(70)) return addr(rng_.below(kBuf - (len < kBuf ? len : 0)));
    return rng_.chance(50) ? addr(rng_.edgy(kBuf)) : rng_.next();
  }
  uint32_t any_len() {
    return rng_.chance(70) ? rng_.below(4096) : static_cast<uint32_t>(rng_.edgy(kBuf));
  }

  // A WRITE or READ as a driver writes it (a remote and a data segment, right keys, in range):
  // between the garbage, work that must still succeed.
  std::vector<uint8_t> good_wqe(uint32_t q) {
    std::vector<uint8_t> w(64, 0);
    uint8_t op = rng_.chance(50) ? kOpRdmaWrite : kOpRdmaRead;
    CtrlSeg c{};
    ctrl_set_index_opcode(c, head(q), op);
    ctrl_set_qpn_ds(c, qp_slot(h_, q).qpn, 3);
    c.fm_ce_se = kCtrlCqUpdate;
    uint32_t len = rng_.below(kBuf / 4);
    RaddrSeg ra{be64(addr(rng_.below(kBuf / 4))), be32(key_[0]), 0};
    DataSeg d{be32(len), be32(key_[1]), be64(addr(kBuf / 2 + rng_.below(kBuf / 4)))};
    std::memcpy(w.data(), &c, 16);
    std::memcpy(w.data() + 16, &ra, 16);
    std::memcpy(w.data() + 32, &d, 16);
    return w;
  }
  // One WQE of up to 4 blocks: a control segment made to look plausible or not, then segments.
  std::vector<uint8_t> garbage_wqe(uint32_t q) {
    if (rng_.chance(35)) return good_wqe(q);
    const uint8_t ops[] = {kOpNop,       kOpRdmaWrite, kOpRdmaWriteImm, kOpSend,
                           kOpSendImm,   kOpRdmaRead,  kOpAtomicCs,     kOpAtomicFa,
                           kOpSendInval, kOpBindMw,    kOpLocalInv,     kOpAtomicWrite,
                           0x7f,         0xff};
    uint32_t nbbs = 1 + rng_.below(4);
    std::vector<uint8_t> w(nbbs * 64);
    for (auto& b : w) b = static_cast<uint8_t>(rng_.next());
    if (rng_.chance(85)) {
      uint32_t ds = rng_.chance(80) ? 1 + rng_.below(nbbs * 4) : rng_.below(64);
      uint32_t qpn = rng_.chance(90) ? qp_slot(h_, q).qpn : static_cast<uint32_t>(rng_.next());
      uint16_t idx =
          rng_.chance(90) ? static_cast<uint16_t>(head(q)) : static_cast<uint16_t>(rng_.next());
      CtrlSeg c{};
      c.opmod_idx_opcode = be32(uint32_t{idx} << 8 | rng_.pick(ops));
      c.qpn_ds = be32(qpn << 8 | ds);
      c.fm_ce_se = static_cast<uint8_t>(rng_.chance(80) ? uint32_t{kCtrlCqUpdate} : rng_.next());
      std::memcpy(w.data(), &c, 16);
      // Plausible remote address and data segments behind it, each field possibly wrong.
      for (uint32_t off = 16; off + 16 <= w.size() && rng_.chance(80); off += 16) {
        uint32_t len = any_len();
        DataSeg d{be32(len), be32(any_key()), be64(any_addr(len))};
        std::memcpy(&w[off], &d, 16);
      }
    }
    return w;
  }
  void write_ring(uint32_t q, const std::vector<uint8_t>& w) {
    uint8_t* ring = s_->at<uint8_t>(qp_slot(h_, q).sq_off);
    for (uint32_t b = 0; b < w.size() / 64; ++b)
      std::memcpy(ring + ((head(q) + b) % kSqBbs) * 64, &w[b * 64], 64);
  }

  void ring_wqe(uint32_t q) {
    std::vector<uint8_t> w = garbage_wqe(q);
    write_ring(q, w);
    head(q) += static_cast<uint32_t>(w.size() / 64);
    device_barrier();
    dbrec_store32(&dbrec(q)[1], be32(head(q) & 0xffff));
    if (rng_.chance(50))
      device_kick_sq(qp_slot(h_, q));
    else
      device_doorbell(*reinterpret_cast<uint64_t*>(w.data()));
  }
  // A record behind the producer, far ahead of it (blocks the ring was never given), or anything.
  void dbrec_garbage(uint32_t q) {
    uint32_t v =
        head(q) + static_cast<uint32_t>(rng_.edgy(kSqBbs * 2)) * (rng_.chance(50) ? 1 : ~0u);
    dbrec_store32(&dbrec(q)[1], be32(v & 0xffff));
    device_kick_sq(qp_slot(h_, q));
  }
  void doorbell_garbage() {
    uint64_t v = rng_.next();
    if (rng_.chance(50)) {  // a head naming one of our QPs, the rest garbage
      CtrlSeg c{};
      c.opmod_idx_opcode = static_cast<uint32_t>(v);
      c.qpn_ds = be32(qp_slot(h_, qp_[rng_.below(2)]).qpn << 8 | rng_.below(64));
      std::memcpy(&v, &c, 8);
    }
    UarReg& reg = s_->at<UarReg>(h_->ctxs[ctx_].uar_off)[0];
    device_doorbell(mmio_db64(reg, v));
  }
  // A WQE through the BlueFlame buffer: garbage, or torn (its chunks from two writes).
  void blueflame(uint32_t q, bool torn) {
    std::vector<uint8_t> w = garbage_wqe(q);
    write_ring(q, w);
    head(q) += static_cast<uint32_t>(w.size() / 64);
    device_barrier();
    dbrec_store32(&dbrec(q)[1], be32(head(q) & 0xffff));
    UarReg& reg = s_->at<UarReg>(h_->ctxs[ctx_].uar_off)[0];
    uint32_t buf = bf_buf_++ & 1;
    uint64_t tag = mmio_bf_begin();
    for (uint32_t i = 0; i < w.size() / 64; ++i) {
      if (torn && i == 1) tag = mmio_bf_begin();
      std::vector<uint8_t> chunk(w.begin() + i * 64, w.begin() + (i + 1) * 64);
      if (torn && rng_.chance(50))
        for (auto& b : chunk) b = static_cast<uint8_t>(rng_.next());
      mmio_bf_chunk(reg, buf, i, chunk.data(), tag);
    }
    uint64_t heads[kWcBuffers];
    uint32_t n = mmio_flush(heads, kWcBuffers);
    for (uint32_t i = 0; i < n; ++i) device_doorbell(heads[i]);
  }
  void post_recv(uint32_t q) {
    uint32_t& n = recv_head_[q == qp_[1]];
    uint32_t len = any_len();
    DataSeg d{be32(len), be32(any_key()), be64(any_addr(len))};
    std::memcpy(s_->at<uint8_t>(qp_slot(h_, q).rq_off) + (n & 15) * 16, &d, 16);
    ++n;
    device_barrier();
    dbrec_store32(&dbrec(q)[0], be32(n));
  }
  void cq_ci_backwards() {
    CqSlot& c = cq_slot(h_, cq_);
    c.ci.store(c.ci.load() - 1 - rng_.below(1u << (kLogCq + 1)));
  }
  // Every new CQE counted, then QPs the device put in ERR brought back as a driver would.
  void drain() {
    CqSlot& c = cq_slot(h_, cq_);
    for (uint32_t n = 0; n < 4u << kLogCq; ++n) {
      uint32_t ci = c.ci.load();
      const Cqe64& e = s_->at<Cqe64>(c.buf_off)[ci & ((1u << kLogCq) - 1)];
      uint8_t op_own = cqe_owner_load(&e.op_own);
      if (!cqe_is_new(op_own, ci, kLogCq)) break;
      uint8_t op = cqe_opcode_of(op_own);
      (op == kCqeReqErr || op == kCqeRespErr ? out_.errors : out_.ok) += 1;
      c.ci.store(ci + 1);
    }
    for (uint32_t q : qp_)
      if (qp_slot(h_, q).qp_state.load() == kQpsErr) {
        ++out_.qps_in_err;
        to_rts(q);
      }
  }

  Segment* s_ = Segment::get();
  Header* h_ = s_->hdr();
  fuzz::Rng rng_;
  uint32_t ctx_ = 0, pd_ = 0, cq_ = 0, qp_[2] = {}, key_[2] = {};
  uint32_t head_[2] = {}, recv_head_[2] = {}, bf_buf_ = 0;
  Outcomes out_;
  std::vector<uint8_t> buf_;
};

}  // namespace

// FUZZ_ITERS steps from FUZZ_SEED (defaults: 500000 from seed 1); the checker runs after every
// thousand steps and at the end, with the objects live and after they are gone.
TEST(FuzzDirect, GarbageWqesDoorbellsAndBlueFlameGiveErrorsNotCrashes) {
  uint64_t seed = fuzz::env_or("FUZZ_SEED", 1), iters = fuzz::iters(500000);
  Segment* seg = nullptr;
  Outcomes out;
  {
    DirectFuzz f(seed);
    seg = f.seg();
    for (uint64_t i = 1; i <= iters; ++i) {
      f.step();
      if (i % 1000 == 0 || i == iters) {
        CheckReport r = check_segment(seg);
        ASSERT_TRUE(r.ok()) << "seed " << seed << " step " << i << "\n" << check_text(r);
      }
    }
    out = f.outcomes();
  }
  CheckReport r = check_segment(seg);
  EXPECT_TRUE(r.ok()) << check_text(r);
  EXPECT_EQ(r.live_objects, 0u) << check_text(r);
  std::printf("seed %llu, %llu steps: %llu completions, %llu error completions, %llu QPs in ERR\n",
              (unsigned long long)seed, (unsigned long long)iters, (unsigned long long)out.ok,
              (unsigned long long)out.errors, (unsigned long long)out.qps_in_err);
  // The garbage reached the device's error paths, and plausible WQEs still succeeded.
  EXPECT_GT(out.errors, 0u);
  EXPECT_GT(out.qps_in_err, 0u);
  EXPECT_GT(out.ok, 0u);
}
