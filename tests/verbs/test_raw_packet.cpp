// SPDX-License-Identifier: BSD-2-Clause
// Raw packet QPs, flow steering and RSS on emu0's RoCE ports (this binary's emu0: port 1
// InfiniBand, ports 2 and 3 Ethernet; test_roce.cpp sets them up). Frames cross between two real
// processes: a peer sends, this process's rules decide which of its QPs and WQs receive.
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "emudv_link.h"
#include "peer.h"
#include "verbs_fixture.h"

namespace vt {
namespace {

constexpr uint8_t kIbPort = 1;
constexpr uint8_t kEthPort = 2;
constexpr uint32_t kFrameLen = 64;
constexpr uint32_t kMaxFrames = 64;
constexpr uint16_t kDport = 5678;
const uint8_t kDstMac[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};  // multicast: every port
const uint8_t kDstIp[4] = {2, 2, 2, 2};

// Frame i: Eth | IPv4 from i.i+1.i+2.i+3 to 2.2.2.2 | UDP 1234 -> dport | payload byte i.
void build_frame(uint8_t* f, uint32_t i, uint16_t dport) {
  std::memset(f, 0, kFrameLen);
  std::memcpy(f, kDstMac, 6);
  f[6] = 0x24;  // a unicast source MAC
  f[12] = 0x08;
  uint8_t* ip = f + 14;
  ip[0] = 0x45;
  ip[3] = kFrameLen - 14;
  ip[8] = 64;
  ip[9] = 17;
  for (uint32_t k = 0; k < 4; ++k) ip[12 + k] = static_cast<uint8_t>(i + k);
  std::memcpy(ip + 16, kDstIp, 4);
  uint8_t* udp = ip + 20;
  udp[0] = 1234 >> 8;
  udp[1] = 1234 & 0xff;
  udp[2] = static_cast<uint8_t>(dport >> 8);
  udp[3] = dport & 0xff;
  udp[5] = kFrameLen - 34;
  f[kFrameLen - 1] = static_cast<uint8_t>(i);
}

// RESET -> INIT on `port` -> RTR -> RTS: a raw packet QP needs nothing else.
int raw_to_rts(ibv_qp* qp, uint8_t port) {
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port;
  if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT)) return e;
  a.qp_state = IBV_QPS_RTR;
  if (int e = ibv_modify_qp(qp, &a, IBV_QP_STATE)) return e;
  a.qp_state = IBV_QPS_RTS;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

ibv_qp* raw_qp(ibv_pd* pd, ibv_cq* cq, uint32_t wrs = 64) {
  ibv_qp_init_attr qa = {};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.cap = {wrs, wrs, 1, 1, 0};
  return ibv_create_qp(pd, &qa);
}

// A rule of one IPv4 spec (destination address) and one UDP spec (destination port).
struct UdpRule {
  ibv_flow_attr attr;
  ibv_flow_spec_ipv4 ip;
  ibv_flow_spec_tcp_udp udp;
};
// The specs follow the attributes back to back, as ibv_create_flow(3) reads them.
static_assert(offsetof(UdpRule, ip) == sizeof(ibv_flow_attr) &&
              offsetof(UdpRule, udp) == sizeof(ibv_flow_attr) + sizeof(ibv_flow_spec_ipv4));

UdpRule udp_rule(uint8_t port, uint16_t dport) {
  UdpRule r = {};
  r.attr.size = sizeof r;
  r.attr.num_of_specs = 2;
  r.attr.port = port;
  r.ip.type = IBV_FLOW_SPEC_IPV4;
  r.ip.size = sizeof r.ip;
  std::memcpy(&r.ip.val.dst_ip, kDstIp, 4);
  r.ip.mask.dst_ip = 0xffffffff;
  r.udp.type = IBV_FLOW_SPEC_UDP;
  r.udp.size = sizeof r.udp;
  r.udp.val.dst_port = htobe16(dport);
  r.udp.mask.dst_port = 0xffff;
  return r;
}

// ---- the sending peer: a raw QP on the Ethernet port, frames as the parent's plan says ----

struct Info {
  uint32_t ok;
  char err[128];
};
struct Plan {
  uint32_t count;
  uint16_t dport[kMaxFrames];
};
struct Report {
  uint32_t ok;
  char err[128];
};

[[noreturn]] void run_sender() {
  Info info = {};
  PeerDevice d = peer_open_device(info, 256);
  ibv_qp* qp = raw_qp(d.pd, d.cq, kMaxFrames);
  if (!qp || raw_to_rts(qp, kEthPort)) peer_fail(info, "raw QP to RTS");
  static uint8_t frames[kMaxFrames * kFrameLen];
  ibv_mr* mr = ibv_reg_mr(d.pd, frames, sizeof frames, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) peer_fail(info, "reg_mr");
  info.ok = 1;
  peer_tell(info);
  Report rep = {};
  rep.ok = 1;
  for (;;) {
    Plan plan = peer_hear<Plan>();
    if (plan.count == 0) break;
    for (uint32_t i = 0; i < plan.count && i < kMaxFrames; ++i) {
      uint8_t* f = frames + i * kFrameLen;
      build_frame(f, i, plan.dport[i]);
      ibv_sge sge = {reinterpret_cast<uint64_t>(f), kFrameLen, mr->lkey};
      ibv_send_wr w = send_wr(i, IBV_WR_SEND, &sge, 1);
      if (post_one(qp, &w)) peer_fail(rep, "post_send");
      // Sent once its completion is in: the device has delivered it (or dropped it) by then.
      std::vector<ibv_wc> wc = poll_n(d.cq, 1);
      if (wc.size() != 1 || wc[0].status != IBV_WC_SUCCESS) peer_fail(rep, "send completion");
    }
    peer_tell(uint8_t{1});
  }
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  peer_finish(rep);
}
PeerRole g_sender("raw-sender", run_sender);

class RawPacket : public VerbsTest {
 protected:
  void SetUpObjects() override {
    cq = make_cq(512);
    ASSERT_NE(cq, nullptr);
    rb = make_buf(kMaxFrames * kFrameLen, IBV_ACCESS_LOCAL_WRITE, 0);
    races_before = uctlite::emudv_fns()->races_recorded();
  }
  void TearDown() override {
    EXPECT_EQ(uctlite::emudv_fns()->races_recorded(), races_before) << "the device saw a race";
    VerbsTest::TearDown();
  }
  // The peer sends frame i to destination port dports[i], each one completed before the next.
  void send_frames(Peer& peer, const std::vector<uint16_t>& dports) {
    Plan plan = {};
    plan.count = static_cast<uint32_t>(dports.size());
    for (size_t i = 0; i < dports.size(); ++i) plan.dport[i] = dports[i];
    ASSERT_TRUE(peer.send(&plan, sizeof plan));
    peer.expect_ready();
  }
  void end_peer(Peer& peer) {
    Plan done = {};
    ASSERT_TRUE(peer.send(&done, sizeof done));
    Report rep = {};
    peer.finish(&rep, kDeadline);
  }
  // The UDP rule on qp, then the sending peer started.
  ibv_flow* steer_then_start(ibv_qp* qp, Peer& peer) {
    UdpRule r = udp_rule(kEthPort, kDport);
    ibv_flow* f = ibv_create_flow(qp, &r.attr);
    EXPECT_NE(f, nullptr) << errno;
    Info info = {};
    peer.start("raw-sender", &info);
    return f;
  }
  void post_receives(ibv_qp* qp, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      ibv_sge sge = rb.sge(i * kFrameLen, kFrameLen);
      ASSERT_EQ(post_recv(qp, i, &sge, 1), 0);
    }
  }

