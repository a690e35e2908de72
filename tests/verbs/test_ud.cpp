// SPDX-License-Identifier: BSD-2-Clause
// UD QPs through emu0: datagrams addressed by address handles, the 40-byte GRH area at the head of
// every receive, Q_Keys, the one-packet limit, what a UD QP refuses, and multicast groups (with a
// receiver in a second process).
#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint32_t kQkey = 0x11110000;
constexpr uint32_t kGrh = 40;

void fill(uint8_t* d, size_t n, uint8_t seed) { fill_pattern(d, n, seed, 11); }
bool same_pattern(const uint8_t* d, size_t n, uint8_t seed) { return has_pattern(d, n, seed, 11); }

// A multicast group: a GID of prefix ff (link-local scope) and a LID of the multicast range.
ibv_gid mgid(uint8_t n) {
  ibv_gid g;
  std::memset(&g, 0, sizeof g);
  g.raw[0] = 0xff;
  g.raw[1] = 0x12;
  g.raw[2] = 0x40;
  g.raw[3] = 0x1b;
  g.raw[15] = n;
  return g;
}
constexpr uint16_t kMlid = 0xc001;
constexpr uint32_t kMcastQpn = 0xffffff;

class Ud : public VerbsTest {
 protected:
  void SetUpObjects() override {
    scq = make_cq();
    rcq = make_cq();
    ASSERT_TRUE(scq && rcq);
    s = make_ud(scq, kQkey);
    r = make_ud(rcq, kQkey);
    ASSERT_TRUE(s && r);
    sb = make_buf(16384, kAllAccess, 0);
    rb = make_buf(16384, kAllAccess, 0xee);
    ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid0), 0);
  }

  ibv_qp* make_ud(ibv_cq* cq, uint32_t qkey) {
    ibv_qp* qp = make_qp_of(IBV_QPT_UD, cq, cq);
    if (qp) {
      EXPECT_EQ(ud_to_rts(qp, qkey, 0x10), 0);
    }
    return qp;
  }

  ibv_ah_attr global_attr(uint16_t dlid, const ibv_gid& dgid) {
    ibv_ah_attr a = lid_ah_attr(dlid, 3);
    a.is_global = 1;
    a.grh.dgid = dgid;
    a.grh.sgid_index = 0;
    a.grh.hop_limit = 64;
    a.grh.traffic_class = 0x2a;
    a.grh.flow_label = 0x12345;
    return a;
  }

  // One signaled SEND of len bytes of sb (at off) to (ah, dqpn, qkey); the sender's completion is
  // waited for and must be SUCCESS.
  void send_to(ibv_qp* from, ibv_cq* from_cq, uint64_t wr_id, ibv_ah* ah, uint32_t dqpn,
               uint32_t qkey, size_t off, uint32_t len, ibv_wr_opcode op = IBV_WR_SEND,
               uint32_t imm = 0) {
    ibv_sge sg = sb.sge(off, len);
    ibv_send_wr w = ud_send_wr(wr_id, op, &sg, ah, dqpn, qkey);
    w.imm_data = htonl(imm);
    ASSERT_EQ(post_one(from, &w), 0);
    ibv_wc wc;
    ASSERT_TRUE(wait_wc(from_cq, IBV_WC_SUCCESS, wr_id, &wc));
    EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  }

  // The UD round trip: a receive of the SGEs `rs` of rb (wr_id recv_id) posted on r, len bytes of
  // sb (the pattern `seed`) sent from s to r through ah (send_to: wr_id send_id, op, imm), and r's
  // completion, which must be `status` of recv_id (in *wc).
  void round_trip(ibv_ah* ah, std::vector<ibv_sge> rs, uint64_t recv_id, uint64_t send_id,
                  uint32_t len, uint8_t seed, ibv_wc* wc, ibv_wc_status status = IBV_WC_SUCCESS,
                  ibv_wr_opcode op = IBV_WR_SEND, uint32_t imm = 0) {
    ASSERT_EQ(post_recv(r, recv_id, rs.data(), static_cast<int>(rs.size())), 0);
    fill(sb.p, len, seed);
    ASSERT_NO_FATAL_FAILURE(send_to(s, scq, send_id, ah, r->qp_num, kQkey, 0, len, op, imm));
    ASSERT_TRUE(wait_wc(rcq, status, recv_id, wc));
  }

  // A datagram r must drop, then one it receives, into the one receive (recv_id) posted before
  // both: the drop leaves the receive for the next datagram. First len bytes of the pattern
  // `seed` from `from` (its CQ from_cq) with Q_Key dropped_qkey (`why`: what its arrival would
  // mean), then len bytes of the pattern seed + 1 from s with kept_qkey; r's completion in *wc.
  void dropped_then_received(ibv_qp* from, ibv_cq* from_cq, uint32_t dropped_qkey,
                             uint32_t kept_qkey, uint64_t recv_id, uint32_t len, uint8_t seed,
                             const char* why, ibv_wc* wc = nullptr) {
    ibv_ah* ah = make_ah(lid_ah_attr(lid));
    ASSERT_NE(ah, nullptr);
    ibv_sge rs = rb.sge(0, 512);
    ASSERT_EQ(post_recv(r, recv_id, &rs, 1), 0);
    const uint8_t kept_seed = static_cast<uint8_t>(seed + 1);
    fill(sb.p, len, seed);
    fill(sb.p + 1024, len, kept_seed);
    ASSERT_NO_FATAL_FAILURE(send_to(from, from_cq, 1, ah, r->qp_num, dropped_qkey, 0, len));
    EXPECT_TRUE(drain(rcq).empty()) << why;
    ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, r->qp_num, kept_qkey, 1024, len));
    ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, recv_id, wc));
    EXPECT_TRUE(same_pattern(rb.p + kGrh, len, kept_seed));
  }

  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  ibv_qp* s = nullptr;  // sender
  ibv_qp* r = nullptr;  // receiver
  Buf sb, rb;
  ibv_gid gid0;
};

