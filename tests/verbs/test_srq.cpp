// SPDX-License-Identifier: BSD-2-Clause
// Shared receive queues through emu0: limits, posting, several QPs (here and in another process)
// receiving from one SRQ, WQE reuse when completions come back out of order, destroy while in use,
// and the limit and last-WQE events.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

// Message i of sender j: [j, i, pattern...], of a length that varies across the size where a SEND
// travels in the CQE (32 B).
uint32_t msg_len(int j, int i) { return 2 + static_cast<uint32_t>((j * 16 + i) * 37 % 200); }
uint8_t msg_byte(int j, int i, uint32_t b) { return static_cast<uint8_t>(j * 31 + i * 7 + b * 3); }
void make_msg(uint8_t* p, int j, int i) {
  uint32_t n = msg_len(j, i);
  p[0] = static_cast<uint8_t>(j);
  p[1] = static_cast<uint8_t>(i);
  for (uint32_t b = 2; b < n; ++b) p[b] = msg_byte(j, i, b);
}
// Whether p holds a whole message of len bytes; *j and *i say which.
bool is_msg(const uint8_t* p, uint32_t len, int* j, int* i) {
  *j = p[0];
  *i = p[1];
  if (len != msg_len(*j, *i)) return false;
  for (uint32_t b = 2; b < len; ++b)
    if (p[b] != msg_byte(*j, *i, b)) return false;
  return true;
}

class Srq : public VerbsTest {
 protected:
  // A sender (RC, its own CQ) connected to a receiver on srq completing into rcq.
  struct Link {
    ibv_qp* snd = nullptr;
    ibv_qp* rcv = nullptr;
    ibv_cq* scq = nullptr;
  };
  Link link_to(ibv_srq* srq, ibv_cq* rcq) {
    Link l;
    l.scq = make_cq();
    l.snd = make_qp(l.scq, l.scq);
    l.rcv = make_qp_of(IBV_QPT_RC, rcq, rcq, {}, srq);
    if (!l.scq || !l.snd || !l.rcv) return l;
    EXPECT_EQ(connect_qp(l.snd, lid, l.rcv->qp_num, 0x10, 0x20), 0);
    EXPECT_EQ(connect_qp(l.rcv, lid, l.snd->qp_num, 0x20, 0x10), 0);
    return l;
  }
  // A SEND of message (j, i) from the link's sender, staged at sbuf + off; its completion is
  // waited for.
  void send_msg(const Link& l, const Buf& sbuf, size_t off, int j, int i, bool wait = true) {
    make_msg(sbuf.p + off, j, i);
    ibv_sge sg = sbuf.sge(off, msg_len(j, i));
    ibv_send_wr w = send_wr(uint64_t(j) << 16 | uint64_t(i), IBV_WR_SEND, &sg, 1);
    ASSERT_EQ(post_one(l.snd, &w), 0);
    if (wait) {
      ASSERT_TRUE(wait_wc(l.scq, IBV_WC_SUCCESS, w.wr_id));
    }
  }
};

TEST_F(Srq, CreateLimitsAndQuery) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  ASSERT_GT(da.max_srq_wr, 0);
  ASSERT_GT(da.max_srq_sge, 0);
  struct Bad {
    uint32_t wr, sge;
  };
  for (Bad b :
       {Bad{0, 1}, Bad{uint32_t(da.max_srq_wr) + 1, 1}, Bad{16, uint32_t(da.max_srq_sge) + 1}}) {
    ibv_srq_init_attr ia;
    std::memset(&ia, 0, sizeof ia);
    ia.attr.max_wr = b.wr;
    ia.attr.max_sge = b.sge;
    errno = 0;
    ibv_srq* s = ibv_create_srq(pd, &ia);
    EXPECT_EQ(s, nullptr) << "max_wr " << b.wr << " max_sge " << b.sge;
    if (s) srqs.push_back(s);
    EXPECT_EQ(errno, EINVAL) << "max_wr " << b.wr << " max_sge " << b.sge;
  }
  ibv_srq_attr got;
  ibv_srq* s = make_srq(10, 3, &got);
  ASSERT_NE(s, nullptr);
  EXPECT_GE(got.max_wr, 10u);
  EXPECT_GE(got.max_sge, 3u);
  ibv_srq_attr q;
  std::memset(&q, 0xff, sizeof q);
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.max_wr, got.max_wr);
  EXPECT_EQ(q.max_sge, got.max_sge);
  EXPECT_EQ(q.srq_limit, 0u);
  // The limits themselves are allowed.
  EXPECT_NE(make_srq(da.max_srq_wr, da.max_srq_sge), nullptr);
}

