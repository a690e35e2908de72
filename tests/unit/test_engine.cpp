// The engine driven directly: rings and objects laid out by hand in the segment, as a driver would,
// then the engine's steps observed through the CQ ring and the target memory.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "barriers.h"
#include "engine.h"

using namespace emu;

namespace {

struct Rig {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  Engine eng{s};
  uint32_t pd = 0, cq = 0, a = 0, b = 0;
  uint32_t heads[kMaxQps] = {};

  uint32_t make_cq() {
    uint32_t i;
    EXPECT_EQ(s->alloc_cq(&i), Status::ok);
    CqSlot& c = h->cqs[i];
    c.cqe_cnt = 16;
    c.log_cqe_cnt = 4;
    c.buf_off = s->alloc(16 * sizeof(Cqe64));
    c.chan_wfd = -1;
    auto* ring = s->at<Cqe64>(c.buf_off);
    for (int k = 0; k < 16; ++k) ring[k].op_own = kCqeInvalid << 4 | 1;
    return i;
  }
  uint32_t make_qp() {
    uint32_t i;
    EXPECT_EQ(s->alloc_qp(&i), Status::ok);
    QpSlot& q = h->qps[i];
    q.dev = 0;
    q.port = 1;
    q.type = kQptRc;
    q.pd = pd;
    q.send_cq = cq;
    q.recv_cq = cq;
    q.ctx = kMaxContexts;  // no async events
    q.sq_bbs = 16;
    q.sq_off = s->alloc(16 * 64);
    q.rq_wqe_cnt = 16;
    q.rq_stride = 16;
    q.rq_off = s->alloc(16 * 16);
    q.dbrec_off = s->alloc(64);
    q.access = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic | kAccessLocalWrite;
    q.dlid = h->devices[0].ports[0].lid;
    q.retry_cnt = 1;
    q.timeout = 1;
    q.path_mtu = 3;
    return i;
  }
  Rig() {
    EXPECT_EQ(s->alloc_pd(&pd), Status::ok);
    cq = make_cq();
    a = make_qp();
    b = make_qp();
    h->qps[a].dest_qpn = h->qps[b].qpn;
    h->qps[b].dest_qpn = h->qps[a].qpn;
    h->qps[a].qp_state.store(kQpsRts);
    h->qps[b].qp_state.store(kQpsRts);
  }
  ~Rig() {
    for (uint32_t q : {a, b}) h->qps[q].state.store(kSlotFree);
    h->cqs[cq].state.store(kSlotFree);
    h->pds[pd].state.store(kSlotFree);
  }
  uint32_t reg(void* p, size_t len, uint32_t access) {
    uint32_t i;
    EXPECT_EQ(s->alloc_mr(&i), Status::ok);
    MrSlot& m = h->mrs[i];
    m.pd = pd;
    m.addr = m.iova = reinterpret_cast<uint64_t>(p);
    m.length = len;
    m.access = access;
    return m.key;
  }
  // Writes one send WQE at the QP's next block and rings the doorbell record.
  void post(uint32_t qi, uint8_t opcode, const std::vector<uint8_t>& segs, bool signaled = true,
            uint16_t idx_override = 0xffff) {
    QpSlot& q = h->qps[qi];
    uint32_t* head = heads;
    uint32_t size = 16 + static_cast<uint32_t>(segs.size());
    uint8_t* w = s->at<uint8_t>(q.sq_off) + (head[qi] & 15) * 64;
    CtrlSeg c{};
    uint32_t idx = idx_override == 0xffff ? (head[qi] & 0xffff) : idx_override;
    c.opmod_idx_opcode = be32(idx << 8 | opcode);
    c.qpn_ds = be32(q.qpn << 8 | (size / 16));
    c.fm_ce_se = signaled ? kCtrlCqUpdate : 0;
    std::memcpy(w, &c, 16);
    std::memcpy(w + 16, segs.data(), segs.size());
    head[qi] += (size + 63) / 64;
    to_device_barrier();
    dbrec_store32(&s->at<uint32_t>(q.dbrec_off)[1], be32(head[qi] & 0xffff));
    (void)q;
  }
  void post_recv(uint32_t qi, uint32_t lkey, void* p, uint32_t len) {
    QpSlot& q = h->qps[qi];
    uint32_t n = be32(s->at<uint32_t>(q.dbrec_off)[0]);
    DataSeg d{be32(len), be32(lkey), be64(reinterpret_cast<uint64_t>(p))};
    std::memcpy(s->at<uint8_t>(q.rq_off) + (n & 15) * 16, &d, 16);
    dbrec_store32(&s->at<uint32_t>(q.dbrec_off)[0], be32(n + 1));
  }
  // The next CQE, or nullptr.
  const Cqe64* poll() {
    CqSlot& c = h->cqs[cq];
    uint32_t ci = c.ci.load();
    auto* e = &s->at<Cqe64>(c.buf_off)[ci & 15];
    uint8_t op_own = cqe_owner_load(&e->op_own);
    if ((op_own >> 4) == kCqeInvalid || (op_own & 1) != ((ci >> 4) & 1)) return nullptr;
    c.ci.store(ci + 1);
    return e;
  }
};

std::vector<uint8_t> seg_bytes(const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}
std::vector<uint8_t> operator+(std::vector<uint8_t> x, const std::vector<uint8_t>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

}  // namespace

TEST(Engine, RdmaWriteMovesBytesAndCompletes) {
  Rig r;
  char src[64] = "hello device", dst[64] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t rk = r.reg(dst, sizeof dst, kAccessLocalWrite | kAccessRemoteWrite);
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst)), be32(rk), 0};
  DataSeg d{be32(13), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpRdmaWrite, seg_bytes(&ra, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(r.h->qps[r.a]);
  EXPECT_STREQ(dst, "hello device");
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op_own >> 4, kCqeReq);
  EXPECT_EQ(be32(c->byte_cnt), 13u);
  EXPECT_EQ(be32(c->sop_drop_qpn) >> 24, kOpRdmaWrite);
  EXPECT_EQ(r.poll(), nullptr) << "one WQE, one CQE";
}

