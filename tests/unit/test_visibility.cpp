// SPDX-License-Identifier: BSD-2-Clause
// The store buffers of emu/sched/visibility.h on a toy memory: a "ring" line and a "record" word, a
// poster that stores the first and then the second, and an observer that reads both as the device
// does. Under x86 the observer never sees the record without the line; under weak it can, unless
// the poster drains (a barrier) between the two.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>

#include "emu/sched/visibility.h"

namespace emu::sched {
namespace {

constexpr uint64_t kLineOff = 0, kRecordOff = 64;

struct Memory {
  uint8_t bytes[68] = {};
  StoreBuffers buffers;
  explicit Memory(Visibility v) : buffers(v) {}

  void store(StoreKind kind, uint64_t off, uint8_t value, uint32_t len) {
    buffer_store(kind, off, bytes + off, len);
    std::memset(bytes + off, value, len);
    point(kPointStore, off, value);
  }
  // What the device sees of len bytes at off.
  uint8_t seen(uint64_t off, uint32_t len, uint32_t at) {
    uint8_t copy[64];
    std::memcpy(copy, bytes + off, len);
    device_view(off, copy, len);
    return copy[at];
  }
};

ScenarioFactory publish(Visibility v, bool barrier, std::shared_ptr<Memory>* keep) {
  return [v, barrier, keep] {
    *keep = nullptr;
    auto m = std::make_shared<Memory>(v);
    *keep = m;
    Scenario sc;
    m->buffers.add_posters(sc, {{"poster", [m, barrier] {
                                   m->store(StoreKind::kRing, kLineOff, 1, 64);
                                   // The poster reads its own store at once.
                                   if (m->bytes[kLineOff] != 1) fail("no store forwarding");
                                   if (barrier) drain_stores();
                                   m->store(StoreKind::kRecord, kRecordOff, 1, 4);
                                 }}});
    sc.actors.push_back({"device", [m] {
                           for (int i = 0; i < 6; ++i) {
                             uint8_t record = m->seen(kRecordOff, 4, 0);
                             point(kPointDevDbrec);
                             if (record == 1 && m->seen(kLineOff, 64, 63) != 1)
                               fail("record before line");
                           }
                         }});
    sc.final_check = [m] { return m->buffers.pending() ? "undrained" : ""; };
    return sc;
  };
}

void expect_clean(Visibility v, bool barrier, uint32_t bound) {
  std::shared_ptr<Memory> keep;
  ExploreResult e = explore(publish(v, barrier, &keep), bound);
  EXPECT_FALSE(e.failed) << e.failure.signature;
  EXPECT_TRUE(e.exhausted);
}

TEST(Visibility, X86DrainsInProgramOrder) { expect_clean(Visibility::kX86, false, 3); }

TEST(Visibility, WeakLetsTheRecordOvertakeTheLine) {
  std::shared_ptr<Memory> keep;
  ExploreResult e = explore(publish(Visibility::kWeak, false, &keep), 3);
  ASSERT_TRUE(e.failed);
  EXPECT_EQ(e.failure.signature, "record before line");
  auto replay = replay_strategy(e.failure.schedule);
  RunResult r = run(publish(Visibility::kWeak, false, &keep), *replay);
  EXPECT_EQ(r.trace_hash, e.failure.trace_hash);
}

TEST(Visibility, WeakWithABarrierKeepsTheOrder) { expect_clean(Visibility::kWeak, true, 2); }

TEST(Visibility, ScAddsNoDrainActors) {
  StoreBuffers b(Visibility::kSc);
  Scenario sc;
  b.add_posters(sc, {{"p", [] {}}});
  EXPECT_EQ(sc.actors.size(), 1u);
}

TEST(Visibility, DrainActorsPerProfile) {
  for (auto [v, n] : {std::pair{Visibility::kX86, 2u}, std::pair{Visibility::kWeak, 3u}}) {
    StoreBuffers b(v);
    Scenario sc;
    b.add_posters(sc, {{"p", [] {}}});
    EXPECT_EQ(sc.actors.size(), n) << visibility_name(v);
  }
}

// Two undrained stores to one line: the device sees what was there before the first; draining
// shows memory again. Outside a run the hooks change nothing.
TEST(Visibility, TheOldestUndrainedStoreHidesTheLine) {
  StoreBuffers b(Visibility::kX86);
  Scenario sc;
  b.add_posters(sc, {{"p", [] {}}});
  uint8_t before1[4] = {1, 1, 1, 1}, before2[4] = {2, 2, 2, 2};
  b.store(0, StoreKind::kRecord, 8, before1, 4);
  b.store(0, StoreKind::kRecord, 10, before2, 4);  // overlaps the first's last two bytes
  uint8_t view[8] = {9, 9, 9, 9, 9, 9, 9, 9};      // memory at 6..13
  b.overlay(6, view, 8);
  const uint8_t want[8] = {9, 9, 1, 1, 1, 1, 2, 2};
  EXPECT_EQ(std::memcmp(view, want, 8), 0);
  EXPECT_EQ(b.pending(), 2u);
  b.drain_all(0);
  EXPECT_EQ(b.pending(), 0u);
  uint8_t again[4] = {9, 9, 9, 9};
  device_view(8, again, 4);  // not in a run: untouched
  EXPECT_EQ(again[0], 9);
}

// ---- write-combining chunks: a two-chunk "register" with a tag word per chunk ----

constexpr uint64_t kTag = 7;

struct Register {
  uint8_t bytes[2][64] = {};
  std::atomic<uint64_t> tags[2] = {};
  StoreBuffers buffers;
  explicit Register(Visibility v) : buffers(v, /*write_combining=*/true) {}