TEST_F(Srq, PostBeyondCapacityIsEnomem) {
  ibv_srq_attr got;
  ibv_srq* s = make_srq(4, 1, &got);
  ASSERT_NE(s, nullptr);
  Buf rb = make_buf(4096);
  ibv_sge sg = rb.sge(0, 64);
  ibv_sge two[2] = {rb.sge(0, 8), rb.sge(8, 8)};
  EXPECT_EQ(post_srq(s, 99, two, static_cast<int>(got.max_sge) + 1), EINVAL) << "too many SGEs";
  for (uint32_t i = 0; i < got.max_wr; ++i) ASSERT_EQ(post_srq(s, i, &sg), 0) << i;
  EXPECT_EQ(post_srq(s, 100, &sg), ENOMEM);

  // One taken by a SEND makes room for one: a list of two posts the first and stops at the second.
  ibv_cq* rcq = make_cq();
  Link l = link_to(s, rcq);
  ASSERT_TRUE(l.snd && l.rcv);
  Buf sb = make_buf(4096);
  ASSERT_NO_FATAL_FAILURE(send_msg(l, sb, 0, 0, 0));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 0, &wc));
  ibv_recv_wr w2{};
  w2.wr_id = 201;
  w2.sg_list = &sg;
  w2.num_sge = 1;
  ibv_recv_wr w1 = w2;
  w1.wr_id = 200;
  w1.next = &w2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(s, &w1, &bad), ENOMEM);
  EXPECT_EQ(bad, &w2);
  EXPECT_EQ(post_srq(s, 202, &sg), ENOMEM) << "the list's first WR was not posted";
}

// Three QPs receive from one SRQ: each completion names the QP the message came to, the WQE it
// took (wr_id) and that WQE's buffer holds the message.
TEST_F(Srq, SharedByThreeQps) {
  constexpr int kLinks = 3, kPer = 10, kSlot = 256;
  ibv_srq* s = make_srq(64, 2);
  ASSERT_NE(s, nullptr);
  ibv_cq* rcq = make_cq();
  Link l[kLinks];
  for (auto& x : l) {
    x = link_to(s, rcq);
    ASSERT_TRUE(x.snd && x.rcv);
  }
  Buf rb = make_buf(kLinks * kPer * kSlot, kAllAccess, 0);
  Buf sb = make_buf(kLinks * kPer * kSlot, kAllAccess, 0);
  for (int k = 0; k < kLinks * kPer; ++k) {
    // Two SGEs per WQE: the message may straddle them (first 20 bytes, then the rest).
    ibv_sge sg[2] = {rb.sge(k * kSlot, 20), rb.sge(k * kSlot + 20, kSlot - 20)};
    ASSERT_EQ(post_srq(s, 1000 + k, sg, 2), 0);
  }
  for (int i = 0; i < kPer; ++i)
    for (int j = 0; j < kLinks; ++j)
      ASSERT_NO_FATAL_FAILURE(send_msg(l[j], sb, (j * kPer + i) * kSlot, j, i));
  auto wcs = poll_n(rcq, kLinks * kPer);
  ASSERT_EQ(wcs.size(), size_t(kLinks * kPer));
  std::set<std::pair<int, int>> seen;
  std::set<uint64_t> ids;
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
    ASSERT_EQ(wc.opcode, IBV_WC_RECV);
    ASSERT_GE(wc.wr_id, 1000u);
    ASSERT_LT(wc.wr_id, 1000u + kLinks * kPer);
    EXPECT_TRUE(ids.insert(wc.wr_id).second) << "wr_id " << wc.wr_id << " completed twice";
    int j, i;
    ASSERT_TRUE(is_msg(rb.p + (wc.wr_id - 1000) * kSlot, wc.byte_len, &j, &i))
        << "wr_id " << wc.wr_id << ": its buffer does not hold a message of " << wc.byte_len
        << " B";
    ASSERT_LT(j, kLinks);
    EXPECT_EQ(wc.qp_num, l[j].rcv->qp_num) << "message " << j << "/" << i;
    EXPECT_EQ(wc.src_qp, l[j].snd->qp_num) << "message " << j << "/" << i;
    EXPECT_TRUE(seen.insert({j, i}).second) << "message " << j << "/" << i << " twice";
  }
  EXPECT_EQ(seen.size(), size_t(kLinks * kPer));
  EXPECT_TRUE(drain(rcq).empty());
}

