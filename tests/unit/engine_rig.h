// SPDX-License-Identifier: BSD-2-Clause
// A device driven by hand for unit tests: a PD, a CQ and two connected RC QPs laid out in the
// segment as a driver would, with helpers to post WQEs, receives and to poll the CQ.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/doorbell.h"
#include "device/engine.h"
#include "emu/barriers.h"
#include "emu/objects.h"

namespace emu::test {

struct Rig {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  Engine eng{s};
  uint32_t pd = 0, cq = 0, a = 0, b = 0;
  uint32_t heads[kMaxQps] = {};

  uint32_t make_cq() {
    uint32_t i = 0;
    EXPECT_EQ(create_cq(s, CqSpec{0, 0, 4, -1, 0}, &i), Status::ok);  // 16 CQEs
    return i;
  }
  uint32_t make_qp() {
    QpSpec spec{};
    spec.type = kQptRc;
    spec.ctx = kMaxContexts;  // no async events
    spec.pd = pd;
    spec.send_cq = spec.recv_cq = cq;
    spec.sq_bbs = 16;
    spec.rq_wqe_cnt = 16;
    spec.rq_stride = 16;
    uint32_t i = 0;
    EXPECT_EQ(create_qp(s, spec, &i), Status::ok);
    QpSlot& q = qp_slot(h, i);
    q.access = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic | kAccessLocalWrite;
    q.dlid = h->devices[0].ports[0].lid;
    q.retry_cnt = 1;
    q.timeout = 1;
    return i;
  }
  Rig() {
    EXPECT_EQ(create_pd(s, 0, 0, &pd), Status::ok);
    cq = make_cq();
    a = make_qp();
    b = make_qp();
    qp_slot(h, a).dest_qpn = qp_slot(h, b).qpn;
    qp_slot(h, b).dest_qpn = qp_slot(h, a).qpn;
    qp_slot(h, a).qp_state.store(kQpsRts);
    qp_slot(h, b).qp_state.store(kQpsRts);
  }
  ~Rig() {
    for (uint32_t q : {a, b}) retire_qp(s, qp_slot(h, q));
    retire_cq(s, cq_slot(h, cq));
    retire_pd(pd_slot(h, pd));
  }
  uint32_t reg(void* p, size_t len, uint32_t access) {
    auto addr = reinterpret_cast<uint64_t>(p);
    uint32_t i = 0;
    EXPECT_EQ(create_mr(s, MrSpec{pd, access, addr, len, addr}, &i), Status::ok);
    return mr_slot(h, i).key;
  }
  // Writes one send WQE at the QP's next block and rings the doorbell record.
  void post(uint32_t qi, uint8_t opcode, const std::vector<uint8_t>& segs, bool signaled = true,
            uint16_t idx_override = 0xffff) {
    QpSlot& q = qp_slot(h, qi);
    uint32_t* head = heads;
    uint32_t size = 16 + static_cast<uint32_t>(segs.size());
    uint8_t* w = s->at<uint8_t>(q.sq_off) + (head[qi] & 15) * 64;
    CtrlSeg c{};
    uint32_t idx = idx_override == 0xffff ? (head[qi] & 0xffff) : idx_override;
    c.opmod_idx_opcode = be32(idx << 8 | opcode);
    c.qpn_ds = be32(q.qpn << 8 | (size / 16));
    c.fm_ce_se = signaled ? kCtrlCqUpdate : 0;
    std::memcpy(w, &c, 16);
    if (!segs.empty()) std::memcpy(w + 16, segs.data(), segs.size());  // data() may be null
    head[qi] += (size + 63) / 64;
    to_device_barrier();
    dbrec_store32(&s->at<uint32_t>(q.dbrec_off)[1], be32(head[qi] & 0xffff));
    (void)q;
  }
  void post_recv(uint32_t qi, uint32_t lkey, void* p, uint32_t len) {
    QpSlot& q = qp_slot(h, qi);
    uint32_t n = be32(s->at<uint32_t>(q.dbrec_off)[0]);
    DataSeg d{be32(len), be32(lkey), be64(reinterpret_cast<uint64_t>(p))};
    std::memcpy(s->at<uint8_t>(q.rq_off) + (n & 15) * 16, &d, 16);
    dbrec_store32(&s->at<uint32_t>(q.dbrec_off)[0], be32(n + 1));
  }
  // The next CQE, or nullptr.
  const Cqe64* poll() {
    CqSlot& c = cq_slot(h, cq);
    uint32_t ci = c.ci.load();
    auto* e = &s->at<Cqe64>(c.buf_off)[ci & 15];
    uint8_t op_own = cqe_owner_load(&e->op_own);
    if (!cqe_is_new(op_own, ci, 4)) return nullptr;  // a ring of 16
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
