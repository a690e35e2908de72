// SPDX-License-Identifier: BSD-2-Clause
// Tag matching SRQs, the driver's part: the tag indexes it hands out, ibv_post_srq_ops(3) (each
// operation executed by the device at once: device_tm_op) and the tag matching completions as
// work completions (mlx5's opcodes and flags: IBV_WC_TM_ADD / DEL / SYNC / RECV / NO_TAG,
// IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID, IBV_WC_TM_SYNC_REQ). The device's part, the list and the
// matching, is emu/device/engine_tm.cpp.
#include <cerrno>
#include <cstring>

#include "emu/device.h"
#include "emu/wqe.h"
#include "provider.h"

using namespace emu;
using namespace emu::prov;

namespace {

// A completion naming tag i has been polled (or will not come): at no references left the tag
// is free again, at the end of the FIFO. Caller is inside srq_enter.
void tag_release(EmuTm* t, uint32_t i) {
  if (i >= t->max_tags || t->refs[i] == 0 || --t->refs[i] != 0) return;
  t->free[(t->free_head + t->free_count++) % t->max_tags] = i;
}

// The oldest signaled operation's record (its completion is the oldest one unpolled: the device
// executes operations in order, at once).
EmuTm::Op op_pop(EmuTm* t) {
  if (!t->op_count) return EmuTm::Op{0, -1};
  EmuTm::Op op = t->ops[t->op_head];
  t->op_head = (t->op_head + 1) % t->max_ops;
  --t->op_count;
  return op;
}

// One operation: checked, handed to the device, its driver state kept. Caller is inside
// srq_enter. Returns an errno for the post.
int post_one(EmuSrq* s, ibv_ops_wr* wr) {
  EmuTm* t = s->tm;
  bool signaled = wr->flags & IBV_OPS_SIGNALED;
  if (signaled && t->op_count == t->max_ops) return ENOMEM;  // the operation queue is full
  TmListOp op{};
  op.signaled = signaled;
  op.sync = wr->flags & IBV_OPS_TM_SYNC;
  if (op.sync) t->unexp_out = wr->tm.unexpected_cnt;
  op.unexpected = t->unexp_out;
  int32_t tag = -1;
  switch (wr->opcode) {
    case IBV_WR_TAG_ADD: {
      if (wr->tm.add.num_sge < 0 || wr->tm.add.num_sge > 1) return EINVAL;  // max_sge is 1
      if (!t->free_count) return ENOMEM;                                    // the tag list is full
      uint32_t i = t->free[t->free_head];
      t->free_head = (t->free_head + 1) % t->max_tags;
      --t->free_count;
      t->wr_id[i] = wr->tm.add.recv_wr_id;
      t->refs[i] = static_cast<uint8_t>(1 + signaled);  // its consumption, and the ADD's CQE
      op.op = kTmOpAppend;
      op.index = i;
      op.tag = wr->tm.add.tag;
      op.mask = wr->tm.add.mask;
      if (wr->tm.add.num_sge) {
        op.addr = wr->tm.add.sg_list[0].addr;
        op.length = wr->tm.add.sg_list[0].length;
        op.lkey = wr->tm.add.sg_list[0].lkey;
      }
      wr->tm.handle = i;
      tag = static_cast<int32_t>(i);
      break;
    }
    case IBV_WR_TAG_DEL:
      if (wr->tm.handle >= t->max_tags) return EINVAL;
      op.op = kTmOpRemove;
      op.index = wr->tm.handle;
      // A tag the driver holds: its DEL's completion names it until polled.
      if (t->refs[op.index]) tag = static_cast<int32_t>(op.index);
      break;
    case IBV_WR_TAG_SYNC:
      op.op = kTmOpNoop;
      break;
    default:
      return EINVAL;
  }
  if (signaled) {
    t->ops[(t->op_head + t->op_count++) % t->max_ops] = EmuTm::Op{wr->wr_id, tag};
    if (tag >= 0 && op.op == kTmOpRemove) ++t->refs[tag];
  }
  // Inside srq_enter: a poll of this SRQ's completions waits until the operation is recorded.
  bool removed = device_tm_op(*s->shm, op);
  if (op.op == kTmOpRemove && removed && tag >= 0) tag_release(t, op.index);  // never consumed now
  return 0;
}

}  // namespace