// WQEs come back to the SRQ in the order their completions are polled, which is not the order the
// device took them (two QPs completing into two CQs, polled second-first). Many more WQEs than the
// SRQ holds pass through; each completion's buffer holds its message, and no capacity leaks.
TEST_F(Srq, OutOfOrderCompletionsReuseWqes) {
  constexpr int kBatch = 8, kRounds = 30, kSlot = 256, kSlots = 64;
  ibv_srq_attr got;
  ibv_srq* s = make_srq(kBatch, 1, &got);
  ASSERT_NE(s, nullptr);
  ASSERT_LT(got.max_wr, uint32_t(kSlots));
  ibv_cq* rcq[2] = {make_cq(), make_cq()};
  Link l[2] = {link_to(s, rcq[0]), link_to(s, rcq[1])};
  ASSERT_TRUE(l[0].rcv && l[1].rcv);
  Buf rb = make_buf(kSlots * kSlot, kAllAccess, 0);
  Buf sb = make_buf(kBatch * kSlot, kAllAccess, 0);
  uint64_t next_id = 0;
  auto post_one_recv = [&]() {
    uint64_t id = next_id++;
    ibv_sge sg = rb.sge((id % kSlots) * kSlot, kSlot);
    return post_srq(s, id, &sg);
  };
  for (int k = 0; k < kBatch; ++k) ASSERT_EQ(post_one_recv(), 0);
  int total = 0;
  std::set<std::pair<int, int>> seen;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t hi = next_id;  // the WQEs posted now: [hi - kBatch, hi)
    for (int k = 0; k < kBatch; ++k) {
      int j = k & 1;
      int i = round * kBatch / 2 + k / 2;  // message index per sender (below 256)
      ASSERT_NO_FATAL_FAILURE(send_msg(l[j], sb, k * kSlot, j, i));
    }
    // Second CQ first: those WQEs return to the free list ahead of older ones still unpolled.
    for (int c : {1, 0}) {
      auto wcs = poll_n(rcq[c], kBatch / 2);
      ASSERT_EQ(wcs.size(), size_t(kBatch / 2)) << "round " << round << " cq " << c;
      for (const ibv_wc& wc : wcs) {
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "round " << round;
        ASSERT_LT(wc.wr_id, hi);
        ASSERT_GE(wc.wr_id + kBatch, hi) << "an old WQE completed again";
        int j, i;
        ASSERT_TRUE(is_msg(rb.p + (wc.wr_id % kSlots) * kSlot, wc.byte_len, &j, &i))
            << "round " << round << " wr_id " << wc.wr_id;
        EXPECT_EQ(j, c);
        EXPECT_EQ(wc.qp_num, l[c].rcv->qp_num);
        EXPECT_TRUE(seen.insert({j, i}).second) << "message " << j << "/" << i << " twice";
        ++total;
      }
      for (int k = 0; k < kBatch / 2; ++k) ASSERT_EQ(post_one_recv(), 0);
    }
  }
  EXPECT_EQ(total, kBatch * kRounds);
  EXPECT_EQ(seen.size(), size_t(kBatch * kRounds));
  // Exactly the capacity is left: kBatch are posted, max_wr - kBatch more fit, then no more.
  ibv_sge sg = rb.sge(0, 16);
  for (uint32_t k = kBatch; k < got.max_wr; ++k) ASSERT_EQ(post_srq(s, 9000 + k, &sg), 0) << k;
  EXPECT_EQ(post_srq(s, 9999, &sg), ENOMEM);
}

