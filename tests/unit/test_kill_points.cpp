// SPDX-License-Identifier: BSD-2-Clause
// Process death at a chosen point (emu/kill_point.h) and the sweep's heap audit that reclaims
// what a death leaks (Segment::audit_heap; ShmHeap::audit alone: test_shm_heap.cpp):
// docs/design/reliability.md, "Process death".
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "emu/config.h"
#include "emu/kill_point.h"
#include "emu/segment.h"
#include "shm/shm_heap.h"  // ShmHeap::free_bytes
#include "spawn_self.h"

using namespace emu;

namespace {

// EMU_UNIT_PROBE=alloc: attach and allocate from the heap (EMU_KILL_AT=heap_alloc kills it there).
int attach_and_alloc() {
  Segment* s = Segment::get();
  return s && s->alloc(8192, 4096) ? 0 : 3;
}
// EMU_UNIT_PROBE=grow: attach and take MiB blocks until the heap has to grow (EMU_KILL_AT=heap_grow
// kills it inside the growth); exits 4 if the heap never grew.
int attach_and_grow() {
  Segment* s = Segment::get();
  if (!s) return 3;
  for (int i = 0; i < 4096; ++i)
    if (!s->alloc(1u << 20, 4096)) return 3;
  return 4;
}
__attribute__((constructor)) void maybe_alloc_probe() {
  const char* probe = std::getenv("EMU_UNIT_PROBE");
  if (probe && std::strcmp(probe, "alloc") == 0) _exit(attach_and_alloc());
  if (probe && std::strcmp(probe, "grow") == 0) _exit(attach_and_grow());
}

// A probe process on this fabric (EMU_UNIT_PROBE=probe), SIGKILLed at its first pass of `point`.
void probe_killed_at(const std::string& probe, const std::string& point) {
  std::string out;
  int rc = spawn_self({"EMU_UNIT_PROBE=" + probe, "EMU_FABRIC=" + config().fabric,
                       "EMU_SHM_DIR=" + config().shm_dir, "EMU_KILL_AT=" + point},
                      &out);
  ASSERT_EQ(rc, -SIGKILL) << out;
  EXPECT_NE(out.find("killed at " + point + " #1"), std::string::npos) << out;
}

uint64_t heap_free_bytes(Segment* s) {
  return ShmHeap(static_cast<char*>(s->at(0)), &s->hdr()->heap).free_bytes();
}

}  // namespace

TEST(KillAt, PointsAndCountsAreParsed) {
  KillTarget t;
  ASSERT_TRUE(parse_kill_at("doorbell", &t));
  EXPECT_EQ(t.point, KillPoint::doorbell);
  EXPECT_EQ(t.nth, 1u);
  ASSERT_TRUE(parse_kill_at("heap_alloc:7", &t));
  EXPECT_EQ(t.point, KillPoint::heap_alloc);
  EXPECT_EQ(t.nth, 7u);
  ASSERT_TRUE(parse_kill_at("cm_established:2", &t));
  EXPECT_EQ(t.point, KillPoint::cm_established);
  for (const char* bad : {"", "nowhere", "doorbell:0", "doorbell:x", "random", "random:x",
                          "random:1:0", "qp_lock:3:4"})
    EXPECT_FALSE(parse_kill_at(bad, &t)) << bad;
  for (int p = 0; p < static_cast<int>(KillPoint::count); ++p) {
    std::string name = kill_point_name(static_cast<KillPoint>(p));
    ASSERT_TRUE(parse_kill_at(name.c_str(), &t)) << name;
    EXPECT_EQ(static_cast<int>(t.point), p);
  }
}

TEST(KillAt, RandomDrawsEveryPointFromItsSeedAlike) {
  std::set<int> points;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    std::string text = "random:" + std::to_string(seed) + ":10";
    KillTarget a, b;
    ASSERT_TRUE(parse_kill_at(text.c_str(), &a));
    ASSERT_TRUE(parse_kill_at(text.c_str(), &b));
    EXPECT_EQ(a.point, b.point);
    EXPECT_EQ(a.nth, b.nth);
    EXPECT_GE(a.nth, 1u);
    EXPECT_LE(a.nth, 10u);
    points.insert(static_cast<int>(a.point));
  }
  EXPECT_EQ(points.size(), static_cast<size_t>(KillPoint::count));
}