TEST_F(Ud, SendRecvWithoutGrh) {
  ibv_ah* ah = make_ah(lid_ah_attr(lid, 5));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(round_trip(ah, {rb.sge(0, 1024)}, 77, 1, 100, 1, &wc));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, kGrh + 100);
  EXPECT_EQ(wc.qp_num, r->qp_num);
  EXPECT_EQ(wc.src_qp, s->qp_num);
  EXPECT_EQ(wc.slid, lid);
  EXPECT_EQ(wc.sl, 5);
  EXPECT_EQ(wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM), 0u);
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 100, 1)) << "payload not at offset 40";
  EXPECT_EQ(rb.p[kGrh + 100], 0xee) << "wrote past the message";
  EXPECT_TRUE(drain(rcq).empty());
  EXPECT_TRUE(drain(scq).empty());
}

TEST_F(Ud, SendRecvWithGrh) {
  ibv_ah* ah = make_ah(global_attr(lid, gid0));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(round_trip(ah, {rb.sge(0, 1024)}, 78, 2, 200, 9, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + 200);
  EXPECT_EQ(wc.src_qp, s->qp_num);
  EXPECT_EQ(wc.slid, lid);
  EXPECT_EQ(wc.sl, 3);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
  // The GRH: IPv6-like version 6, traffic class, flow label, payload length (BTH 12 + DETH 8 +
  // data + ICRC 4), next header 0x1b (BTH), hop limit, source and destination GIDs.
  uint32_t vtf;
  std::memcpy(&vtf, rb.p, 4);
  EXPECT_EQ(ntohl(vtf), 6u << 28 | 0x2au << 20 | 0x12345u);
  uint16_t paylen;
  std::memcpy(&paylen, rb.p + 4, 2);
  EXPECT_EQ(ntohs(paylen), 12 + 8 + 200 + 4);
  EXPECT_EQ(rb.p[6], 0x1b);
  EXPECT_EQ(rb.p[7], 64);
  EXPECT_EQ(std::memcmp(rb.p + 8, gid0.raw, 16), 0) << "sgid";
  EXPECT_EQ(std::memcmp(rb.p + 24, gid0.raw, 16), 0) << "dgid";
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 200, 9));
}

