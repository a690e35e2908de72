// SPDX-License-Identifier: BSD-2-Clause
// resize_cq (emu/objects/cq_resize.cpp): the consumer grows and shrinks a CQ's ring while three
// producer threads keep completing into it through the engine's write_cqe; every CQE arrives
// exactly once and in each producer's order, and no resize overruns the CQ. A shrink below the
// unpolled CQEs is refused and leaves them in place. A producer that trusts the cached consumer
// index is ordered after the consumer's reads (CqConsumerIndex).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device/engine.h"
#include "emu/barriers.h"
#include "emu/objects.h"
#include "emu/reclaim.h"

using namespace emu;

namespace {

constexpr int kProducers = 3;
#if defined(__SANITIZE_THREAD__)
// TSan makes each handoff between these four spinning threads many times slower (ci/sanitize.sh):
// a fortieth of the CQEs still crosses hundreds of resizes within the bound against a hang.
constexpr uint32_t kPerProducer = 500;
#else
constexpr uint32_t kPerProducer = 20000;
#endif
constexpr uint32_t kCredit = 2;  // CQEs a producer may have unpolled: at most 6 outstanding

struct Consumer {
  Segment* s;
  CqSlot& c;
  uint32_t ci = 0;
  // The next CQE, or false.
  bool poll(uint32_t* producer, uint32_t* seq) {
    const Cqe64& e = s->at<Cqe64>(c.buf_off)[ci & (c.cqe_cnt - 1)];
    uint8_t op_own = cqe_owner_load(&e.op_own);
    if (!cqe_is_new(op_own, ci, c.log_cqe_cnt)) return false;
    from_device_barrier();  // the owner byte, then the fields (as the provider's poll)
    *producer = cqe_qpn(e) - 1;
    *seq = be32(e.byte_cnt);
    c.ci.store(++ci, std::memory_order_release);
    return true;
  }
};

// Writes a requester CQE as the engine does, inside an engine section: QP `qpn`'s, with `seq` in
// its byte count (what the consumer reads back as the producer's sequence number).
void write_cqe_as_engine(Segment* s, Engine& eng, CqSlot& c, uint32_t qpn, uint32_t seq) {
  CqeInfo info{};
  info.cqe_opcode = kCqeReq;
  info.qpn = qpn;
  info.byte_cnt = seq;
  EngineSection in_engine(s);
  eng.write_cqe(c, info);
}

TEST(CqResize, ProducersLoseAndDoubleNothingAcrossResizes) {
  Segment* s = Segment::get();
  uint32_t idx = 0;
  ASSERT_EQ(create_cq(s, CqSpec{0, kMaxContexts, 3, -1, 0}, &idx), Status::ok);  // 8 CQEs
  CqSlot& c = cq_slot(s->hdr(), idx);
  std::atomic<uint32_t> consumed[kProducers] = {};
  std::atomic<bool> give_up{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      Engine eng(s);
      for (uint32_t seq = 0; seq < kPerProducer && !give_up.load(); ++seq) {
        while (seq - consumed[p].load(std::memory_order_acquire) >= kCredit && !give_up.load())
          cpu_relax();
        write_cqe_as_engine(s, eng, c, static_cast<uint32_t>(p) + 1, seq);
      }
    });
  Consumer con{s, c};
  uint32_t next[kProducers] = {};
  uint32_t total = 0, resized = 0, polls = 0;
  // Grow and shrink, never below the 6 the producers may have outstanding (a ring they could
  // overrun would put the CQ in error, as it should; AShrinkBelow... covers the refusal).
  const uint32_t logs[] = {5, 3, 6, 3, 7, 4};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);  // against a hang
  while (total < kProducers * kPerProducer && std::chrono::steady_clock::now() < deadline) {
    uint32_t p, seq;
    if (con.poll(&p, &seq)) {
      ASSERT_LT(p, static_cast<uint32_t>(kProducers));
      ASSERT_EQ(seq, next[p]) << "producer " << p << ": a CQE lost, doubled or out of order";
      ++next[p];
      consumed[p].store(next[p], std::memory_order_release);
      ++total;
    }
    if (++polls % 97 == 0) {
      uint32_t log = logs[resized % 6];
      uint64_t off = 0;
      ASSERT_EQ(resize_cq(s, c, log, con.ci, &off), Status::ok);
      ++resized;
      EXPECT_EQ(c.cqe_cnt, 1u << log);
      EXPECT_EQ(c.buf_off, off);
    }
  }
  give_up.store(true);
  for (auto& t : producers) t.join();
  EXPECT_EQ(total, kProducers * kPerProducer);
  EXPECT_EQ(c.overrun.load(), 0u);
  EXPECT_GT(resized, 100u);
  retire_cq(s, c);
}

