// SPDX-License-Identifier: BSD-2-Clause
// The device's race detectors fed crafted sequences: BlueFlame chunk tags, doorbell-record values
// and ring stores, each with the legal sequences it must pass; then the same through the engine,
// checking what the device executes and what it logs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "emu/mmio.h"
#include "emu/race_log.h"
#include "engine_rig.h"

using namespace emu;
using namespace emu::test;

namespace {

const uint64_t A1 = bf_tag(111, 1), A2 = bf_tag(111, 2), B1 = bf_tag(222, 1);

// Runs f in a thread of its own (a second writer); returns that thread's id as the device records
// it.
template <class F>
uint32_t in_another_thread(F f) {
  uint32_t tid = 0;
  std::thread t([&] {
    tid = writer_tid();
    f();
  });
  t.join();
  return tid;
}

// A torn BlueFlame verdict that names the flushing writer, then the other one.
::testing::AssertionResult torn_naming(const BfVerdict& v, uint32_t flusher, uint32_t other) {
  if (v.torn && v.writers[0] == flusher && v.writers[1] == other)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << (v.torn ? "torn" : "not torn") << ", writers " << v.writers[0] << " and "
         << v.writers[1] << "; expected torn, writers " << flusher << " and " << other;
}

}  // namespace

// ---- the writers the device names ----

TEST(WriterTid, AForkChildIsNamedByItsOwnThreadIdNotItsParents) {
  uint32_t parent = writer_tid();  // cached in this thread now
  ASSERT_EQ(parent, static_cast<uint32_t>(gettid()));
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    uint32_t ids[2] = {writer_tid(), static_cast<uint32_t>(gettid())};
    _exit(write(fds[1], ids, sizeof ids) == sizeof ids ? 0 : 1);
  }
  uint32_t ids[2] = {0, 0};
  ASSERT_EQ(read(fds[0], ids, sizeof ids), static_cast<ssize_t>(sizeof ids));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(ids[0], ids[1]) << "the child's writer id is its own thread id";
  EXPECT_NE(ids[0], parent);
  EXPECT_EQ(writer_tid(), parent) << "the parent's stays";
}

// ---- BlueFlame buffers ----

TEST(BfDetector, OneWriteFillingTheChunksItNeedsIsWhole) {
  uint64_t tags[4] = {A1, A1, A1, 0}, taken[4] = {};
  BfVerdict v = inspect_bf(tags, taken, A1, 3);
  EXPECT_FALSE(v.torn);
  EXPECT_FALSE(v.nothing_new);
}

TEST(BfDetector, ChunksFromTwoWritersAreTornAndNameBoth) {
  uint64_t tags[4] = {A1, B1, A1, 0}, taken[4] = {};
  BfVerdict v = inspect_bf(tags, taken, A1, 3);
  EXPECT_TRUE(torn_naming(v, 111, 222));
  EXPECT_EQ(v.foreign_mask, 0b010u);
}

// A chunk two threads' plain stores made together (emu/mmio.h, "Plain stores"): whichever of the
// two flushes, the verdict names the other.
TEST(BfDetector, AMixedChunkNamesTheOtherThreadWhoeverFlushes) {
  const uint64_t mixed = bf_mixed_tag(111, 222);
  uint64_t tags[4] = {A1, mixed, 0, 0}, taken[4] = {};
  BfVerdict v = inspect_bf(tags, taken, A1, 2);
  EXPECT_TRUE(torn_naming(v, 111, 222));
  uint64_t by_b[4] = {B1, mixed, 0, 0};
  v = inspect_bf(by_b, taken, B1, 2);
  EXPECT_TRUE(torn_naming(v, 222, 111));
}

// A one-chunk WQE torn inside its chunk: the chunk completes the write, so the flush comes under
// the mixed tag itself. Equal to the flusher's tag, it is still another thread's bytes.
TEST(BfDetector, AMixedChunkIsTornEvenWhenItsTagFlushes) {
  const uint64_t mixed = bf_mixed_tag(111, 222);
  uint64_t tags[4] = {mixed, 0, 0, 0}, taken[4] = {};
  BfVerdict v = inspect_bf(tags, taken, mixed, 1);
  EXPECT_TRUE(torn_naming(v, 111, 222));
  EXPECT_EQ(v.foreign_mask, 0b1u);
}