  ibv_cq* cq = nullptr;
  Buf rb;
  uint64_t races_before = 0;
};

TEST_F(RawPacket, OnlyEthernetPortsTakeOne) {
  ibv_qp* qp = raw_qp(pd, cq);
  ASSERT_NE(qp, nullptr) << errno;
  ibv_qp_attr a = {};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = kIbPort;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
  // No addresses, keys or PSNs: an RTR with an address vector is refused.
  a.port_num = kEthPort;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV), EINVAL);
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
  EXPECT_EQ(qp_state(qp), IBV_QPS_RTS);
  UdpRule r = udp_rule(kIbPort, kDport);
  errno = 0;
  EXPECT_EQ(ibv_create_flow(qp, &r.attr), nullptr);
  EXPECT_EQ(errno, EINVAL);  // a rule on the InfiniBand port
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(RawPacket, FlowErrors) {
  ibv_qp* qp = raw_qp(pd, cq);
  ASSERT_NE(qp, nullptr);
  ibv_qp* rc = make_qp(cq, cq);
  ibv_qp* ud = make_qp_of(IBV_QPT_UD, cq, cq);
  ASSERT_TRUE(rc && ud);
  UdpRule r = udp_rule(kEthPort, kDport);
  auto refused = [&](ibv_qp* q, UdpRule rule) {
    errno = 0;
    ibv_flow* f = ibv_create_flow(q, &rule.attr);
    if (f) ibv_destroy_flow(f);
    return f ? 0 : errno;
  };
  EXPECT_EQ(refused(rc, r), EINVAL);      // not a raw packet QP
  EXPECT_EQ(refused(ud, r), EOPNOTSUPP);  // UD steering: not done
  UdpRule bad = r;
  bad.udp.size = sizeof bad.udp - 4;  // a spec size that is not the spec's
  EXPECT_EQ(refused(qp, bad), EINVAL);
  bad = r;
  bad.udp.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
  EXPECT_EQ(refused(qp, bad), EOPNOTSUPP);  // tunnels: not steered by
  bad = r;
  bad.attr.comp_mask = 1;
  EXPECT_EQ(refused(qp, bad), EINVAL);
  bad = r;
  bad.attr.type = IBV_FLOW_ATTR_SNIFFER;  // sniffers take no specs
  EXPECT_EQ(refused(qp, bad), EINVAL);
  ibv_flow* f = ibv_create_flow(qp, &r.attr);
  ASSERT_NE(f, nullptr) << errno;
  EXPECT_EQ(ibv_destroy_qp(qp), EBUSY);  // a rule steers to it
  EXPECT_EQ(ibv_destroy_flow(f), 0);
  EXPECT_EQ(ibv_destroy_flow(f), EINVAL);  // destroyed twice
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

// A peer's frames reach only the QP whose rule matches them: the frame to another UDP port
// reaches nobody, and the QP without rules gets nothing.
TEST_F(RawPacket, RulesSteerAnotherProcesssFrames) {
  ibv_qp* a = raw_qp(pd, cq);
  ibv_qp* b = raw_qp(pd, cq);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(raw_to_rts(a, kEthPort), 0);
  ASSERT_EQ(raw_to_rts(b, kEthPort), 0);
  post_receives(a, 8);
  post_receives(b, 8);
  Peer peer;
  ibv_flow* f = steer_then_start(a, peer);
  ASSERT_TRUE(f && !HasFatalFailure());
  send_frames(peer, {kDport, kDport + 1, kDport});
  end_peer(peer);
  std::vector<ibv_wc> wc = drain(cq);
  ASSERT_EQ(wc.size(), 2u) << "the frame to port " << kDport + 1 << " must reach nobody";
  for (const ibv_wc& w : wc) {
    EXPECT_EQ(w.status, IBV_WC_SUCCESS);
    EXPECT_EQ(w.opcode, IBV_WC_RECV);
    EXPECT_EQ(w.qp_num, a->qp_num);
    EXPECT_EQ(w.byte_len, kFrameLen);
  }
  uint8_t want[kFrameLen];
  build_frame(want, 0, kDport);
  EXPECT_EQ(std::memcmp(rb.p + wc[0].wr_id * kFrameLen, want, kFrameLen), 0);
  build_frame(want, 2, kDport);
  EXPECT_EQ(std::memcmp(rb.p + wc[1].wr_id * kFrameLen, want, kFrameLen), 0);
  EXPECT_EQ(ibv_destroy_flow(f), 0);
  EXPECT_EQ(ibv_destroy_qp(a), 0);
  EXPECT_EQ(ibv_destroy_qp(b), 0);
}

// RSS: frames from 32 source addresses spread over the WQs of a 4-entry table, each on at least
// two WQs, and every frame lands on the same WQ when it is sent again.
TEST_F(RawPacket, RssSpreadsFlowsOverWqsDeterministically) {
  constexpr uint32_t kWqs = 4, kFrames = 32;
  ibv_cq* cq2 = make_cq(512);
  ASSERT_NE(cq2, nullptr);
  // Receive k of WQ i lands at slot i * 2 * kFrames + k (its wr_id): the payload tells the frame.
  Buf wb = make_buf(kWqs * 2 * kFrames * kFrameLen, IBV_ACCESS_LOCAL_WRITE, 0);
  std::vector<ibv_wq*> wqs;
  for (uint32_t i = 0; i < kWqs; ++i) {
    ibv_wq_init_attr wa = {};
    wa.wq_type = IBV_WQT_RQ;
    wa.max_wr = 2 * kFrames;
    wa.max_sge = 1;
    wa.pd = pd;
    wa.cq = i % 2 ? cq2 : cq;
    ibv_wq* wq = ibv_create_wq(ctx, &wa);
    ASSERT_NE(wq, nullptr) << errno;
    ibv_wq_attr m = {};
    m.attr_mask = IBV_WQ_ATTR_STATE;
    m.wq_state = IBV_WQS_RDY;
    ASSERT_EQ(ibv_modify_wq(wq, &m), 0);
    for (uint32_t k = 0; k < 2 * kFrames; ++k) {
      uint64_t slot = i * 2 * kFrames + k;
      ibv_sge sge = wb.sge(slot * kFrameLen, kFrameLen);
      ibv_recv_wr rw = {slot, nullptr, &sge, 1};
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_wq_recv(wq, &rw, &bad), 0);
    }
    wqs.push_back(wq);
  }
  ibv_rwq_ind_table_init_attr ta = {2, wqs.data(), 0};
  ibv_rwq_ind_table* table = ibv_create_rwq_ind_table(ctx, &ta);
  ASSERT_NE(table, nullptr) << errno;
  uint8_t key[40];
  for (uint32_t i = 0; i < 40; ++i) key[i] = static_cast<uint8_t>(i * 37 + 11);
  ibv_qp_init_attr_ex xa = {};
  xa.qp_type = IBV_QPT_RAW_PACKET;
  xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  xa.pd = pd;
  xa.rwq_ind_tbl = table;
  xa.rx_hash_conf = {IBV_RX_HASH_FUNC_TOEPLITZ, 40, key,
                     IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4};
  ibv_qp* rss = ibv_create_qp_ex(ctx, &xa);
  ASSERT_NE(rss, nullptr) << errno;
  Peer peer;
  ibv_flow* f = steer_then_start(rss, peer);
  ASSERT_TRUE(f && !HasFatalFailure());
  std::map<uint32_t, uint32_t> wq_of_frame[2];  // per round: frame -> the WQ that received it
  for (int round = 0; round < 2; ++round) {
    send_frames(peer, std::vector<uint16_t>(kFrames, kDport));
    std::vector<ibv_wc> got = drain(cq);
    for (const ibv_wc& w : drain(cq2)) got.push_back(w);
    ASSERT_EQ(got.size(), kFrames);
    std::set<uint32_t> used;
    for (const ibv_wc& w : got) {
      ASSERT_EQ(w.status, IBV_WC_SUCCESS);
      ASSERT_EQ(w.byte_len, kFrameLen);
      uint32_t frame = wb.p[w.wr_id * kFrameLen + kFrameLen - 1];
      EXPECT_EQ(wq_of_frame[round].count(frame), 0u) << "frame " << frame << " twice";
      wq_of_frame[round][frame] = w.qp_num;
      used.insert(w.qp_num);
    }
    EXPECT_EQ(wq_of_frame[round].size(), kFrames);
    EXPECT_GE(used.size(), 2u) << "32 flows all on one WQ";
  }
  EXPECT_EQ(wq_of_frame[0], wq_of_frame[1]) << "a flow moved to another WQ";
  end_peer(peer);
  EXPECT_EQ(ibv_destroy_flow(f), 0);
  EXPECT_EQ(ibv_destroy_qp(rss), 0);
  EXPECT_EQ(ibv_destroy_rwq_ind_table(table), 0);
  for (ibv_wq* wq : wqs) EXPECT_EQ(ibv_destroy_wq(wq), 0);
}

}  // namespace
}  // namespace vt