TEST(Engine, BadRkeyIsRemoteAccessErrorAndNothingIsWritten) {
  Rig r;
  char src[16] = "xxxxxxx", dst[16] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t rk = r.reg(dst, sizeof dst, kAccessLocalWrite);  // no remote write right
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst)), be32(rk), 0};
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpRdmaWrite, seg_bytes(&ra, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(r.h->qps[r.a]);
  EXPECT_EQ(dst[0], 0);
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op_own >> 4, kCqeReqErr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynRemoteAccess);
  EXPECT_EQ(r.h->qps[r.a].qp_state.load(), kQpsErr);
  EXPECT_EQ(r.h->qps[r.b].qp_state.load(), kQpsErr) << "the responder's access violation";
}

TEST(Engine, SendConsumesAReceiveAndCompletesBothSides) {
  Rig r;
  char src[32] = "payload", dst[32] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t dk = r.reg(dst, sizeof dst, kAccessLocalWrite);
  r.post_recv(r.b, dk, dst, sizeof dst);
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpSend, seg_bytes(&d, 16));
  r.eng.kick_sq(r.h->qps[r.a]);
  EXPECT_STREQ(dst, "payload");
  const Cqe64* rc = r.poll();
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(rc->op_own >> 4, kCqeRespSend);
  EXPECT_EQ(be32(rc->byte_cnt), 8u);
  const Cqe64* sc = r.poll();
  ASSERT_NE(sc, nullptr);
  EXPECT_EQ(sc->op_own >> 4, kCqeReq);
}

TEST(Engine, SendWithoutReceiveStallsThenRnrExceededWithZeroRetries) {
  Rig r;
  r.h->qps[r.a].rnr_retry = 0;
  char src[8] = "a";
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  DataSeg d{be32(1), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpSend, seg_bytes(&d, 16));
  r.eng.kick_sq(r.h->qps[r.a]);
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynRnrRetryExc);
}

TEST(Engine, MalformedWqeIndexIsALocalQpOperationError) {
  Rig r;
  r.post(r.a, kOpNop, {}, true, /*idx_override=*/7);
  r.eng.kick_sq(r.h->qps[r.a]);
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynLocalQpOp);
  EXPECT_EQ(r.h->qps[r.a].qp_state.load(), kQpsErr);
}

TEST(Engine, UnsignaledWqeProducesNoCompletion) {
  Rig r;
  r.post(r.a, kOpNop, {}, false);
  r.eng.kick_sq(r.h->qps[r.a]);
  EXPECT_EQ(r.poll(), nullptr);
  EXPECT_EQ(r.h->qps[r.a].sq_ci, 1u) << "but the device consumed it";
}

TEST(Engine, AtomicFetchAddReturnsOldValue) {
  Rig r;
  alignas(8) uint64_t target = 40, result = 0;
  uint32_t lk = r.reg(&result, 8, kAccessLocalWrite);
  uint32_t rk = r.reg(&target, 8, kAccessLocalWrite | kAccessRemoteAtomic);
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(&target)), be32(rk), 0};
  AtomicSeg at{be64(2), 0};
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(&result))};
  r.post(r.a, kOpAtomicFa, seg_bytes(&ra, 16) + seg_bytes(&at, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(r.h->qps[r.a]);
  EXPECT_EQ(target, 42u);
  EXPECT_EQ(result, 40u);
}

TEST(Engine, RnrTimerTableAndTimeouts) {
  EXPECT_EQ(Engine::rnr_delay_us(12), 640u);
  EXPECT_EQ(Engine::rnr_delay_us(0), 655360u);
  EXPECT_EQ(Engine::transport_timeout_us(0), 0u) << "0 means infinite";
  EXPECT_EQ(Engine::transport_timeout_us(14), 67108u);
}