// A QP destroyed (or reset) with receive completions from the SRQ still unpolled: the WQEs those
// completions took go back to the SRQ (as mlx5 does when it cleans the CQ), or its capacity leaks.
TEST_F(Srq, UnpolledCompletionsOfAGoneQpReturnTheirWqes) {
  ibv_srq_attr got;
  ibv_srq* s = make_srq(4, 1, &got);
  ASSERT_NE(s, nullptr);
  ibv_cq* rcq = make_cq();
  Link l[3] = {link_to(s, rcq), link_to(s, rcq), link_to(s, rcq)};
  for (auto& x : l) ASSERT_TRUE(x.snd && x.rcv);
  Buf rb = make_buf(4096), sb = make_buf(4096);
  ibv_sge sg = rb.sge(0, 256);
  for (uint32_t k = 0; k < got.max_wr; ++k) ASSERT_EQ(post_srq(s, k, &sg), 0);
  // Each receiver takes one WQE; nothing is polled.
  for (int j = 0; j < 3; ++j) ASSERT_NO_FATAL_FAILURE(send_msg(l[j], sb, 0, j, 0));
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_destroy_qp(l[0].rcv), 0);  // destroyed
  forget(l[0].rcv);
  ASSERT_EQ(ibv_modify_qp(l[1].rcv, &a, IBV_QP_STATE), 0);  // reset
  ASSERT_EQ(ibv_modify_qp(l[2].rcv, &a, IBV_QP_STATE), 0);  // reset, then destroyed
  ASSERT_EQ(ibv_destroy_qp(l[2].rcv), 0);
  forget(l[2].rcv);
  EXPECT_TRUE(drain(rcq).empty()) << "a completion of a destroyed or reset QP";
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(post_srq(s, 100 + k, &sg), 0) << "the WQEs of unpolled completions leaked";
  EXPECT_EQ(post_srq(s, 200, &sg), ENOMEM);
}

TEST_F(Srq, DestroyWhileAQpIsAttachedIsBusy) {
  ibv_srq_init_attr ia;
  std::memset(&ia, 0, sizeof ia);
  ia.attr.max_wr = 8;
  ia.attr.max_sge = 1;
  ibv_srq* s = ibv_create_srq(pd, &ia);
  ASSERT_NE(s, nullptr);
  ibv_cq* cq = make_cq();
  ibv_qp* q = create_qp_of(pd, IBV_QPT_RC, cq, cq, {}, s);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(ibv_destroy_srq(s), EBUSY);
  ibv_srq_attr a;
  EXPECT_EQ(ibv_query_srq(s, &a), 0) << "the SRQ is still usable after EBUSY";
  ASSERT_EQ(ibv_destroy_qp(q), 0);
  EXPECT_EQ(ibv_destroy_srq(s), 0);
}

TEST_F(Srq, PostRecvOnAQpWithAnSrqIsEinval) {
  ibv_srq* s = make_srq(8);
  ibv_cq* cq = make_cq();
  ibv_qp* q = make_qp_of(IBV_QPT_RC, cq, cq, {}, s);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(to_init(q, kAllAccess), 0);
  Buf rb = make_buf(4096);
  ibv_sge sg = rb.sge(0, 64);
  EXPECT_EQ(post_recv(q, 1, &sg, 1), EINVAL);
  ibv_qp_attr a;
  ibv_qp_init_attr ia;
  ASSERT_EQ(ibv_query_qp(q, &a, IBV_QP_CAP, &ia), 0);
  EXPECT_EQ(ia.srq, s);
  EXPECT_EQ(a.cap.max_recv_wr, 0u);
}