// The GRH area and the payload scattered over receive SGEs: the GRH straddles the first two.
TEST_F(Ud, GrhAndPayloadStraddleReceiveSges) {
  ibv_ah* ah = make_ah(global_attr(lid, gid0));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(
      round_trip(ah, {rb.sge(0, 16), rb.sge(1000, 30), rb.sge(2000, 500)}, 79, 1, 100, 13, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + 100);
  uint8_t grh[kGrh];
  std::memcpy(grh, rb.p, 16);
  std::memcpy(grh + 16, rb.p + 1000, 24);
  EXPECT_EQ(grh[6], 0x1b);
  EXPECT_EQ(std::memcmp(grh + 8, gid0.raw, 16), 0) << "sgid";
  EXPECT_EQ(std::memcmp(grh + 24, rb.p + 1008, 16), 0);
  EXPECT_EQ(std::memcmp(rb.p + 1008, gid0.raw, 16), 0) << "dgid";
  EXPECT_TRUE(same_pattern(rb.p + 1024, 6, 13)) << "payload start in the second SGE";
  uint8_t rest[94];
  for (int i = 0; i < 94; ++i) rest[i] = static_cast<uint8_t>(13 + (i + 6) * 11);
  EXPECT_EQ(std::memcmp(rb.p + 2000, rest, 94), 0) << "payload rest in the third SGE";
  EXPECT_EQ(rb.p[2094], 0xee);
}

// A UD QP receives in RTR and RTS only: a datagram to one in INIT is dropped.
TEST_F(Ud, QpInInitReceivesNothing) {
  ibv_cq* cq2 = make_cq();
  ibv_qp* q = make_qp_of(IBV_QPT_UD, cq2, cq2);
  ASSERT_TRUE(cq2 && q);
  ibv_qp_attr a;
  std::memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  ibv_sge rs = rb.sge(0, 512);
  ASSERT_EQ(post_recv(q, 1, &rs, 1), 0);
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  fill(sb.p, 20, 1);
  fill(sb.p + 100, 20, 2);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 1, ah, q->qp_num, kQkey, 0, 20));
  EXPECT_TRUE(drain(cq2).empty()) << "a QP in INIT received";
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, q->qp_num, kQkey, 100, 20));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(cq2, IBV_WC_SUCCESS, 1, &wc)) << "a QP in RTR receives";
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 20, 2));
}

// Two UD QPs receiving from one SRQ.
TEST_F(Ud, QpsOnAnSrq) {
  ibv_srq* srq = make_srq(8);
  ibv_cq* cq2 = make_cq();
  ASSERT_TRUE(srq && cq2);
  ibv_qp* q[2];
  for (auto& x : q) {
    x = make_qp_of(IBV_QPT_UD, cq2, cq2, {}, srq);
    ASSERT_NE(x, nullptr);
    ASSERT_EQ(ud_to_rts(x, kQkey), 0);
  }
  for (int k = 0; k < 2; ++k) {
    ibv_sge sg = rb.sge(4096 * k, 4096);
    ASSERT_EQ(post_srq(srq, 300 + k, &sg), 0);
  }
  ibv_ah* ah = make_ah(lid_ah_attr(lid, 2));
  ASSERT_NE(ah, nullptr);
  fill(sb.p, 10, 1);
  fill(sb.p + 100, 300, 2);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 1, ah, q[1]->qp_num, kQkey, 0, 10));
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, q[0]->qp_num, kQkey, 100, 300));
  auto wcs = poll_n(cq2, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(wc.wr_id == 300 || wc.wr_id == 301);
    bool first = wc.qp_num == q[1]->qp_num;
    EXPECT_EQ(wc.qp_num, first ? q[1]->qp_num : q[0]->qp_num);
    EXPECT_EQ(wc.byte_len, kGrh + (first ? 10 : 300));
    EXPECT_EQ(wc.src_qp, s->qp_num);
    EXPECT_EQ(wc.sl, 2);
    EXPECT_TRUE(
        same_pattern(rb.p + 4096 * (wc.wr_id - 300) + kGrh, first ? 10 : 300, first ? 1 : 2));
  }
  EXPECT_NE(wcs[0].wr_id, wcs[1].wr_id);
}

TEST_F(Ud, SendWithImmediate) {
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(round_trip(ah, {rb.sge(0, 256)}, 5, 3, 16, 4, &wc, IBV_WC_SUCCESS,
                                     IBV_WR_SEND_WITH_IMM, 0xcafe0001));
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0xcafe0001u);
  EXPECT_EQ(wc.byte_len, kGrh + 16);
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 16, 4));
}

// A datagram whose Q_Key differs from the receiver's is dropped; the sender still completes.
TEST_F(Ud, QkeyMismatchIsDropped) {
  dropped_then_received(s, scq, kQkey + 1, kQkey, 11, 64, 1,
                        "a datagram with the wrong Q_Key was received");
}