TEST(BfDetector, AnOlderBurstOfTheSameThreadIsTornToo) {
  uint64_t tags[4] = {A2, A1, 0, 0}, taken[4] = {};
  EXPECT_TRUE(inspect_bf(tags, taken, A2, 2).torn);  // chunk 1 is left over from burst 1
}

TEST(BfDetector, ChunksBeyondTheWqeDoNotCount) {
  uint64_t tags[4] = {A2, B1, B1, B1}, taken[4] = {};
  EXPECT_FALSE(inspect_bf(tags, taken, A2, 1).torn);  // a one-block WQE after a longer one
}

TEST(BfDetector, ABufferAlreadyTakenBringsNothingNew) {
  uint64_t tags[4] = {A1, A1, 0, 0}, taken[4] = {A1, A1, 0, 0};
  BfVerdict v = inspect_bf(tags, taken, A1, 2);
  EXPECT_TRUE(v.nothing_new);
  EXPECT_FALSE(v.torn);  // the same write drained twice
}

TEST(BfDetector, AWriteReplacedBeforeItsFlushIsTorn) {
  // B overwrote all of A's chunks and the device took B's at B's flush; A's flush finds them.
  uint64_t tags[4] = {B1, B1, 0, 0}, taken[4] = {B1, B1, 0, 0};
  BfVerdict v = inspect_bf(tags, taken, A1, 2);
  EXPECT_TRUE(v.nothing_new);
  EXPECT_TRUE(v.torn);
  EXPECT_EQ(v.writers[1], 222u);
}

TEST(BfDetector, AnUnparseableFirstChunkIsJudgedAlone) {
  uint64_t tags[4] = {A1, B1, B1, B1}, taken[4] = {};
  EXPECT_FALSE(inspect_bf(tags, taken, A1, 0).torn);
  uint64_t tags2[4] = {B1, A1, 0, 0};
  EXPECT_TRUE(inspect_bf(tags2, taken, A1, 0).torn);
}

TEST(BfDetector, ChunksNeededFollowsTheControlSegment) {
  uint8_t chunk[64] = {};
  CtrlSeg c{};
  ctrl_set_qpn_ds(c, 0x1234, 4);  // 64 bytes
  std::memcpy(chunk, &c, sizeof c);
  EXPECT_EQ(bf_chunks_needed(chunk), 1u);
  ctrl_set_qpn_ds(c, 0x1234, 13);  // 208 bytes
  std::memcpy(chunk, &c, sizeof c);
  EXPECT_EQ(bf_chunks_needed(chunk), 4u);
  ctrl_set_qpn_ds(c, 0x1234, 17);  // more than a BlueFlame buffer holds
  std::memcpy(chunk, &c, sizeof c);
  EXPECT_EQ(bf_chunks_needed(chunk), 0u);
  ctrl_set_qpn_ds(c, 0x1234, 0);
  std::memcpy(chunk, &c, sizeof c);
  EXPECT_EQ(bf_chunks_needed(chunk), 0u);
}

// ---- The send doorbell record ----

TEST(DbrecDetector, ForwardSameAndWrapAreLegal) {
  EXPECT_FALSE(inspect_dbrec(5, 7, 5, 16, 6, true).backwards);
  EXPECT_FALSE(inspect_dbrec(7, 7, 5, 16, 6, true).backwards);
  DbrecVerdict w = inspect_dbrec(0xfffe, 0x0002, 0x1fffc, 16, 0x20001, true);
  EXPECT_FALSE(w.backwards);
  EXPECT_FALSE(w.ahead);
  EXPECT_EQ(w.producer, 2u);
  // A full ring is legal.
  EXPECT_FALSE(inspect_dbrec(0, 16, 0, 16, 15, true).ahead);
}

TEST(DbrecDetector, BackwardsKeepsTheFurthest) {
  DbrecVerdict v = inspect_dbrec(9, 7, 5, 16, 6, true);
  EXPECT_TRUE(v.backwards);
  EXPECT_EQ(v.producer, 9u);
  DbrecVerdict w = inspect_dbrec(0x0001, 0xffff, 0xfffe, 16, 0, true);  // across the wrap
  EXPECT_TRUE(w.backwards);
  EXPECT_EQ(w.producer, 1u);
}