  void chunk(int i) {
    uint8_t src[64];
    std::memset(src, 1, sizeof src);
    if (!buffer_wc_chunk(bytes[i], src, &tags[i], kTag)) {
      std::memcpy(bytes[i], src, sizeof src);
      tags[i].store(kTag);
    }
    point(kPointBfChunk, i);
  }
};

// The poster writes chunk 0 then chunk 1, no flush; the device fails when it sees chunk 1 delivered
// and chunk 0 not (the burst reversed).
ScenarioFactory burst(Visibility v, std::shared_ptr<Register>* keep) {
  return [v, keep] {
    *keep = nullptr;
    auto r = std::make_shared<Register>(v);
    *keep = r;
    Scenario sc;
    r->buffers.add_posters(sc, {{"poster", [r] {
                                   r->chunk(0);
                                   r->chunk(1);
                                 }}});
    sc.actors.push_back({"device", [r] {
                           for (int i = 0; i < 4; ++i) {
                             bool second = r->tags[1].load() == kTag;
                             if (second && (r->tags[0].load() != kTag || r->bytes[0][0] != 1))
                               fail("chunk 1 before chunk 0");
                             point(kPointDevDbrec);
                           }
                         }});
    sc.final_check = [r] {
      return r->buffers.pending() || r->tags[0].load() != kTag ? "undelivered" : "";
    };
    return sc;
  };
}

TEST(Visibility, X86DeliversABurstReversed) {
  std::shared_ptr<Register> keep;
  ExploreResult e = explore(burst(Visibility::kX86, &keep), 2);
  ASSERT_TRUE(e.failed);
  EXPECT_EQ(e.failure.signature, "chunk 1 before chunk 0");
  auto replay = replay_strategy(e.failure.schedule);
  RunResult r = run(burst(Visibility::kX86, &keep), *replay);
  EXPECT_EQ(r.trace_hash, e.failure.trace_hash);
}

TEST(Visibility, ScWritesChunksAtOnce) {
  std::shared_ptr<Register> keep;
  ExploreResult e = explore(burst(Visibility::kSc, &keep), 3);
  EXPECT_FALSE(e.failed) << e.failure.signature;
  EXPECT_TRUE(e.exhausted);
}

// A chunk is held until delivery; a second store to the same line combines with the first (one
// entry, the newest bytes); a barrier leaves chunks alone. Outside a run nothing is held.
TEST(Visibility, ChunksWaitForDeliveryAndCombine) {
  StoreBuffers b(Visibility::kX86, /*write_combining=*/true);
  Scenario sc;
  b.add_posters(sc, {{"p", [] {}}});
  uint8_t reg[64] = {}, one[64], two[64];
  std::memset(one, 1, 64);
  std::memset(two, 2, 64);
  std::atomic<uint64_t> tag{0};
  EXPECT_TRUE(b.wc_store(0, reg, one, &tag, 5));
  EXPECT_TRUE(b.wc_store(0, reg, two, &tag, 6));
  EXPECT_EQ(b.pending_chunks(), 1u);
  EXPECT_EQ(reg[0], 0);
  b.drain_all(0);  // store entries only
  EXPECT_EQ(b.pending_chunks(), 1u);
  b.deliver_all(0);
  EXPECT_EQ(b.pending(), 0u);
  EXPECT_EQ(reg[63], 2);
  EXPECT_EQ(tag.load(), 6u);
  EXPECT_FALSE(buffer_wc_chunk(reg, one, &tag, 9));  // not in a run
  EXPECT_FALSE(b.wc_store(1, reg, one, &tag, 9));    // not a poster
}

TEST(Visibility, ProfileNames) {
  Visibility v;
  ASSERT_TRUE(parse_visibility("weak", &v));
  EXPECT_EQ(v, Visibility::kWeak);
  EXPECT_STREQ(visibility_name(Visibility::kX86), "x86");
  EXPECT_FALSE(parse_visibility("tso", &v));
}

}  // namespace
}  // namespace emu::sched