// A remote_qkey with the high bit set means: send with the sending QP's own Q_Key.
TEST_F(Ud, QkeyHighBitUsesTheSendersQkey) {
  ibv_cq* cq2 = make_cq();
  ibv_qp* other = make_ud(cq2, kQkey + 7);  // a sender whose own Q_Key is not the receiver's
  ASSERT_TRUE(cq2 && other);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(dropped_then_received(other, cq2, 0x80000000u, 0x80000000u, 21, 32, 5,
                                                "sent with a Q_Key that is not the sending QP's",
                                                &wc));
  EXPECT_EQ(wc.src_qp, s->qp_num);
}

// A UD message is one packet: up to the port's active MTU (4096), no more.
TEST_F(Ud, MessageLargerThanMtuIsALocalLengthError) {
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  ASSERT_EQ(pa.active_mtu, IBV_MTU_4096);
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(round_trip(ah, {rb.sge(0, 8192)}, 31, 1, 4096, 3, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + 4096);
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 4096, 3));

  ibv_sge rs = rb.sge(0, 8192);
  ASSERT_EQ(post_recv(r, 32, &rs, 1), 0);
  ibv_sge sg = sb.sge(0, 4097);
  ibv_send_wr w = ud_send_wr(2, IBV_WR_SEND, &sg, ah, r->qp_num, kQkey);
  ASSERT_EQ(post_one(s, &w), 0);
  EXPECT_TRUE(wait_wc(scq, IBV_WC_LOC_LEN_ERR, 2));
  EXPECT_TRUE(drain(rcq).empty()) << "an oversized datagram was delivered";
}

// A receive buffer without room for the GRH area plus the payload: the receiver's completion is
// LOC_LEN_ERR; the sender (which learns nothing of it) completes SUCCESS.
TEST_F(Ud, ReceiveBufferTooSmall) {
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(
      round_trip(ah, {rb.sge(0, kGrh + 50)}, 41, 1, 51, 0, &wc, IBV_WC_LOC_LEN_ERR));
  EXPECT_EQ(wc.qp_num, r->qp_num);
}

// Nothing posted to receive: the datagram is gone, silently; a later one takes a later receive.
TEST_F(Ud, NoReceivePostedIsDroppedSilently) {
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  fill(sb.p, 48, 7);
  fill(sb.p + 1024, 48, 8);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 1, ah, r->qp_num, kQkey, 0, 48));
  ibv_sge rs = rb.sge(0, 512);
  ASSERT_EQ(post_recv(r, 51, &rs, 1), 0);
  EXPECT_TRUE(drain(rcq).empty()) << "the dropped datagram arrived late";
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, r->qp_num, kQkey, 1024, 48));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 51, &wc));
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 48, 8)) << "not the second datagram's data";
  EXPECT_EQ(qp_state(r), IBV_QPS_RTS);
}

// UD sends only SENDs: RDMA and atomics are refused at post and leave nothing behind.
TEST_F(Ud, RdmaAndAtomicsRefusedAtPost) {
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  ibv_sge sg = sb.sge(0, 8);
  for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
                           IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP}) {
    ibv_send_wr w = rdma_wr(9, op, &sg, 1, rb.addr(), rb.rkey());
    w.wr.ud.ah = ah;  // (overlays the rdma fields: the opcode alone must be refused)
    EXPECT_EQ(post_one(s, &w), EINVAL) << "opcode " << op;
  }
  ibv_sge rs = rb.sge(0, 512);
  ASSERT_EQ(post_recv(r, 1, &rs, 1), 0);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, r->qp_num, kQkey, 0, 8));
  EXPECT_TRUE(drain(scq).empty()) << "a refused WR completed";
}