TEST(DbrecDetector, PastTheRingOrPastTheRecordedStoresIsAhead) {
  DbrecVerdict v = inspect_dbrec(0, 17, 0, 16, 16, true);
  EXPECT_TRUE(v.ahead);
  EXPECT_EQ(v.producer, 0u);                               // nothing a device can fetch
  EXPECT_TRUE(inspect_dbrec(0, 3, 0, 16, 1, true).ahead);  // block 2 never written
  EXPECT_FALSE(inspect_dbrec(0, 3, 0, 16, 2, true).ahead);
  EXPECT_FALSE(inspect_dbrec(0, 3, 0, 16, ~0u, false).ahead);  // stores not recorded: no claim
}

// The inline clean read (dbrec_checked's fast path) says clean exactly when the general verdict
// does, over random records near the interesting edges (wrap, full ring, backwards by one or by
// half the 16-bit space).
TEST(DbrecDetector, TheInlineCleanReadAgreesWithTheGeneralVerdict) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int clean = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bbs = 1u << (next() % 6);
    uint32_t ci = static_cast<uint32_t>(next());
    uint32_t now = (ci + next() % (bbs + 2) - (next() % 8 == 0 ? 1 : 0)) & 0xffff;
    // Ahead of now (backwards) or behind it by a little, or by half the 16-bit space.
    uint32_t d = next() % 8 == 0 ? 0x7fff + next() % 3 : next() % (2 * bbs + 3) - bbs - 1;
    uint32_t seen = next() % 64 == 0 ? 0x10000 : (now + d) & 0xffff;
    uint32_t pending = (now - ci) & 0xffff;
    uint32_t last = next() % 4 == 0 ? ~0u : ci + pending - 1 + (next() % 3 == 0 ? 1 : 0);
    bool tracked = next() % 8 != 0;
    DbrecVerdict v = inspect_dbrec(seen, now, ci, bbs, last, tracked);
    bool general = !v.backwards && !v.ahead && v.producer == now;
    bool fast = dbrec_clean(seen, now, ci, bbs, last, tracked);
    if (seen != 0x10000)
      ASSERT_EQ(fast, general) << "seen " << seen << " now " << now << " ci " << ci << " bbs "
                               << bbs << " last " << last << " tracked " << tracked;
    else
      ASSERT_FALSE(fast) << "none seen since reset: the general judgement's";
    clean += fast;
  }
  EXPECT_GT(clean, 10000) << "the clean case was drawn";
  EXPECT_LT(clean, 190000) << "so were the others";
}

// ---- Through the engine ----

