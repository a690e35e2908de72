// SPDX-License-Identifier: BSD-2-Clause
// The engine driven directly: rings and objects laid out by hand in the segment, as a driver would,
// then the engine's steps observed through the CQ ring and the target memory.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "engine_rig.h"

using namespace emu;

using namespace emu::test;

namespace {
// The next CQE: there is one, of `opcode` (op_own's high nibble) and `bytes` long. *out is the CQE
// polled, or nullptr.
::testing::AssertionResult next_cqe_is(Rig& r, CqeOpcode opcode, uint32_t bytes,
                                       const Cqe64** out = nullptr) {
  const Cqe64* c = r.poll();
  if (out) *out = c;
  if (!c) return ::testing::AssertionFailure() << "no CQE";
  if ((c->op_own >> 4) != opcode || be32(c->byte_cnt) != bytes)
    return ::testing::AssertionFailure()
           << "a CQE of opcode " << (c->op_own >> 4) << ", " << be32(c->byte_cnt)
           << " bytes; expected opcode " << int(opcode) << ", " << bytes << " bytes";
  return ::testing::AssertionSuccess();
}
}  // namespace

TEST(Engine, RdmaWriteMovesBytesAndCompletes) {
  Rig r;
  char src[64] = "hello device", dst[64] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t rk = r.reg(dst, sizeof dst, kAccessLocalWrite | kAccessRemoteWrite);
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst)), be32(rk), 0};
  DataSeg d{be32(13), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpRdmaWrite, seg_bytes(&ra, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_STREQ(dst, "hello device");
  const Cqe64* c = nullptr;
  ASSERT_TRUE(next_cqe_is(r, kCqeReq, 13, &c));
  EXPECT_EQ(cqe_wqe_opcode(*c), kOpRdmaWrite);
  EXPECT_EQ(r.poll(), nullptr) << "one WQE, one CQE";
}

TEST(Engine, BadRkeyIsRemoteAccessErrorAndNothingIsWritten) {
  Rig r;
  char src[16] = "xxxxxxx", dst[16] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t rk = r.reg(dst, sizeof dst, kAccessLocalWrite);  // no remote write right
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst)), be32(rk), 0};
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpRdmaWrite, seg_bytes(&ra, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_EQ(dst[0], 0);
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op_own >> 4, kCqeReqErr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynRemoteAccess);
  EXPECT_EQ(qp_slot(r.h, r.a).qp_state.load(), kQpsErr);
  EXPECT_EQ(qp_slot(r.h, r.b).qp_state.load(), kQpsErr) << "the responder's access violation";
}

TEST(Engine, SendConsumesAReceiveAndCompletesBothSides) {
  Rig r;
  char src[32] = "payload", dst[32] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t dk = r.reg(dst, sizeof dst, kAccessLocalWrite);
  r.post_recv(r.b, dk, dst, sizeof dst);
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpSend, seg_bytes(&d, 16));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_STREQ(dst, "payload");
  ASSERT_TRUE(next_cqe_is(r, kCqeRespSend, 8));
  const Cqe64* sc = r.poll();
  ASSERT_NE(sc, nullptr);
  EXPECT_EQ(sc->op_own >> 4, kCqeReq);
}

TEST(Engine, SendWithoutReceiveStallsThenRnrExceededWithZeroRetries) {
  Rig r;
  qp_slot(r.h, r.a).rnr_retry = 0;
  char src[8] = "a";
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  DataSeg d{be32(1), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, kOpSend, seg_bytes(&d, 16));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynRnrRetryExc);
}