// The ibv_wr_* API on a UD QP: the address per WR with ibv_wr_set_ud_addr.
TEST_F(Ud, WrApiWithSetUdAddr) {
  ibv_qp* q = make_qp_ex(IBV_QPT_UD, scq, {16, 16, 1, 1, 0},
                         IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
  ASSERT_NE(q, nullptr) << "errno " << errno;
  ASSERT_EQ(ud_to_rts(q, kQkey), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(q);
  ASSERT_NE(x, nullptr);
  ibv_ah* ah = make_ah(lid_ah_attr(lid));
  ASSERT_NE(ah, nullptr);
  ibv_sge rs[2] = {rb.sge(0, 512), rb.sge(1024, 512)};
  ASSERT_EQ(post_recv(r, 61, &rs[0], 1), 0);
  ASSERT_EQ(post_recv(r, 62, &rs[1], 1), 0);
  fill(sb.p, 40, 1);
  fill(sb.p + 100, 60, 2);

  ibv_wr_start(x);
  wr_next(x, 1);
  ibv_wr_send(x);
  ibv_wr_set_ud_addr(x, ah, r->qp_num, kQkey);
  ibv_wr_set_sge(x, sb.lkey(), sb.addr(), 40);
  x->wr_id = 2;
  ibv_wr_send_imm(x, htonl(0x600d));
  ibv_wr_set_ud_addr(x, ah, r->qp_num, kQkey);
  ibv_wr_set_sge(x, sb.lkey(), sb.addr() + 100, 60);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ASSERT_TRUE(wait_wc(scq, IBV_WC_SUCCESS, 1));
  ASSERT_TRUE(wait_wc(scq, IBV_WC_SUCCESS, 2));
  ibv_wc wc;
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 61, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + 40);
  EXPECT_EQ(wc.src_qp, q->qp_num);
  EXPECT_TRUE(same_pattern(rb.p + kGrh, 40, 1));
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 62, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + 60);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(wc.imm_data), 0x600du);
  EXPECT_TRUE(same_pattern(rb.p + 1024 + kGrh, 60, 2));

  // An operation the QP was not created for: the whole session is refused.
  ibv_wr_start(x);
  wr_add_write(x, 3, rb.rkey(), rb.addr(), sb.sge(0, 8));
  EXPECT_EQ(ibv_wr_complete(x), EOPNOTSUPP);
  EXPECT_TRUE(drain(scq).empty());
}

TEST_F(Ud, CreateQpExWithRdmaOpsIsNotSupported) {
  expect_qp_ex_unsupported(
      IBV_QPT_UD, scq, IBV_QP_EX_WITH_SEND,
      {IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD});
}

// ibv_modify_qp(3) for UD: the Q_Key instead of access flags, no address vector or path, a send
// PSN for RTS.
TEST_F(Ud, ModifyAttributeRules) {
  ibv_qp* q = make_qp_of(IBV_QPT_UD, scq, scq);
  ASSERT_NE(q, nullptr);
  ibv_qp_attr a = init_attr(IBV_ACCESS_LOCAL_WRITE);
  a.qkey = 0x4321;
  constexpr int kInit = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  EXPECT_EQ(ibv_modify_qp(q, &a, kInit), EINVAL) << "INIT without a Q_Key";
  EXPECT_EQ(ibv_modify_qp(q, &a, kInit | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS), EINVAL)
      << "access flags on UD";
  EXPECT_EQ(qp_state(q), IBV_QPS_RESET);
  ASSERT_EQ(ibv_modify_qp(q, &a, kInit | IBV_QP_QKEY), 0);

  a.qp_state = IBV_QPS_RTR;
  a.ah_attr.dlid = lid;
  a.ah_attr.port_num = 1;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV), EINVAL) << "an address vector on UD";
  a.path_mtu = IBV_MTU_1024;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PATH_MTU), EINVAL) << "a path MTU on UD";
  EXPECT_EQ(qp_state(q), IBV_QPS_INIT);
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);

  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0x123;
  a.timeout = 14;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), EINVAL) << "RTS without a send PSN";
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), EINVAL)
      << "a timeout on UD";
  EXPECT_EQ(qp_state(q), IBV_QPS_RTR);
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);

  ibv_qp_attr got;
  ibv_qp_init_attr gi;
  ASSERT_EQ(ibv_query_qp(q, &got, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN, &gi), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.qkey, 0x4321u);
  EXPECT_EQ(got.sq_psn, 0x123u);
  EXPECT_EQ(gi.qp_type, IBV_QPT_UD);
}