namespace {

// A register of the rig's context, and helpers to post RDMA WRITEs with inline data.
struct BfRig : Rig {
  UarReg* reg;
  char dst[256] = {};
  uint32_t rk;
  uint64_t first_race;
  BfRig() {
    uint64_t off = s->alloc(sizeof(UarReg), 64);
    reg = s->at<UarReg>(off);
    std::memset(static_cast<void*>(reg), 0, sizeof *reg);
    reg->ctx = kMaxContexts;
    reg->index = 3;
    rk = this->reg_mr(dst, sizeof dst);
    first_race = races_recorded(s);
  }
  uint32_t reg_mr(void* p, size_t len) {
    return Rig::reg(p, len, kAccessLocalWrite | kAccessRemoteWrite);
  }
  // An RDMA WRITE of `data` inline at dst + off, as its blocks (ctrl index idx).
  std::vector<uint8_t> write_wqe(uint32_t idx, uint32_t off, const std::string& data) {
    std::vector<uint8_t> w(((16 + 16 + 4 + data.size() + 15) / 16 * 16 + 63) / 64 * 64, 0);
    uint32_t ds = static_cast<uint32_t>((16 + 16 + 4 + data.size() + 15) / 16);
    CtrlSeg c{};
    ctrl_set_index_opcode(c, idx, kOpRdmaWrite);
    ctrl_set_qpn_ds(c, qp_slot(h, a).qpn, ds);
    c.fm_ce_se = kCtrlCqUpdate;
    RaddrSeg ra{be64(reinterpret_cast<uint64_t>(dst) + off), be32(rk), 0};
    uint32_t hdr = be32(static_cast<uint32_t>(data.size()) | kInlineSegFlag);
    std::memcpy(w.data(), &c, 16);
    std::memcpy(w.data() + 16, &ra, 16);
    std::memcpy(w.data() + 32, &hdr, 4);
    std::memcpy(w.data() + 36, data.data(), data.size());
    return w;
  }
  void ring_store(uint32_t pos, const std::vector<uint8_t>& w, bool record = true) {
    QpSlot& q = qp_slot(h, a);
    for (size_t i = 0; i < w.size() / 64; ++i)
      std::memcpy(s->at<uint8_t>(q.sq_off) + ((pos + i) & 15) * 64, w.data() + i * 64, 64);
    if (record)
      sq_note_wqe_store(q, s->at<WqeWriteRec>(q.wrec_off), pos,
                        static_cast<uint32_t>(w.size() / 64));
  }
  void dbrec(uint32_t producer) {
    QpSlot& q = qp_slot(h, a);
    sq_dbrec_store(q, &s->at<uint32_t>(q.dbrec_off)[1], producer);
  }
  // Chunk i of buffer buf, as the write `tag` made it.
  void chunk(uint32_t buf, uint32_t i, const uint8_t* src, uint64_t tag) {
    std::memcpy(reg->bf[buf] + i * 64, src, 64);
    reg->bf_tag[buf][i].store(tag);
  }
  void drain(uint32_t buf, uint64_t flusher) {
    uint64_t head = bf_intake(s, *reg, buf, flusher);
    if (head)
      eng.on_doorbell(head);
    else
      eng.kick_sq(qp_slot(h, a));
  }
  std::vector<RaceRecord> races() const { return read_races(s, first_race); }
};

}  // namespace

TEST(DoorbellDevice, TheDeviceExecutesTheBlueFlameCopyItReceived) {
  BfRig r;
  r.ring_store(0, r.write_wqe(0, 0, "from the ring"));
  r.dbrec(1);
  std::vector<uint8_t> bf = r.write_wqe(0, 0, "from BlueFlame");
  r.chunk(0, 0, bf.data(), A1);
  r.drain(0, A1);
  EXPECT_STREQ(r.dst, "from BlueFlame");
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->op_own >> 4, kCqeReq);
  EXPECT_TRUE(r.races().empty()) << "one whole write: no race";
}

TEST(DoorbellDevice, ATornBlueFlameWqeIsExecutedAsTornAndReported) {
  BfRig r;
  std::string a(100, 'a'), b(100, 'b');
  std::vector<uint8_t> wa = r.write_wqe(0, 0, a), wb = r.write_wqe(0, 0, b);
  ASSERT_EQ(wa.size(), 192u);  // three chunks
  r.ring_store(0, wa);
  r.dbrec(3);
  r.chunk(0, 0, wa.data(), A1);
  r.chunk(0, 1, wb.data() + 64, B1);  // another thread's second chunk lands in between
  r.chunk(0, 2, wa.data() + 128, A1);
  r.drain(0, A1);
  std::string got(r.dst, 100);
  EXPECT_EQ(got.substr(0, 28), a.substr(0, 28));    // bytes 36..63 of the WQE: chunk 0
  EXPECT_EQ(got.substr(28, 64), b.substr(28, 64));  // chunk 1 came from the other write
  EXPECT_EQ(got.substr(92), a.substr(92));
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kRaceBfTorn);
  EXPECT_EQ(ev[0].action, kActExecutedBf);
  EXPECT_EQ(ev[0].writers[0], 111u);
  EXPECT_EQ(ev[0].writers[1], 222u);
  EXPECT_EQ(ev[0].reg, 3);
  EXPECT_EQ(ev[0].qpn, qp_slot(r.h, r.a).qpn);
  EXPECT_EQ(ev[0].value[1], 0b010u) << "chunk 1 was foreign";
  EXPECT_NE(race_json(ev[0]).find("\"kind\":\"bf_torn\""), std::string::npos);
}

