// SPDX-License-Identifier: BSD-2-Clause
// Endpoints over plain verbs: ibv_post_send and ibv_poll_cq, on any device. The provider does its
// own locking (or none, under a thread domain); the worker lock is the only thing added.
#include <cerrno>

#include "uctlite_internal.h"

namespace uctlite {
namespace {

class VerbsEp final : public Ep {
 public:
  VerbsEp(ibv_qp* qp, ibv_cq* cq, std::mutex* wl, uint32_t max_inline, volatile uint32_t* emu_dbrec)
      : Ep(qp, wl), cq_(cq), max_inline_(max_inline), emu_dbrec_(emu_dbrec) {}

  uint32_t max_inline() const override { return max_inline_; }
  std::optional<bool> device_idle() const override { return emu_sq_idle(qp_, emu_dbrec_); }

 protected:
  PostStatus post_unlocked(const PostArgs& a) override {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(a.payload);
    sge.length = a.length;
    sge.lkey = a.inline_data ? 0 : a.lkey;
    ibv_send_wr wr{};
    wr.wr_id = a.wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED | (a.inline_data ? IBV_SEND_INLINE : 0);
    if (a.op == Op::write) {
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = a.raddr;
      wr.wr.rdma.rkey = a.rkey;
    } else {
      wr.opcode = IBV_WR_SEND;
    }
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp_, &wr, &bad);
    if (rc == 0) return PostStatus::ok;
    last_error_ = rc;
    return rc == ENOMEM ? PostStatus::queue_full : PostStatus::error;
  }

  int poll_unlocked(Completion* out, int max) override {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq_, max < 16 ? max : 16, wc);
    for (int i = 0; i < n; ++i) {
      out[i] = Completion{};
      out[i].wr_id = wc[i].wr_id;
      out[i].status = wc[i].status;
      out[i].opcode = wc[i].opcode;
    }
    return n < 0 ? 0 : n;
  }

 private:
  ibv_cq* cq_;
  uint32_t max_inline_;
  volatile uint32_t* emu_dbrec_;  // the send doorbell record on an emulated device, else null
};

}  // namespace

std::unique_ptr<Ep> make_verbs_ep(ibv_qp* qp, ibv_cq* cq, std::mutex* wl, std::string* err) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (int rc = ibv_query_qp(qp, &attr, IBV_QP_CAP, &init)) {
    *err = "ibv_query_qp: errno " + std::to_string(rc);
    return nullptr;
  }
  volatile uint32_t* dbrec = nullptr;
  emudv_qp dq;
  if (const EmudvFns* dv = emudv_fns(); dv && dv->init_qp(qp, &dq) == 0) dbrec = dq.dbrec;
  return std::make_unique<VerbsEp>(qp, cq, wl, attr.cap.max_inline_data, dbrec);
}

}  // namespace uctlite