TEST_F(Ud, CreateAhWithBadAttributes) {
  ibv_ah_attr a = global_attr(lid, gid0);
  a.grh.sgid_index = 200;
  errno = 0;
  ibv_ah* ah = ibv_create_ah(pd, &a);
  EXPECT_EQ(ah, nullptr) << "an sgid_index past the GID table";
  if (ah) ahs.push_back(ah);
  EXPECT_EQ(errno, EINVAL);
  a = lid_ah_attr(lid, 16);
  errno = 0;
  ah = ibv_create_ah(pd, &a);
  EXPECT_EQ(ah, nullptr) << "SL 16";
  if (ah) ahs.push_back(ah);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(Ud, CreateAhOnABadPort) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  for (uint8_t port : {uint8_t(0), uint8_t(da.phys_port_cnt + 1)}) {
    ibv_ah_attr a = lid_ah_attr(lid);
    a.port_num = port;
    errno = 0;
    ibv_ah* ah = ibv_create_ah(pd, &a);
    EXPECT_EQ(ah, nullptr) << "port " << int(port);
    if (ah) ahs.push_back(ah);
    EXPECT_EQ(errno, EINVAL) << "port " << int(port);
  }
}

// A reply to whoever sent a datagram, addressed from its completion (ibv_init_ah_from_wc and
// ibv_create_ah_from_wc), with and without a GRH.
class UdReply : public Ud, public ::testing::WithParamInterface<bool> {};

TEST_P(UdReply, AhFromWcReachesTheSender) {
  bool global = GetParam();
  ibv_ah* ah = make_ah(global ? global_attr(lid, gid0) : lid_ah_attr(lid, 6));
  ASSERT_NE(ah, nullptr);
  ibv_wc wc;
  ASSERT_NO_FATAL_FAILURE(round_trip(ah, {rb.sge(0, 512)}, 1, 1, 20, 0, &wc));
  ASSERT_EQ((wc.wc_flags & IBV_WC_GRH) != 0, global);
  auto* grh = reinterpret_cast<ibv_grh*>(rb.p);

  ibv_ah_attr back;
  std::memset(&back, 0, sizeof back);
  ASSERT_EQ(ibv_init_ah_from_wc(ctx, 1, &wc, grh, &back), 0);
  EXPECT_EQ(back.dlid, lid);
  EXPECT_EQ(back.sl, global ? 3 : 6);
  EXPECT_EQ(back.port_num, 1);
  EXPECT_EQ(back.is_global, global ? 1 : 0);
  if (global) {
    EXPECT_EQ(std::memcmp(back.grh.dgid.raw, gid0.raw, 16), 0);
  }

  ibv_ah* reply = ibv_create_ah_from_wc(pd, &wc, grh, 1);
  ASSERT_NE(reply, nullptr) << "errno " << errno;
  ahs.push_back(reply);
  // The reply, from the receiver to the datagram's source QP.
  ibv_sge ss = sb.sge(0, 512);
  ASSERT_EQ(post_recv(s, 2, &ss, 1), 0);
  fill(rb.p + 2048, 30, 9);
  ibv_sge sg = rb.sge(2048, 30);
  ibv_send_wr w = ud_send_wr(3, IBV_WR_SEND, &sg, reply, wc.src_qp, kQkey);
  ASSERT_EQ(post_one(r, &w), 0);
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 3));
  ibv_wc got;
  ASSERT_TRUE(wait_wc(scq, IBV_WC_SUCCESS, 2, &got));
  EXPECT_EQ(got.src_qp, r->qp_num);
  EXPECT_EQ(got.byte_len, kGrh + 30);
  EXPECT_EQ((got.wc_flags & IBV_WC_GRH) != 0, global);
  if (global) {
    EXPECT_EQ(sb.p[6], 0x1b);
    EXPECT_EQ(std::memcmp(sb.p + 24, gid0.raw, 16), 0) << "dgid of the reply";
  }
  EXPECT_TRUE(same_pattern(sb.p + kGrh, 30, 9));
}