TEST(DoorbellDevice, ATornCopyThatDoesNotParseIsALocalQpOperationError) {
  BfRig r;
  std::vector<uint8_t> wa = r.write_wqe(0, 0, std::string(40, 'a'));
  r.ring_store(0, wa);
  r.dbrec(2);
  // Chunk 0 from another write whose control segment claims more than a buffer holds.
  std::vector<uint8_t> junk = wa;
  CtrlSeg c;
  std::memcpy(&c, junk.data(), 16);
  ctrl_set_qpn_ds(c, qp_slot(r.h, r.a).qpn, 40);
  std::memcpy(junk.data(), &c, 16);
  r.chunk(0, 0, junk.data(), B1);
  r.chunk(0, 1, wa.data() + 64, A1);
  r.drain(0, A1);
  const Cqe64* e = r.poll();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->op_own >> 4, kCqeReqErr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(e)->syndrome, kSynLocalQpOp);
  auto ev = r.races();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].kind, kRaceBfTorn);
  EXPECT_EQ(ev[0].action, kActLocalQpOpErr);
}

TEST(DoorbellDevice, TwoWqesWrittenIntoOneSlotBeforeTheFetchAreADoubleWrite) {
  BfRig r;
  r.ring_store(0, r.write_wqe(0, 0, "first"));
  uint32_t other = in_another_thread([&] { r.ring_store(0, r.write_wqe(0, 0, "second")); });
  r.dbrec(1);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_STREQ(r.dst, "second");
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kRaceDoubleWrite);
  EXPECT_EQ(ev[0].action, kActExecutedRing);
  EXPECT_EQ(ev[0].writers[0], writer_tid());
  EXPECT_EQ(ev[0].writers[1], other);
}

TEST(DoorbellDevice, ADoorbellRecordGoingBackwardsIsReportedAndIgnored) {
  BfRig r;
  r.ring_store(0, r.write_wqe(0, 0, "x"));
  r.ring_store(1, r.write_wqe(1, 8, "y"));
  r.dbrec(2);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  ASSERT_NE(r.poll(), nullptr);
  ASSERT_NE(r.poll(), nullptr);
  r.dbrec(1);  // a late store of an older value
  r.eng.kick_sq(qp_slot(r.h, r.a));
  r.eng.kick_sq(qp_slot(r.h, r.a));
  EXPECT_EQ(r.poll(), nullptr) << "nothing executed again";
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u) << "reported once";
  EXPECT_EQ(ev[0].kind, kRaceDbrecBackwards);
  EXPECT_EQ(ev[0].value[0], 2u);
  EXPECT_EQ(ev[0].value[1], 1u);
  // The next legal post goes on from the furthest value.
  r.ring_store(2, r.write_wqe(2, 16, "z"));
  r.dbrec(3);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  ASSERT_NE(r.poll(), nullptr);
  EXPECT_EQ(r.dst[16], 'z');
  EXPECT_EQ(r.races().size(), 1u);
}

TEST(DoorbellDevice, ARecordPastTheStoresIsAheadAndTheStaleSlotFails) {
  BfRig r;
  r.ring_store(0, r.write_wqe(0, 0, "x"));
  r.dbrec(2);  // block 1 was never written
  r.eng.kick_sq(qp_slot(r.h, r.a));
  const Cqe64* c1 = r.poll();
  ASSERT_NE(c1, nullptr);
  EXPECT_EQ(c1->op_own >> 4, kCqeReq);
  const Cqe64* c2 = r.poll();
  ASSERT_NE(c2, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c2)->syndrome, kSynLocalQpOp);
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, kRaceDbrecAhead);
  EXPECT_EQ(ev[1].kind, kRaceStaleWqe);
  EXPECT_EQ(ev[1].slot, 1u);
  EXPECT_EQ(ev[1].action, kActLocalQpOpErr);
}

TEST(DoorbellDevice, AStaleWqeFromTheLastLapIsReported) {
  BfRig r;
  for (uint32_t i = 0; i < 16; ++i) {
    r.ring_store(i, r.write_wqe(i, 0, "lap"));
    r.dbrec(i + 1);
    r.eng.kick_sq(qp_slot(r.h, r.a));
    ASSERT_NE(r.poll(), nullptr);
  }
  // Without recorded stores only the ring's content tells: slot 0 still holds index 0.
  qp_slot(r.h, r.a).wrec_tracked.store(0);
  r.dbrec(17);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  const Cqe64* c = r.poll();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<const ErrCqe*>(c)->syndrome, kSynLocalQpOp);
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kRaceStaleWqe);
  EXPECT_EQ(ev[0].slot, 16u);
}

