// resize_cq (emu/objects/cq_resize.cpp): the consumer grows and shrinks a CQ's ring while three
// producer threads keep completing into it through the engine's write_cqe; every CQE arrives
// exactly once and in each producer's order, and no resize overruns the CQ. A shrink below the
// unpolled CQEs is refused and leaves them in place.
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
        CqeInfo info{};
        info.cqe_opcode = kCqeReq;
        info.qpn = static_cast<uint32_t>(p) + 1;
        info.byte_cnt = seq;
        EngineSection in_engine(s);
        eng.write_cqe(c, info);
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

TEST(CqResize, AShrinkBelowTheUnpolledIsRefusedAndLosesNothing) {
  Segment* s = Segment::get();
  uint32_t idx = 0;
  ASSERT_EQ(create_cq(s, CqSpec{0, kMaxContexts, 4, -1, 0}, &idx), Status::ok);  // 16
  CqSlot& c = cq_slot(s->hdr(), idx);
  Engine eng(s);
  for (uint32_t i = 0; i < 5; ++i) {
    CqeInfo info{};
    info.cqe_opcode = kCqeReq;
    info.qpn = 1;
    info.byte_cnt = i;
    EngineSection in_engine(s);
    eng.write_cqe(c, info);
  }
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