INSTANTIATE_TEST_SUITE_P(Grh, UdReply, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Global" : "LidOnly"; });

// ---- multicast ----

TEST_F(Ud, AttachMcastRules) {
  ibv_gid g = mgid(1);
  ibv_cq* cq = make_cq();
  ibv_qp* rc = make_qp(cq, cq);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(ibv_attach_mcast(rc, &g, kMlid), EINVAL) << "an RC QP joined a group";
  EXPECT_EQ(ibv_attach_mcast(r, &gid0, kMlid), EINVAL) << "a unicast GID";
  EXPECT_EQ(ibv_attach_mcast(r, &g, lid), EINVAL) << "a unicast LID";
  EXPECT_EQ(ibv_attach_mcast(r, &g, 0xffff), EINVAL) << "the permissive LID";
  EXPECT_EQ(ibv_detach_mcast(r, &g, kMlid), EINVAL) << "detach without attach";
  EXPECT_EQ(ibv_attach_mcast(r, &g, kMlid), 0);
  EXPECT_EQ(ibv_attach_mcast(r, &g, kMlid), 0) << "joining again is no error";
  EXPECT_EQ(ibv_detach_mcast(r, &g, kMlid), 0);
  EXPECT_EQ(ibv_detach_mcast(r, &g, kMlid), EINVAL) << "detached twice";
}

TEST_F(Ud, AttachBeyondMaxMcastQpAttachIsEnomem) {
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  ASSERT_GT(da.max_mcast_qp_attach, 0);
  ASSERT_LT(da.max_mcast_qp_attach, 200);
  int n = da.max_mcast_qp_attach;
  for (int i = 0; i < n; ++i) {
    ibv_gid g = mgid(static_cast<uint8_t>(i));
    ASSERT_EQ(ibv_attach_mcast(r, &g, static_cast<uint16_t>(kMlid + i)), 0) << i;
  }
  ibv_gid more = mgid(static_cast<uint8_t>(n));
  EXPECT_EQ(ibv_attach_mcast(r, &more, static_cast<uint16_t>(kMlid + n)), ENOMEM);
  ibv_gid first = mgid(0);
  EXPECT_EQ(ibv_attach_mcast(r, &first, kMlid), 0) << "a group already joined takes no room";
  EXPECT_EQ(ibv_detach_mcast(r, &first, kMlid), 0);
  EXPECT_EQ(ibv_attach_mcast(r, &more, static_cast<uint16_t>(kMlid + n)), 0)
      << "room after a detach";
}

// The multicast peer: one UD QP joined to the group, two receives; it checks both datagrams.
struct McastPeerInfo {
  uint32_t ok;
  uint32_t qpn;
  char err[96];
};
struct McastParentInfo {
  uint32_t sender_qpn;
  uint16_t sender_lid;
};
struct McastPeerReport {
  uint32_t ok;
  char err[128];
};
constexpr uint32_t kMcastLen[2] = {64, 1000};
constexpr uint8_t kMcastSeed[2] = {0x31, 0x47};

[[noreturn]] void run_mcast_peer() {
  McastPeerInfo me{};
  PeerDevice d = peer_open_device(me, 16);
  ibv_qp* qp = create_qp_of(d.pd, IBV_QPT_UD, d.cq, d.cq);
  if (!qp) peer_fail(me, "pd/cq/qp");
  if (ud_to_rts(qp, kQkey)) peer_fail(me, "modify to RTS");
  ibv_gid g = mgid(1);
  if (ibv_attach_mcast(qp, &g, kMlid)) peer_fail(me, "attach_mcast");
  alignas(4096) static uint8_t buf[8192];
  ibv_mr* mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) peer_fail(me, "reg_mr");
  for (int i = 0; i < 2; ++i) {
    ibv_sge sg{reinterpret_cast<uint64_t>(buf) + 4096 * i, 4096, mr->lkey};
    if (post_recv(qp, 100 + i, &sg, 1)) peer_fail(me, "post_recv");
  }
  me.ok = 1;
  me.qpn = qp->qp_num;
  peer_tell(me);
  auto parent = peer_hear<McastParentInfo>();

  McastPeerReport rep{1, {}};
  auto wcs = poll_n(d.cq, 2);
  if (wcs.size() != 2) {
    peer_report_failure(rep, "%zu of 2 datagrams arrived", wcs.size());
  }
  for (size_t k = 0; rep.ok && k < wcs.size(); ++k) {
    const ibv_wc& wc = wcs[k];
    const uint8_t* dgram = buf + 4096 * k;
    if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 100 + k || wc.byte_len != kGrh + kMcastLen[k] ||
        wc.src_qp != parent.sender_qpn || wc.slid != parent.sender_lid ||
        !(wc.wc_flags & IBV_WC_GRH)) {
      peer_report_failure(rep, "wc %zu: status %d wr_id %llu len %u src_qp 0x%x slid %u flags 0x%x",
                          k, wc.status, (unsigned long long)wc.wr_id, wc.byte_len, wc.src_qp,
                          wc.slid, wc.wc_flags);
    } else if (std::memcmp(dgram + 24, g.raw, 16) != 0 || dgram[6] != 0x1b) {
      peer_report_failure(rep, "datagram %zu: GRH without the group's GID", k);
    } else if (!same_pattern(dgram + kGrh, kMcastLen[k], kMcastSeed[k])) {
      peer_report_failure(rep, "datagram %zu: payload differs", k);
    }
  }
  peer_finish(rep);
}