TEST(DoorbellDevice, LegalPostingOverManyLapsRaisesNothing) {
  BfRig r;
  uint32_t pos = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    std::vector<uint8_t> w = r.write_wqe(pos & 0xffff, (i % 2) * 128,
                                         std::string(i % 3 == 0 ? 100 : 8, char('a' + i % 26)));
    uint32_t n = static_cast<uint32_t>(w.size() / 64);
    if ((pos & 15) + n > 16) {  // keep each WQE contiguous for the BlueFlame copy: pad with NOPs
      while (pos & 15) {
        std::vector<uint8_t> nop(64, 0);
        CtrlSeg c{};
        ctrl_set_index_opcode(c, pos, kOpNop);
        ctrl_set_qpn_ds(c, qp_slot(r.h, r.a).qpn, 1);
        std::memcpy(nop.data(), &c, 16);
        r.ring_store(pos, nop);
        ++pos;
      }
      w = r.write_wqe(pos & 0xffff, (i % 2) * 128,
                      std::string(i % 3 == 0 ? 100 : 8, char('a' + i % 26)));
    }
    r.ring_store(pos, w);
    pos += n;
    r.dbrec(pos);
    if (i % 2) {
      const uint8_t* blocks[4];
      for (uint32_t k = 0; k < n; ++k) blocks[k] = w.data() + k * 64;
      mmio_bf_copy(*r.reg, i % 4 / 2, blocks, n);
      uint64_t heads[kWcBuffers];
      uint32_t got = mmio_flush(heads, kWcBuffers);
      ASSERT_EQ(got, 1u);
      r.eng.on_doorbell(heads[0]);
    } else {
      uint64_t head;
      std::memcpy(&head, w.data(), 8);
      r.eng.on_doorbell(mmio_db64(*r.reg, head));  // the 8-byte doorbell
    }
    while (const Cqe64* c = r.poll()) ASSERT_NE(c->op_own >> 4, kCqeReqErr);
  }
  EXPECT_EQ(qp_slot(r.h, r.a).sq_ci, pos);
  EXPECT_TRUE(r.races().empty()) << race_json(r.races().front());
}

// Two threads storing the first WQE into one slot at the same moment can both record "no writer
// before me": the double write the device then sees has one known writer, and names the QP's
// other poster for the one the record lost (the stress acceptance requires both names).
TEST(DoorbellDevice, ADoubleWriteWithAWriterLostFromTheRecordNamesTheOtherPoster) {
  BfRig r;
  uint32_t other = in_another_thread([&] { r.dbrec(0); });  // the other poster of this QP
  r.ring_store(0, r.write_wqe(0, 0, "x"));
  r.ring_store(0, r.write_wqe(0, 0, "y"));
  QpSlot& q = qp_slot(r.h, r.a);
  r.s->at<WqeWriteRec>(q.wrec_off)[0].prev_writer.store(
      0);  // as the concurrent first store left it
  r.dbrec(1);
  r.eng.kick_sq(q);
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kRaceDoubleWrite);
  EXPECT_EQ(ev[0].writers[0], other) << "the writer the record lost: the QP's other poster";
  EXPECT_EQ(ev[0].writers[1], writer_tid());
}

TEST(DoorbellDevice, AnEventFromOneThreadsStoresNamesTheQpsOtherPoster) {
  BfRig r;
  r.ring_store(0, r.write_wqe(0, 0, "x"));
  uint32_t other = in_another_thread([&] { r.dbrec(1); });  // the other poster stores it once
  r.eng.kick_sq(qp_slot(r.h, r.a));
  r.ring_store(1, r.write_wqe(1, 8, "y"));
  r.dbrec(2);
  r.eng.kick_sq(qp_slot(r.h, r.a));
  r.dbrec(1);  // this thread stores an older value than its own last one
  r.eng.kick_sq(qp_slot(r.h, r.a));
  auto ev = r.races();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kRaceDbrecBackwards);
  EXPECT_EQ(ev[0].writers[0], writer_tid());
  EXPECT_EQ(ev[0].writers[1], other) << "the QP's other poster";
}