// The consumer index reaches a producer that overwrites a polled slot either from the CQ doorbell
// record (ci, the consumer's release store) or from the producers' cache of it (ci_seen), which
// another producer filled. Either way the consumer's reads of the slot's last CQE must come before
// the write: B's full ring makes it read ci and cache it, then A trusts the cache and writes into
// the slot of a CQE the consumer read. The threads hand steps on by relaxed stores and loads,
// which order nothing for TSan (ci/sanitize.sh), so the only order between the consumer's reads
// and A's write is the one the cache carries: with the cache relaxed, TSan reports the race here
// every run.
TEST(CqConsumerIndex, AProducerTrustingTheCacheComesAfterTheConsumersReads) {
  Segment* s = Segment::get();
  uint32_t idx = 0;
  ASSERT_EQ(create_cq(s, CqSpec{0, kMaxContexts, 3, -1, 0}, &idx), Status::ok);  // 8 CQEs
  CqSlot& c = cq_slot(s->hdr(), idx);
  std::atomic<int> step{0};
  auto wait_for = [&](int k) {
    while (step.load(std::memory_order_relaxed) != k) cpu_relax();
  };
  auto produce = [&](Engine& eng, uint32_t seq) { write_cqe_as_engine(s, eng, c, 1, seq); };
  std::thread a([&] {
    Engine eng(s);
    for (uint32_t i = 0; i < 8; ++i) produce(eng, i);  // the ring full: 0..7
    step.store(1, std::memory_order_relaxed);
    wait_for(3);
    produce(eng, 9);  // index 9, the slot of CQE 1: 9 - ci_seen (2) < 8, the cache is trusted
    step.store(4, std::memory_order_relaxed);
  });
  std::thread b([&] {
    Engine eng(s);
    wait_for(2);
    produce(eng, 8);  // index 8: the cache (0) says full, so ci (2) is read and cached
    step.store(3, std::memory_order_relaxed);
  });
  wait_for(1);
  Consumer con{s, c};
  uint32_t p = 0, seq = 0;
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(con.poll(&p, &seq));
    EXPECT_EQ(seq, i);
  }
  step.store(2, std::memory_order_relaxed);
  wait_for(4);
  a.join();
  b.join();
  EXPECT_EQ(c.ci_seen.load(), 2u) << "B cached the index it read; A wrote on the cache's word";
  EXPECT_EQ(c.overrun.load(), 0u);
  for (uint32_t i = 2; i < 10; ++i) {
    EXPECT_TRUE(con.poll(&p, &seq));
    EXPECT_EQ(seq, i);
  }
  retire_cq(s, c);
}

TEST(CqResize, AShrinkBelowTheUnpolledIsRefusedAndLosesNothing) {
  Segment* s = Segment::get();
  uint32_t idx = 0;
  ASSERT_EQ(create_cq(s, CqSpec{0, kMaxContexts, 4, -1, 0}, &idx), Status::ok);  // 16
  CqSlot& c = cq_slot(s->hdr(), idx);
  Engine eng(s);
  for (uint32_t i = 0; i < 5; ++i) write_cqe_as_engine(s, eng, c, 1, i);
  uint64_t off = 0;
  EXPECT_EQ(resize_cq(s, c, 2, 0, &off), Status::invalid);  // 4 < 5 unpolled
  EXPECT_EQ(c.cqe_cnt, 16u);
  EXPECT_EQ(cq_ring_log_capacity(c.ring.load()), 4u) << "the old bound is back";
  ASSERT_EQ(resize_cq(s, c, 3, 0, &off), Status::ok);  // 8 >= 5
  Consumer con{s, c};
  for (uint32_t i = 0; i < 5; ++i) {
    uint32_t p = 9, seq = 99;
    ASSERT_TRUE(con.poll(&p, &seq));
    EXPECT_EQ(seq, i);
  }
  uint32_t p, seq;
  EXPECT_FALSE(con.poll(&p, &seq));
  retire_cq(s, c);
}

}  // namespace