// A responder that leaves the receiving states between the requester's lookup, which found it
// receiving, and the requester's look at its receive queue: ibv_modify_qp to ERR or RESET stores
// the state, then flushes or resets the queue under the queue's lock, so the requester, which
// takes that lock, finds the queue empty. Hardware answers nothing from such a QP (IBTA 10.3.1:
// packets to a QP in RESET or ERR are dropped): the requester retries on its transport timer and
// no RNR NAK may be sent. The test holds the receive lock so that the requester waits there, past
// the lookup (its COMM_EST on the responder, still in RTR, says so); `leave` runs on a thread of
// its own (it takes the lock too) and has stored the new state before the lock is let go. The
// queue is empty, as the flush leaves it, whichever takes the lock first. The requester's timeout
// is infinite and its RNR retries too (as rsockets asks): no timer runs, and the kind of stall it
// is left in says what it was answered.
namespace {
void responder_leaves_during_message(uint8_t opcode, uint32_t left_state,
                                     const std::function<void(Rig&, QpSlot&)>& leave) {
  Rig r;
  QpSlot& a = qp_slot(r.h, r.a);
  QpSlot& b = qp_slot(r.h, r.b);
  a.timeout = 0;
  a.rnr_retry = 7;
  b.qp_state.store(kQpsRtr);
  char src[8] = "a", dst[8] = {};
  uint32_t lk = r.reg(src, sizeof src, kAccessLocalWrite);
  uint32_t rk = r.reg(dst, sizeof dst, kAccessLocalWrite | kAccessRemoteWrite);
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst)), be32(rk), 0};
  DataSeg d{be32(1), be32(lk), be64(reinterpret_cast<uint64_t>(src))};
  r.post(r.a, opcode,
         opcode == kOpSend ? seg_bytes(&d, 16) : seg_bytes(&ra, 16) + seg_bytes(&d, 16));
  std::thread requester, leaver;
  {
    ShmLockGuard held(b.rq_lock, r.s->self());
    requester = std::thread([&] { r.eng.kick_sq(a); });
    while (!b.comm_est.load()) std::this_thread::yield();
    leaver = std::thread([&] { leave(r, b); });
    while (b.qp_state.load() != left_state) std::this_thread::yield();
  }
  requester.join();
  leaver.join();
  EXPECT_EQ(a.stall.load(), kStallRetry) << "no answer: the transport timer, not an RNR NAK";
  EXPECT_EQ(r.poll(), nullptr) << "the message waits for its retry";
  EXPECT_EQ(dst[0], 0);
}
}  // namespace

TEST(Engine, ASendToAResponderGoingToErrorMeetsNoRnrNak) {
  responder_leaves_during_message(kOpSend, kQpsErr,
                                  [](Rig& r, QpSlot& b) { r.eng.enter_error(b); });
}

TEST(Engine, AWriteWithImmediateToAResponderGoingToResetMeetsNoRnrNak) {
  responder_leaves_during_message(kOpRdmaWriteImm, kQpsReset, [](Rig& r, QpSlot& b) {
    b.qp_state.store(kQpsReset);  // what ibv_modify_qp does, then reset_queues
    reset_qp_device_state(r.s, b);
  });
}

TEST(Engine, MalformedWqeIndexIsALocalQpOperationError) {
  Rig r;
  r.post(r.a, kOpNop, {}, true, /*idx_override=*/7);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynLocalQpOp);
  EXPECT_EQ(qp_slot(r.h, r.a).qp_state.load(), kQpsErr);
}

// Racing posters can leave a doorbell record that ends inside a WQE: the flush of a QP in ERR then
// steps past the producer, and must stop there instead of going round the 16-bit ring again.
TEST(Engine, AFlushThatStepsPastTheProducerStops) {
  Rig r;
  QpSlot& q = qp_slot(r.h, r.a);
  q.qp_state.store(kQpsErr);
  r.post(r.a, kOpNop, std::vector<uint8_t>(64, 0));  // 80 bytes: two blocks
  ASSERT_EQ(r.heads[r.a], 2u);
  dbrec_store32(&r.s->at<uint32_t>(q.dbrec_off)[1], be32(1));  // the record says one block
  r.eng.kick_sq(q);
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynWrFlush);
  EXPECT_EQ(r.poll(), nullptr) << "one WQE flushed, once";
  EXPECT_EQ(q.sq_ci, 2u);
}