TEST_F(Srq, ModifySrq) {
  ibv_srq_attr got;
  ibv_srq* s = make_srq(16, 1, &got);
  ASSERT_NE(s, nullptr);
  ibv_srq_attr a;
  std::memset(&a, 0, sizeof a);
  a.max_wr = got.max_wr * 2;
  EXPECT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_MAX_WR), EINVAL) << "resize (not supported, as mlx5)";
  a.srq_limit = got.max_wr + 1;
  EXPECT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), EINVAL) << "a limit above max_wr";
  ibv_srq_attr q;
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.max_wr, got.max_wr);
  EXPECT_EQ(q.srq_limit, 0u);
  a.srq_limit = 5;
  ASSERT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.srq_limit, 5u);
  a.srq_limit = got.max_wr;
  EXPECT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), 0) << "the limit max_wr itself is allowed";
  a.srq_limit = 0;
  ASSERT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u);
}

// With the limit armed at L, the SRQ raises IBV_EVENT_SRQ_LIMIT_REACHED once, when fewer than L
// WQEs remain, and disarms itself.
TEST_F(Srq, LimitEventOnceThenDisarmed) {
  constexpr uint32_t kPosted = 10, kLimit = 4;
  ibv_srq* s = make_srq(16);
  ASSERT_NE(s, nullptr);
  ibv_cq* rcq = make_cq();
  Link l = link_to(s, rcq);
  ASSERT_TRUE(l.snd && l.rcv);
  Buf rb = make_buf(kPosted * 256), sb = make_buf(4096);
  for (uint32_t k = 0; k < kPosted; ++k) {
    ibv_sge sg = rb.sge(k * 256, 256);
    ASSERT_EQ(post_srq(s, k, &sg), 0);
  }
  ibv_srq_attr a;
  std::memset(&a, 0, sizeof a);
  a.srq_limit = kLimit;
  ASSERT_EQ(ibv_modify_srq(s, &a, IBV_SRQ_LIMIT), 0);
  // Down to exactly L left: not below it yet.
  for (uint32_t i = 0; i < kPosted - kLimit; ++i) {
    ASSERT_NO_FATAL_FAILURE(send_msg(l, sb, 0, 0, int(i)));
    ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, i));
  }
  EXPECT_FALSE(async_event_pending(ctx)) << "an event with " << kLimit << " WQEs left";
  ibv_srq_attr q;
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.srq_limit, kLimit) << "still armed";
  // One more: L - 1 left.
  ASSERT_NO_FATAL_FAILURE(send_msg(l, sb, 0, 0, 50));
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, kPosted - kLimit));
  ibv_async_event ev;
  ASSERT_TRUE(get_async_event(ctx, &ev)) << "no SRQ_LIMIT_REACHED";
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
    EXPECT_EQ(ev.element.srq, s);
  }
  ibv_ack_async_event(&ev);
  ASSERT_EQ(ibv_query_srq(s, &q), 0);
  EXPECT_EQ(q.srq_limit, 0u) << "not disarmed by the event";
  // Further consumption raises nothing more.
  ASSERT_NO_FATAL_FAILURE(send_msg(l, sb, 0, 0, 51));
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, kPosted - kLimit + 1));
  EXPECT_FALSE(async_event_pending(ctx)) << "a second SRQ_LIMIT_REACHED";
  // Destroying the SRQ (and its QP) after the ack does not wait (TearDown).
}