TEST(HeapAudit, AProcessKilledInsideAnAllocationLeaksABlockTheSweepReclaims) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  s->sweep_dead();  // what earlier tests of this process left
  ASSERT_TRUE(s->audit_heap(true, true).done);
  uint64_t before = heap_free_bytes(s);
  ASSERT_NO_FATAL_FAILURE(probe_killed_at("alloc", "heap_alloc"));
  HeapAudit audit = s->audit_heap(false, true);
  ASSERT_TRUE(audit.done);
  EXPECT_EQ(audit.leaked_blocks, 1u);
  EXPECT_EQ(audit.leaked_bytes, 8192u);
  EXPECT_EQ(s->sweep_dead(), 1);
  EXPECT_EQ(s->audit_heap(false, true).leaked_blocks, 0u) << "the sweep gave it back";
  EXPECT_EQ(heap_free_bytes(s), before);
}

// Killed inside the heap's growth (shm_heap.cpp, ShmHeap::grow): the new end stored, the step's
// blocks not yet free. They and the MiB blocks the process took first are leaked, the sweep's
// audit gives them back, and the heap is whole and consistent again.
TEST(HeapAudit, AProcessKilledInsideTheHeapsGrowthLeaksTheStepTheSweepReclaims) {
  Segment* s = Segment::get();
  ASSERT_NE(s, nullptr);
  s->sweep_dead();
  ASSERT_TRUE(s->audit_heap(true, true).done);
  uint64_t before = heap_free_bytes(s);
  uint64_t grown = s->hdr()->heap.grown_blocks;
  ASSERT_NO_FATAL_FAILURE(probe_killed_at("grow", "heap_grow"));
  EXPECT_GT(s->hdr()->heap.grown_blocks, grown);
  HeapAudit audit = s->audit_heap(false, true);
  ASSERT_TRUE(audit.done);
  EXPECT_GE(audit.leaked_bytes, uint64_t(kHeapMinBlock) << kHeapGrowOrder) << "the step";
  EXPECT_EQ(s->sweep_dead(), 1);
  EXPECT_EQ(s->audit_heap(false, true).leaked_blocks, 0u) << "the sweep gave them back";
  EXPECT_EQ(heap_free_bytes(s), before);
  std::vector<std::string> problems;
  ShmHeap(static_cast<char*>(s->at(0)), &s->hdr()->heap).check(s->hdr()->segment_size, &problems);
  EXPECT_TRUE(problems.empty()) << problems[0];
}

// A process killed while it destroyed a QP (the slot dying, a ring freed, the others not): the
// sweep frees the slot but not rings it did not mark dying itself; the audit takes them back.
TEST(HeapAudit, RingsOfASlotWhoseDestroyDiedAreReclaimedByTheSweep) {
  Segment* s = Segment::get();
  Header* h = s->hdr();
  s->sweep_dead();
  ASSERT_TRUE(s->audit_heap(true, true).done);
  // The QP table's first chunk made before the count: it comes from the heap with the first QP
  // and stays while the fabric lives (layout.h, SlotDir), so it is not the rings' to give back.
  uint32_t first = 0;
  ASSERT_EQ(s->alloc_qp(&first), Status::ok);
  qp_slot(h, first).state.store(kSlotFree);
  uint64_t before = heap_free_bytes(s);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    Segment* mine = Segment::get();  // a record of its own (docs/design/verbs-provider.md, "Fork")
    uint32_t q = 0;
    if (!mine || mine->alloc_qp(&q) != Status::ok) _exit(1);
    QpSlot& slot = qp_slot(h, q);
    slot.sq_off = mine->alloc(16384, 4096);
    slot.rq_off = mine->alloc(4096, 4096);
    slot.dbrec_off = mine->alloc(64, 64);
    slot.state.store(kSlotDying);
    mine->free(slot.sq_off);
    (void)!write(fds[1], &q, sizeof q);
    pause();
    _exit(0);
  }
  uint32_t q = kMaxQps;
  ASSERT_EQ(read(fds[0], &q, sizeof q), (ssize_t)sizeof q);
  close(fds[0]);
  close(fds[1]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(s->sweep_dead(), 1);
  EXPECT_EQ(qp_slot(h, q).state.load(), kSlotFree);
  EXPECT_EQ(s->audit_heap(false, true).leaked_blocks, 0u);
  EXPECT_EQ(heap_free_bytes(s), before) << "the rings its destroy had not freed came back";
}

TEST(HeapAudit, WaitsForNoObjectBeingMadeAndOtherwiseIsNotDone) {
  Segment* s = Segment::get();
  {
    HeapUse use(s);
    EXPECT_FALSE(s->audit_heap(true, false).done) << "a thread of ours holds a ring not named yet";
  }
  EXPECT_TRUE(s->audit_heap(false, false).done);
}
