// SPDX-License-Identifier: BSD-2-Clause
// The ibv_wr_* API (ibv_qp_ex): the same WQE builder as ibv_post_send, driven one call per field.
// Between ibv_wr_start and ibv_wr_complete/abort the QP's send lock is held, as in mlx5 (a
// lockless QP: its send owner word, taken by ibv_wr_start).
#include <cerrno>
#include <cstring>

#include "emu/mmio.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

void commit_pending(EmuQp* qp) {
  if (qp->stage_size == 0) return;
  if (qp->wr_error) {
    qp->stage_size = 0;
    return;
  }
  uint32_t block, bbs;
  int err = wqe_commit(qp, &block, &bbs);
  if (err) {
    qp->wr_error = err;
    qp->stage_size = 0;
    return;
  }
  qp->wr_last_ctrl = block;
  qp->wr_last_bbs = bbs;
  ++qp->wr_count;
}

bool op_enabled(EmuQp* qp, uint64_t flag) {
  if (qp->send_ops_flags & flag) return true;
  qp->wr_error = EOPNOTSUPP;
  return false;
}

void begin(ibv_qp_ex* x, uint8_t opcode, uint64_t flag, uint32_t imm_be) {
  EmuQp* qp = to_qp(x);
  commit_pending(qp);
  if (!op_enabled(qp, flag)) return;
  if (!opcode_allowed(qp->qpx.qp_base.qp_type, opcode)) {
    qp->wr_error = EINVAL;
    return;
  }
  wqe_begin(qp, opcode, x->wr_flags, imm_be, x->wr_id);
}

void wr_start(ibv_qp_ex* x) {
  EmuQp* qp = to_qp(x);
  queue_enter(qp, kOwnerSend);
  uint32_t state = qp->shm->qp_state.load(std::memory_order_relaxed);
  qp->wr_error = (state == kQpsReset || state == kQpsInit || state == kQpsRtr) ? EINVAL : 0;
  if (inherited(qp)) qp->wr_error = EPERM;
  qp->wr_start_head = qp->sq_head;
  qp->wr_start_posted = qp->sq_posted;
  qp->wr_count = 0;
  qp->stage_size = 0;
}

// The session's end. The owner word goes back only if this thread took it at ibv_wr_start: a
// session's start and end are in one thread, and only that thread can have stored its tid there.
void session_leave(EmuQp* qp) {
  if (!qp->lockless) {
    qp->sq_lock.spin.unlock();
    return;
  }
  if (qp->sq_owner.tid.load(std::memory_order_relaxed) == writer_tid()) owner_give(qp->sq_owner);
}

void rollback(EmuQp* qp) {
  // The WQEs written since ibv_wr_start were never published: the device must not count their
  // slots as written when the next WQEs go there.
  for (uint32_t pos = qp->wr_start_head; pos != qp->sq_head;
       pos += qp->sq_wqe_bbs[pos & (qp->sq_bbs - 1)])
    sq_note_wqe_unstore(qp->wrec, qp->sq_bbs - 1, pos);
  qp->sq_head = qp->wr_start_head;
  qp->sq_posted = qp->wr_start_posted;
  qp->stage_size = 0;
  qp->wr_count = 0;
}

int wr_complete(ibv_qp_ex* x) {
  EmuQp* qp = to_qp(x);
  commit_pending(qp);
  int err = qp->wr_error;
  if (err)
    rollback(qp);  // none of the session's WRs is posted
  else
    sq_publish(qp, qp->wr_last_ctrl, qp->wr_last_bbs, qp->wr_count);
  session_leave(qp);
  return err;
}

void wr_abort(ibv_qp_ex* x) {
  EmuQp* qp = to_qp(x);
  rollback(qp);
  session_leave(qp);
}

void wr_send(ibv_qp_ex* x) { begin(x, kOpSend, IBV_QP_EX_WITH_SEND, 0); }
void wr_send_imm(ibv_qp_ex* x, __be32 imm) {
  begin(x, kOpSendImm, IBV_QP_EX_WITH_SEND_WITH_IMM, imm);
}

void wr_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr) {
  begin(x, kOpRdmaWrite, IBV_QP_EX_WITH_RDMA_WRITE, 0);
  if (!to_qp(x)->wr_error) wqe_add_raddr(to_qp(x), raddr, rkey);
}

void wr_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr, __be32 imm) {
  begin(x, kOpRdmaWriteImm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, imm);
  if (!to_qp(x)->wr_error) wqe_add_raddr(to_qp(x), raddr, rkey);
}

void wr_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr) {
  begin(x, kOpRdmaRead, IBV_QP_EX_WITH_RDMA_READ, 0);
  if (!to_qp(x)->wr_error) wqe_add_raddr(to_qp(x), raddr, rkey);
}

void wr_atomic_cmp_swp(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr, uint64_t compare,
                       uint64_t swap) {
  begin(x, kOpAtomicCs, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, 0);
  if (to_qp(x)->wr_error) return;
  wqe_add_raddr(to_qp(x), raddr, rkey);
  wqe_add_atomic(to_qp(x), swap, compare);
}

void wr_atomic_fetch_add(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr, uint64_t add) {
  begin(x, kOpAtomicFa, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, 0);
  if (to_qp(x)->wr_error) return;
  wqe_add_raddr(to_qp(x), raddr, rkey);
  wqe_add_atomic(to_qp(x), add, 0);
}