namespace emu::prov {

EmuTm* tm_create(uint32_t max_tags, uint32_t max_ops) {
  auto* t = new (std::nothrow) EmuTm();
  if (!t) return nullptr;
  t->max_tags = max_tags;
  t->max_ops = max_ops;
  t->wr_id.assign(max_tags, 0);
  t->refs.assign(max_tags, 0);
  t->free.resize(max_tags);
  for (uint32_t i = 0; i < max_tags; ++i) t->free[i] = i;
  t->free_count = max_tags;
  t->ops.resize(max_ops);
  return t;
}

int emu_post_srq_ops(ibv_srq* ibsrq, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  EmuSrq* s = to_srq(ibsrq);
  int err = 0;
  if (!s->tm) {
    err = EINVAL;  // as mlx5: an SRQ without a tag list has no operations
  } else if (inherited(s)) {
    err = EPERM;
  }
  if (err) {
    *bad = wr;
    return err;
  }
  bool owned = srq_enter(s);
  for (; wr; wr = wr->next) {
    if ((err = post_one(s, wr)) != 0) {
      *bad = wr;
      break;
    }
  }
  srq_leave(s, owned);
  return err;
}

bool tm_wc(const Cqe64& c, ibv_wc* wc, ibv_wc_tm_info* tm) {
  EmuSrq* s = srq_by_num(be32(c.srqn_uidx));
  if (!s || !s->tm) return false;
  EmuTm* t = s->tm;
  std::memset(wc, 0, sizeof *wc);
  CqeTmInfo info;
  std::memcpy(&info, &c, sizeof info);
  tm->tag = be64(info.tag);
  tm->priv = be32(info.app_ctx);
  wc->status = IBV_WC_SUCCESS;
  wc->qp_num = cqe_qpn(c);
  wc->src_qp = be32(c.flags_rqpn) & 0xffffff;
  wc->slid = be16(c.slid);
  wc->byte_len = be32(c.byte_cnt);
  uint16_t n = be16(c.wqe_counter);
  bool list_op = c.app_op == kTmOpAppend || c.app_op == kTmOpRemove || c.app_op == kTmOpNoop;
  if (c.app_op == kTmOpUnexpected || c.app_op == kTmOpNoTag) {
    // In an ordinary SRQ receive, header and all, for software to match.
    wc->wr_id = srq_complete(s, n);
    wc->opcode = c.app_op == kTmOpNoTag ? IBV_WC_TM_NO_TAG : IBV_WC_TM_RECV;
    return true;
  }
  bool owned = srq_enter(s);
  if (list_op) {
    EmuTm::Op op = op_pop(t);
    wc->wr_id = op.wr_id;
    wc->opcode = c.app_op == kTmOpAppend   ? IBV_WC_TM_ADD
                 : c.app_op == kTmOpRemove ? IBV_WC_TM_DEL
                                           : IBV_WC_TM_SYNC;
    if (c.emu_flags & kCqeFlagTmFail) wc->status = IBV_WC_TM_ERR;
    if (c.emu_flags & kCqeFlagTmSyncReq) wc->wc_flags |= IBV_WC_TM_SYNC_REQ;
    if (op.tag >= 0) tag_release(t, static_cast<uint32_t>(op.tag));
    wc->qp_num = 0;
  } else if (n < t->max_tags) {
    // A tag's consumption: matched (the rendezvous read still to come), data in place, or both.
    wc->wr_id = t->wr_id[n];
    wc->opcode = IBV_WC_TM_RECV;
    if (c.app_op != kTmOpExpected) wc->wc_flags |= IBV_WC_TM_MATCH;
    if (c.app_op != kTmOpConsumed) {
      wc->wc_flags |= IBV_WC_TM_DATA_VALID;
      tag_release(t, n);
    }
  }
  srq_leave(s, owned);
  return true;
}

}  // namespace emu::prov