// run_sq stops when it has used up the record it read (outside scheduled runs it does not read it
// again); kick_sq reads it once more after dropping the runner's lock. Every WQE still runs.
TEST(Engine, OneKickRunsEveryWqeTheRecordCounts) {
  Rig r;
  QpSlot& q = qp_slot(r.h, r.a);
  for (int i = 0; i < 3; ++i) r.post(r.a, kOpNop, {});
  r.eng.kick_sq(q);
  EXPECT_EQ(q.sq_ci, 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(r.poll(), nullptr) << "CQE " << i;
  EXPECT_EQ(r.poll(), nullptr);
  r.post(r.a, kOpNop, {});
  r.eng.kick_sq(q);
  EXPECT_EQ(q.sq_ci, 4u) << "the next record's WQE, at the next doorbell";
  EXPECT_NE(r.poll(), nullptr);
}

TEST(Engine, UnsignaledWqeProducesNoCompletion) {
  Rig r;
  r.post(r.a, kOpNop, {}, false);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_EQ(r.poll(), nullptr);
  EXPECT_EQ(qp_slot(r.h, r.a).sq_ci, 1u) << "but the device consumed it";
}

TEST(Engine, AtomicFetchAddReturnsOldValue) {
  Rig r;
  alignas(8) uint64_t target = 40, result = 0;
  uint32_t lk = r.reg(&result, 8, kAccessLocalWrite);
  uint32_t rk = r.reg(&target, 8, kAccessLocalWrite | kAccessRemoteAtomic);
  RaddrSeg ra{be64(reinterpret_cast<uint64_t>(&target)), be32(rk), 0};
  AtomicSeg at{be64(2), 0};
  DataSeg d{be32(8), be32(lk), be64(reinterpret_cast<uint64_t>(&result))};
  r.post(r.a, kOpAtomicFa, seg_bytes(&ra, 16) + seg_bytes(&at, 16) + seg_bytes(&d, 16));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_EQ(target, 42u);
  EXPECT_EQ(result, 40u);
}

// A message's packets at each path MTU (ibv_mtu codes 1..5 = 256..4096 bytes; 0 counts as 256),
// computed by shifting: the ceiling of the length over the MTU, one for an empty message.
TEST(Engine, PacketsOfAMessage) {
  for (uint8_t code = 0; code <= 5; ++code) {
    uint64_t mtu = 128ull << (code ? code : 1);
    for (uint64_t len :
         {uint64_t{0}, uint64_t{1}, mtu - 1, mtu, mtu + 1, 3 * mtu, uint64_t{1} << 31})
      EXPECT_EQ(engine_detail::packets(len, code), len ? (len + mtu - 1) / mtu : 1)
          << "length " << len << " mtu " << mtu;
  }
}

// A CQE carries the incarnation of the QP it names, whether the writer passes that QP's slot, none,
// or another's.
TEST(Engine, ACqeCarriesTheIncarnationOfTheQpItNames) {
  Rig r;
  QpSlot& a = qp_slot(r.h, r.a);
  QpSlot& b = qp_slot(r.h, r.b);
  a.incarnation.store(5);
  b.incarnation.store(9);
  CqeInfo info;
  clear_cqe_info(&info);
  info.cqe_opcode = kCqeReq;
  info.qpn = a.qpn;
  CqSlot& cq = cq_slot(r.h, r.cq);
  const QpSlot* hints[] = {&a, nullptr, &b};
  for (const QpSlot* hint : hints) {
    r.eng.write_cqe(cq, info, hint);
    const Cqe64* c = r.poll();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->qp_gen, 5) << (hint == &a ? "its own slot" : hint ? "another's slot" : "none");
  }
}

TEST(Engine, RnrTimerTableAndTimeouts) {
  EXPECT_EQ(Engine::rnr_delay_us(12), 640u);
  EXPECT_EQ(Engine::rnr_delay_us(0), 655360u);
  EXPECT_EQ(Engine::transport_timeout_us(0), 0u) << "0 means infinite";
  EXPECT_EQ(Engine::transport_timeout_us(14), 67108u);
}