// A QP on an SRQ that enters ERR raises IBV_EVENT_QP_LAST_WQE_REACHED, once; the SRQ's WQEs are
// not flushed (other QPs still receive into them). A QP without an SRQ raises no such event.
TEST_F(Srq, LastWqeReachedOnceWhenAQpEntersErr) {
  ibv_srq* s = make_srq(16);
  ASSERT_NE(s, nullptr);
  ibv_cq* rcq = make_cq();
  Link l1 = link_to(s, rcq), l2 = link_to(s, rcq);
  ASSERT_TRUE(l1.rcv && l2.rcv);
  Pair plain = make_pair();
  ASSERT_TRUE(plain.a && plain.b);
  Buf rb = make_buf(4096), sb = make_buf(4096);
  ibv_sge sg = rb.sge(0, 256);
  ASSERT_EQ(post_srq(s, 7, &sg), 0);

  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(plain.b, &a, IBV_QP_STATE), 0);
  EXPECT_FALSE(async_event_pending(ctx)) << "an event for a QP without an SRQ";

  ASSERT_EQ(ibv_modify_qp(l1.rcv, &a, IBV_QP_STATE), 0);
  ibv_async_event ev;
  ASSERT_TRUE(get_async_event(ctx, &ev)) << "no QP_LAST_WQE_REACHED";
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.element.qp, l1.rcv);
  ibv_ack_async_event(&ev);
  ASSERT_EQ(ibv_modify_qp(l1.rcv, &a, IBV_QP_STATE), 0) << "ERR -> ERR";
  EXPECT_FALSE(async_event_pending(ctx)) << "a second QP_LAST_WQE_REACHED";
  EXPECT_TRUE(drain(rcq).empty()) << "an SRQ WQE was flushed";

  // The SRQ's WQE is still there for the other QP.
  ASSERT_NO_FATAL_FAILURE(send_msg(l2, sb, 0, 2, 3));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 7, &wc));
  EXPECT_EQ(wc.qp_num, l2.rcv->qp_num);
  // Destroying the QP after the ack does not wait.
  ASSERT_EQ(ibv_destroy_qp(l1.rcv), 0);
  forget(l1.rcv);
}

// ---- an SRQ whose senders live in another process ----

constexpr int kPeerQps = 2, kPeerMsgs = 8;

struct SrqPeerInfo {
  uint32_t ok;
  uint16_t lid;
  uint32_t qpn[kPeerQps];
  char err[96];
};
struct SrqParentInfo {
  uint16_t lid;
  uint32_t qpn[kPeerQps];
};
struct SrqPeerReport {
  uint32_t ok;
  char err[96];
};

// The peer: kPeerQps RC QPs, each sending kPeerMsgs messages (sender j = QP j) once told to.
[[noreturn]] void run_srq_senders_peer() {
  SrqPeerInfo me{};
  PeerDevice d = peer_open_device(me, 64);
  ibv_qp* qp[kPeerQps];
  for (auto& q : qp)
    if (!(q = create_rc_qp(d.pd, d.cq, d.cq))) peer_fail(me, "create_qp");
  constexpr size_t kSlot = 256;
  alignas(4096) static uint8_t buf[kPeerQps * kPeerMsgs * kSlot];
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) peer_fail(me, "reg_mr");
  me.ok = 1;
  me.lid = d.lid;
  for (int j = 0; j < kPeerQps; ++j) me.qpn[j] = qp[j]->qp_num;
  peer_tell(me);
  auto parent = peer_hear<SrqParentInfo>();
  uint8_t ready = 1;
  for (int j = 0; j < kPeerQps; ++j)
    if (connect_qp(qp[j], parent.lid, parent.qpn[j], 0x30, 0x40)) ready = 0;
  peer_tell(ready);
  peer_hear<uint8_t>();  // go

  SrqPeerReport rep{1, {}};
  for (int i = 0; i < kPeerMsgs && rep.ok; ++i)
    for (int j = 0; j < kPeerQps && rep.ok; ++j) {
      uint8_t* p = buf + (j * kPeerMsgs + i) * kSlot;
      make_msg(p, j, i);
      ibv_sge sg{reinterpret_cast<uint64_t>(p), msg_len(j, i), mr->lkey};
      ibv_send_wr w = send_wr(uint64_t(j) << 16 | uint64_t(i), IBV_WR_SEND, &sg, 1);
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(qp[j], &w, &bad)) {
        peer_report_failure(rep, "post_send %d/%d: errno %d", j, i, errno);
      }
    }
  auto wcs = poll_n(d.cq, kPeerQps * kPeerMsgs);
  if (rep.ok && wcs.size() != size_t(kPeerQps * kPeerMsgs)) {
    peer_report_failure(rep, "%zu sends completed", wcs.size());
  }
  for (const ibv_wc& wc : wcs)
    if (rep.ok && wc.status != IBV_WC_SUCCESS) {
      peer_report_failure(rep, "send 0x%llx: status %d", (unsigned long long)wc.wr_id, wc.status);
    }
  peer_finish(rep);
}