const PeerRole kMcastReceiver("ud-mcast-receiver", run_mcast_peer);

// A SEND to the group reaches every member: two QPs here and one in another process. After a
// detach, the QP that left receives no more; the others still do.
TEST_F(Ud, MulticastReachesThreeReceiversInTwoProcesses) {
  Peer peer;
  McastPeerInfo pi{};
  ASSERT_NO_FATAL_FAILURE(peer.start("ud-mcast-receiver", &pi));

  ibv_cq* cq2 = make_cq();
  ibv_qp* r2 = make_ud(cq2, kQkey);
  ASSERT_TRUE(cq2 && r2);
  ibv_gid g = mgid(1);
  ASSERT_EQ(ibv_attach_mcast(r, &g, kMlid), 0);
  ASSERT_EQ(ibv_attach_mcast(r2, &g, kMlid), 0);
  Buf rb2 = make_buf(8192, kAllAccess, 0);
  for (int i = 0; i < 2; ++i) {
    ibv_sge a = rb.sge(4096 * i, 4096), b = rb2.sge(4096 * i, 4096);
    ASSERT_EQ(post_recv(r, 10 + i, &a, 1), 0);
    ASSERT_EQ(post_recv(r2, 20 + i, &b, 1), 0);
  }
  McastParentInfo me{s->qp_num, lid};
  ASSERT_TRUE(peer.send(&me, sizeof me));

  ibv_ah_attr aa = global_attr(kMlid, g);
  ibv_ah* ah = make_ah(aa);
  ASSERT_NE(ah, nullptr);
  fill(sb.p, kMcastLen[0], kMcastSeed[0]);
  fill(sb.p + 4096, kMcastLen[1], kMcastSeed[1]);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 1, ah, kMcastQpn, kQkey, 0, kMcastLen[0]));
  ibv_wc wc;
  for (auto [cq, qp, id, buf] : {std::tuple{rcq, r, 10, &rb}, std::tuple{cq2, r2, 20, &rb2}}) {
    ASSERT_TRUE(wait_wc(cq, IBV_WC_SUCCESS, id, &wc)) << "receiver QP 0x" << std::hex << qp->qp_num;
    EXPECT_EQ(wc.qp_num, qp->qp_num);
    EXPECT_EQ(wc.src_qp, s->qp_num);
    EXPECT_EQ(wc.byte_len, kGrh + kMcastLen[0]);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    EXPECT_EQ(std::memcmp(buf->p + 24, g.raw, 16), 0) << "dgid: the group";
    EXPECT_TRUE(same_pattern(buf->p + kGrh, kMcastLen[0], kMcastSeed[0]));
  }

  // r2 leaves the group. The sender's completion comes after every member's copy was delivered.
  ASSERT_EQ(ibv_detach_mcast(r2, &g, kMlid), 0);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 2, ah, kMcastQpn, kQkey, 4096, kMcastLen[1]));
  ASSERT_TRUE(wait_wc(rcq, IBV_WC_SUCCESS, 11, &wc));
  EXPECT_EQ(wc.byte_len, kGrh + kMcastLen[1]);
  EXPECT_TRUE(same_pattern(rb.p + 4096 + kGrh, kMcastLen[1], kMcastSeed[1]));
  EXPECT_TRUE(drain(cq2).empty()) << "a QP received after ibv_detach_mcast";

  McastPeerReport rep{};
  ASSERT_NO_FATAL_FAILURE(peer.finish(&rep, 2 * kDeadline));
  // r2's second receive is still there: a unicast datagram takes it.
  ibv_ah* uni = make_ah(lid_ah_attr(lid));
  ASSERT_NE(uni, nullptr);
  ASSERT_NO_FATAL_FAILURE(send_to(s, scq, 3, uni, r2->qp_num, kQkey, 0, 8));
  EXPECT_TRUE(wait_wc(cq2, IBV_WC_SUCCESS, 21));
}

}  // namespace
}  // namespace vt