void wr_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (int e = wqe_add_sge(qp, lkey, addr, length)) qp->wr_error = e;
}

void wr_set_sge_list(ibv_qp_ex* x, size_t n, const ibv_sge* sges) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (n > qp->max_send_sge) {
    qp->wr_error = EINVAL;
    return;
  }
  for (size_t i = 0; i < n && !qp->wr_error; ++i)
    if (int e = wqe_add_sge(qp, sges[i].lkey, sges[i].addr, sges[i].length)) qp->wr_error = e;
}

bool inline_allowed(EmuQp* qp) {
  uint8_t op = qp->stage_opcode;
  return op == kOpSend || op == kOpSendImm || op == kOpRdmaWrite || op == kOpRdmaWriteImm;
}

void wr_set_inline_data(ibv_qp_ex* x, void* addr, size_t length) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (!inline_allowed(qp)) {
    qp->wr_error = EINVAL;
    return;
  }
  ibv_data_buf b{addr, length};
  if (int e = wqe_add_inline(qp, &b, 1)) qp->wr_error = e;
}

void wr_set_inline_data_list(ibv_qp_ex* x, size_t n, const ibv_data_buf* bufs) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (!inline_allowed(qp)) {
    qp->wr_error = EINVAL;
    return;
  }
  if (int e = wqe_add_inline(qp, bufs, n)) qp->wr_error = e;
}

void wr_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (qp->qpx.qp_base.qp_type != IBV_QPT_UD) {
    qp->wr_error = EOPNOTSUPP;
    return;
  }
  if (int e = wqe_set_av(qp, ah, remote_qpn, remote_qkey)) qp->wr_error = e;
}

// Operations this device does not have.
void wr_set_xrc_srqn(ibv_qp_ex* x, uint32_t srqn) {
  EmuQp* qp = to_qp(x);
  if (qp->wr_error || !qp->stage_size) return;
  if (qp->qpx.qp_base.qp_type != IBV_QPT_XRC_SEND) {
    qp->wr_error = EOPNOTSUPP;
    return;
  }
  wqe_set_xrc_srqn(qp, srqn);
}
void wr_bind_mw(ibv_qp_ex* x, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  begin(x, kOpBindMw, IBV_QP_EX_WITH_BIND_MW, 0);
  EmuQp* qp = to_qp(x);
  if (qp->wr_error) return;
  if (int e = info ? wqe_add_bind(qp, mw, rkey, *info) : EINVAL) qp->wr_error = e;
}
void wr_local_inv(ibv_qp_ex* x, uint32_t rkey) {
  begin(x, kOpLocalInv, IBV_QP_EX_WITH_LOCAL_INV, be32(rkey));
}
void wr_send_inv(ibv_qp_ex* x, uint32_t rkey) {
  begin(x, kOpSendInval, IBV_QP_EX_WITH_SEND_WITH_INV, be32(rkey));
}
void wr_send_tso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { to_qp(x)->wr_error = EOPNOTSUPP; }
void wr_atomic_write(ibv_qp_ex* x, uint32_t rkey, uint64_t raddr, const void* value) {
  begin(x, kOpAtomicWrite, IBV_QP_EX_WITH_ATOMIC_WRITE, 0);
  EmuQp* qp = to_qp(x);
  if (qp->wr_error) return;
  wqe_add_raddr(qp, raddr, rkey);
  uint64_t bytes;
  std::memcpy(&bytes, value, sizeof bytes);
  wqe_add_atomic(qp, be64(bytes), 0);  // stored big endian: the segment holds the bytes as given
}

// The ibv_qp_ex operation behind each WQE opcode.
struct WrOp {
  uint64_t flag;
  uint8_t opcode;
};
constexpr WrOp kWrOps[] = {
    {IBV_QP_EX_WITH_SEND, kOpSend},
    {IBV_QP_EX_WITH_SEND_WITH_IMM, kOpSendImm},
    {IBV_QP_EX_WITH_RDMA_WRITE, kOpRdmaWrite},
    {IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, kOpRdmaWriteImm},
    {IBV_QP_EX_WITH_RDMA_READ, kOpRdmaRead},
    {IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, kOpAtomicCs},
    {IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, kOpAtomicFa},
    {IBV_QP_EX_WITH_SEND_WITH_INV, kOpSendInval},
    {IBV_QP_EX_WITH_LOCAL_INV, kOpLocalInv},
    {IBV_QP_EX_WITH_BIND_MW, kOpBindMw},
    {IBV_QP_EX_WITH_ATOMIC_WRITE, kOpAtomicWrite},
};

}  // namespace

namespace emu::prov {

uint64_t send_ops_of(ibv_qp_type type) {
  uint64_t ops = 0;
  for (const WrOp& op : kWrOps)
    if (opcode_allowed(type, op.opcode)) ops |= op.flag;
  return ops;
}

void install_wr_ops(EmuQp* qp) {
  ibv_qp_ex& x = qp->qpx;
  x.comp_mask = 0;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_send_inv = wr_send_inv;
  x.wr_local_inv = wr_local_inv;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_send_tso = wr_send_tso;
  x.wr_atomic_write = wr_atomic_write;
}

}  // namespace emu::prov