const PeerRole kSrqSenders("srq-senders", run_srq_senders_peer);

TEST_F(Srq, SharedByQpsWhoseSendersAreInAnotherProcess) {
  constexpr int kSlot = 256, kTotal = kPeerQps * kPeerMsgs;
  ibv_srq* s = make_srq(kTotal, 1);
  ibv_cq* rcq = make_cq();
  ASSERT_TRUE(s && rcq);
  Peer peer;
  SrqPeerInfo pi{};
  ASSERT_NO_FATAL_FAILURE(peer.start("srq-senders", &pi));
  ibv_qp* rq[kPeerQps];
  SrqParentInfo me{lid, {}};
  for (int j = 0; j < kPeerQps; ++j) {
    rq[j] = make_qp_of(IBV_QPT_RC, rcq, rcq, {}, s);
    ASSERT_NE(rq[j], nullptr);
    me.qpn[j] = rq[j]->qp_num;
  }
  Buf rb = make_buf(kTotal * kSlot, kAllAccess, 0);
  for (int k = 0; k < kTotal; ++k) {
    ibv_sge sg = rb.sge(k * kSlot, kSlot);
    ASSERT_EQ(post_srq(s, k, &sg), 0);
  }
  // Armed: the peer's engine, which takes the WQEs, raises the event on this process's context.
  ibv_srq_attr lim;
  std::memset(&lim, 0, sizeof lim);
  lim.srq_limit = 3;
  ASSERT_EQ(ibv_modify_srq(s, &lim, IBV_SRQ_LIMIT), 0);
  ASSERT_TRUE(peer.send(&me, sizeof me));
  for (int j = 0; j < kPeerQps; ++j) ASSERT_EQ(connect_qp(rq[j], pi.lid, pi.qpn[j], 0x40, 0x30), 0);
  ASSERT_NO_FATAL_FAILURE(peer.expect_ready());
  uint8_t go = 1;
  ASSERT_TRUE(peer.send(&go, 1));

  auto wcs = poll_n(rcq, kTotal);
  ASSERT_EQ(wcs.size(), size_t(kTotal));
  std::set<std::pair<int, int>> seen;
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << "wr_id " << wc.wr_id;
    ASSERT_LT(wc.wr_id, uint64_t(kTotal));
    int j, i;
    ASSERT_TRUE(is_msg(rb.p + wc.wr_id * kSlot, wc.byte_len, &j, &i)) << "wr_id " << wc.wr_id;
    ASSERT_LT(j, kPeerQps);
    EXPECT_EQ(wc.qp_num, rq[j]->qp_num);
    EXPECT_EQ(wc.src_qp, pi.qpn[j]);
    EXPECT_TRUE(seen.insert({j, i}).second) << "message " << j << "/" << i << " twice";
  }
  EXPECT_EQ(seen.size(), size_t(kTotal));
  ibv_async_event ev;
  ASSERT_TRUE(only_async_event(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &ev));
  EXPECT_EQ(ev.element.srq, s);
  SrqPeerReport rep{};
  peer.finish(&rep, 2 * kDeadline);
}

}  // namespace
}  // namespace vt
