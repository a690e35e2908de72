// SPDX-License-Identifier: BSD-2-Clause
// Every slot kind made and retired through emu/objects.h gives back exactly the heap it took, and
// a context's release (the sweep's path) frees the rings of what was made on it.
#include <gtest/gtest.h>
#include <unistd.h>

#include "emu/objects.h"
#include "emu/reclaim.h"
#include "emu/xrc.h"
#include "shm/shm_heap.h"

using namespace emu;

namespace {

uint64_t heap_free(Segment* s) {
  return ShmHeap(static_cast<char*>(s->at(0)), &s->hdr()->heap).free_bytes();
}

// The free heap before a test's objects, with each table's first chunk already made: a chunk
// comes from the heap with its table's first slot and stays while the fabric lives (layout.h,
// SlotDir), so it is not the objects' to give back. One slot of each kind claimed and freed.
uint64_t heap_free_with_tables(Segment* s) {
  Header* h = s->hdr();
  uint32_t i = 0;
  if (s->alloc_pd(&i) == Status::ok) pd_slot(h, i).state.store(kSlotFree);
  if (s->alloc_mr(&i) == Status::ok) mr_slot(h, i).state.store(kSlotFree);
  if (s->alloc_cq(&i) == Status::ok) cq_slot(h, i).state.store(kSlotFree);
  if (s->alloc_srq(&i) == Status::ok) srq_slot(h, i).state.store(kSlotFree);
  if (s->alloc_qp(&i) == Status::ok) qp_slot(h, i).state.store(kSlotFree);
  return heap_free(s);
}

QpSpec rc_spec(uint32_t ctx, uint32_t pd, uint32_t cq, uint32_t srq_ref) {
  QpSpec q{};
  q.ctx = ctx;
  q.type = kQptRc;
  q.pd = pd;
  q.send_cq = q.recv_cq = cq;
  q.srq_ref = srq_ref;
  q.sq_bbs = 64;
  q.rq_wqe_cnt = 32;
  q.rq_stride = 32;
  return q;
}

TEST(Objects, EveryKindGivesBackItsHeap) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  Header* h = s->hdr();
  const uint64_t before = heap_free_with_tables(s);

  uint32_t ctx = 0, pd = 0, cq = 0, srq = 0, xsrq = 0, mr = 0, qp = 0, qp_on_srq = 0, tgt = 0;
  ASSERT_EQ(create_ctx(s, ContextSpec{0, 4, -1}, &ctx), Status::ok);
  ASSERT_EQ(create_pd(s, 0, ctx, &pd), Status::ok);
  ASSERT_EQ(create_cq(s, CqSpec{0, ctx, 6, -1, 0}, &cq), Status::ok);
  ASSERT_EQ(create_srq(s, SrqSpec{0, ctx, pd, 64, 64}, &srq), Status::ok);
  static char buf[256];
  auto addr = reinterpret_cast<uint64_t>(buf);
  ASSERT_EQ(create_mr(s, MrSpec{pd, kAccessLocalWrite, addr, sizeof buf, addr}, &mr), Status::ok);
  ASSERT_EQ(create_qp(s, rc_spec(ctx, pd, cq, 0), &qp), Status::ok);
  ASSERT_EQ(create_qp(s, rc_spec(ctx, pd, cq, srq + 1), &qp_on_srq), Status::ok);
  EXPECT_EQ(srq_slot(h, srq).attached_qps.load(), 1u);
  ASSERT_EQ(create_tgt_qp(s, 0, ctx, &tgt), Status::ok);
  // An XRC SRQ counts in its domain until it is freed.
  uint32_t xrcd = 0, open = 0;
  ASSERT_EQ(xrcd_open(s, XrcdKey{0, 0, 0}, true, false, kXrcPolicyKernel, ctx, &xrcd, &open),
            Status::ok);
  ASSERT_EQ(create_srq(s, SrqSpec{0, ctx, pd, 16, 32, xrcd + 1, cq}, &xsrq), Status::ok);
  EXPECT_EQ(h->xrcds[xrcd].objects.load(), 1u);

  EXPECT_LT(heap_free(s), before);
  EXPECT_EQ(qp_slot(h, qp).state.load(), kSlotLive);
  EXPECT_EQ(qp_slot(h, qp).qp_state.load(), kQpsReset);
  EXPECT_EQ(s->find_qp(qp_slot(h, tgt).qpn), &qp_slot(h, tgt));
  EXPECT_EQ(s->find_mr(mr_slot(h, mr).key), &mr_slot(h, mr));
  EXPECT_NE(h->ctxs[ctx].async_wfd, 0);

