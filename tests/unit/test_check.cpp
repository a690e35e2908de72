// SPDX-License-Identifier: BSD-2-Clause
// The segment checker (emu/check.h) on a rig's segment: consistent as made, and each kind of
// damage it exists to find is found (then undone, so the rig retires its objects normally).
#include <gtest/gtest.h>

#include "emu/check.h"
#include "engine_rig.h"

using namespace emu;
using namespace emu::test;

namespace {

bool mentions(const CheckReport& r, const char* what) {
  for (const std::string& p : r.problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(SegmentCheck, ARigIsConsistentAndItsObjectsCounted) {
  Rig rig;
  CheckReport r = check_segment(rig.s);
  EXPECT_TRUE(r.ok()) << check_text(r);
  EXPECT_GE(r.live_objects, 4u);           // PD, CQ, two QPs
  EXPECT_GE(r.heap_blocks_allocated, 9u);  // a CQ ring, four rings per QP
}

TEST(SegmentCheck, AnAllocatedBlockMarkedFreeIsFound) {
  Rig rig;
  ShmHeapHeader& hh = rig.h->heap;
  uint64_t block = (cq_slot(rig.h, rig.cq).buf_off - hh.heap_off) / kHeapMinBlock;
  uint64_t* order0 = rig.s->at<uint64_t>(hh.free_off[0]);
  order0[block / 64] ^= 1ull << (block % 64);
  CheckReport r = check_segment(rig.s);
  order0[block / 64] ^= 1ull << (block % 64);
  EXPECT_TRUE(mentions(r, "and also")) << check_text(r);
}

TEST(SegmentCheck, ABlockInNoStateIsALeakAndItsOwnerPointsAtNothing) {
  Rig rig;
  ShmHeapHeader& hh = rig.h->heap;
  uint64_t block = (qp_slot(rig.h, rig.a).dbrec_off - hh.heap_off) / kHeapMinBlock;
  uint8_t* order = rig.s->at<uint8_t>(hh.order_off) + block;
  uint8_t saved = *order;
  *order = 0;
  CheckReport r = check_segment(rig.s);
  *order = saved;
  EXPECT_TRUE(mentions(r, "leaked")) << check_text(r);
  EXPECT_TRUE(mentions(r, "qp dbrec")) << check_text(r);
}

TEST(SegmentCheck, ARingOwnedTwiceAndABadCountAreFound) {
  Rig rig;
  QpSlot& b = qp_slot(rig.h, rig.b);
  uint64_t saved = b.rq_off;
  b.rq_off = qp_slot(rig.h, rig.a).rq_off;
  cq_slot(rig.h, rig.cq).cqe_cnt += 1;
  CheckReport r = check_segment(rig.s);
  b.rq_off = saved;
  cq_slot(rig.h, rig.cq).cqe_cnt -= 1;
  EXPECT_TRUE(mentions(r, "also belongs to")) << check_text(r);
  EXPECT_TRUE(mentions(r, "owned by no object")) << check_text(r);
  EXPECT_TRUE(mentions(r, "CQEs")) << check_text(r);
}

TEST(SegmentCheck, ALockHeldByAFreeProcessRecordIsFound) {
  Rig rig;
  qp_slot(rig.h, rig.a).rq_lock.word.store(kMaxProcs);  // record kMaxProcs - 1: never ours
  CheckReport r = check_segment(rig.s);
  qp_slot(rig.h, rig.a).rq_lock.word.store(0);
  EXPECT_TRUE(mentions(r, "lock held")) << check_text(r);
}
