// A device driven by hand for unit tests: a PD, a CQ and two connected RC QPs laid out in the
// segment as a driver would, with helpers to post WQEs, receives and to poll the CQ.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emu/barriers.h"
#include "device/doorbell.h"
#include "device/engine.h"

namespace emu::test {

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
    q.wrec_off = s->alloc(16 * sizeof(WqeWriteRec));
    reset_race_state(s, q);
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

inline std::vector<uint8_t> seg_bytes(const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}
inline std::vector<uint8_t> operator+(std::vector<uint8_t> x, const std::vector<uint8_t>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

}  // namespace emu::test