  for (uint32_t q : {qp, qp_on_srq, tgt}) retire_qp(s, qp_slot(h, q));
  EXPECT_EQ(srq_slot(h, srq).attached_qps.load(), 0u);
  for (uint32_t r : {srq, xsrq}) {
    stop_srq(s, srq_slot(h, r));
    wait_for_engines(s);
    free_srq(s, srq_slot(h, r));
  }
  EXPECT_EQ(h->xrcds[xrcd].objects.load(), 0u);
  xrcd_close(s, open);
  EXPECT_EQ(h->xrcds[xrcd].state.load(), kSlotFree);
  retire_mr(s, mr_slot(h, mr));
  retire_cq(s, cq_slot(h, cq));
  retire_pd(pd_slot(h, pd));
  s->release_context_objects(ctx);  // a context goes with its UAR page (ibv_close_device)

  for (uint32_t q : {qp, qp_on_srq, tgt}) EXPECT_EQ(qp_slot(h, q).state.load(), kSlotFree);
  EXPECT_EQ(srq_slot(h, srq).state.load(), kSlotFree);
  EXPECT_EQ(cq_slot(h, cq).state.load(), kSlotFree);
  EXPECT_EQ(mr_slot(h, mr).state.load(), kSlotFree);
  EXPECT_EQ(pd_slot(h, pd).state.load(), kSlotFree);
  EXPECT_EQ(h->ctxs[ctx].state.load(), kSlotFree);
  EXPECT_EQ(heap_free(s), before);
}

// The sweep's path: what a context's close releases (as a dead owner's objects are) frees the
// same rings retire would.
TEST(Objects, ReleasedWithTheirContextGiveBackTheirHeap) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  const uint64_t before = heap_free_with_tables(s);
  uint32_t ctx = 0, pd = 0, cq = 0, srq = 0, qp = 0;
  ASSERT_EQ(create_ctx(s, ContextSpec{0, 2, -1}, &ctx), Status::ok);
  ASSERT_EQ(create_pd(s, 0, ctx, &pd), Status::ok);
  ASSERT_EQ(create_cq(s, CqSpec{0, ctx, 4, -1, 0}, &cq), Status::ok);
  ASSERT_EQ(create_srq(s, SrqSpec{0, ctx, pd, 16, 32}, &srq), Status::ok);
  ASSERT_EQ(create_qp(s, rc_spec(ctx, pd, cq, 0), &qp), Status::ok);
  EXPECT_LT(heap_free(s), before);
  s->release_context_objects(ctx);
  EXPECT_EQ(qp_slot(s->hdr(), qp).state.load(), kSlotFree);
  EXPECT_EQ(srq_slot(s->hdr(), srq).state.load(), kSlotFree);
  EXPECT_EQ(heap_free(s), before);
}

}  // namespace

// Engine sections nest (the post path opens one around the doorbell, the engine's entry points
// their own): the thread's slot is marked inside (odd) by the outermost one only, and cleared when
// it closes, which is what wait_for_engines watches.
TEST(Objects, NestedEngineSectionsMarkTheThreadsSlotOnce) {
  Segment* s = Segment::get();
  EngineSlots& es = s->hdr()->engines[s->self()];
  auto mine = [&]() -> EngineSlot* {
    auto tid = static_cast<uint32_t>(gettid());
    for (uint32_t i = 0; i < kEngineSlots; ++i)
      if (es.slot[i].owner_tid.load() == tid) return &es.slot[i];
    return nullptr;
  };
  uint64_t before;
  {
    EngineSection outer(s);
    EngineSlot* slot = mine();
    ASSERT_NE(slot, nullptr);
    before = slot->seq.load();
    EXPECT_EQ(before & 1, 1u) << "inside";
    {
      EngineSection inner(s);
      EXPECT_EQ(slot->seq.load(), before) << "a nested section leaves the mark alone";
    }
    EXPECT_EQ(slot->seq.load(), before) << "still inside the outer one";
  }
  EXPECT_EQ(mine()->seq.load(), before + 1) << "outside";
  wait_for_engines(s);  // none of ours open: returns
}
