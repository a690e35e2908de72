// SPDX-License-Identifier: BSD-2-Clause
// The packet wire's pure parts: fault rules (text, decision), the packet view, frames and the
// capture file's header.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "emu/faults.h"
#include "emu/net.h"
#include "wire/frame.h"
#include "wire/packet.h"
#include "wire/pcap.h"

namespace {

using namespace emu;

TEST(WireFaults, ParseAndFormatRoundTrip) {
  FaultRules r;
  std::string err;
  ASSERT_EQ(faults_parse("seed=7; drop:p=0.25,op=write ;dup:nth=3,times=2,qp=0x12,dev=1", &r, &err),
            Status::ok)
      << err;
  EXPECT_EQ(r.seed, 7u);
  ASSERT_EQ(r.n, 2u);
  EXPECT_EQ(r.rule[0].kind, kFaultDrop);
  EXPECT_EQ(r.rule[0].op, kFopWrite);
  EXPECT_EQ(r.rule[0].threshold, 1u << 30);
  EXPECT_EQ(r.rule[1].kind, kFaultDup);
  EXPECT_EQ(r.rule[1].nth, 3u);
  EXPECT_EQ(r.rule[1].times, 2u);
  EXPECT_EQ(r.rule[1].qpn, 0x12u);
  EXPECT_EQ(r.rule[1].any_dev, 0);
  FaultRules back;
  ASSERT_EQ(faults_parse(faults_format(r), &back, &err), Status::ok) << err;
  EXPECT_EQ(faults_format(back), faults_format(r));
}

TEST(WireFaults, RejectsBadText) {
  FaultRules r;
  std::string err;
  EXPECT_EQ(faults_parse("lose:p=0.1", &r, &err), Status::invalid);
  EXPECT_NE(err.find("lose"), std::string::npos);
  EXPECT_EQ(faults_parse("drop:p=1.5", &r, &err), Status::invalid);
  EXPECT_EQ(faults_parse("drop:op=nothing", &r, &err), Status::invalid);
  EXPECT_EQ(faults_parse("seed=x", &r, &err), Status::invalid);
}

TEST(WireFaults, DecisionIsAPureFunctionOfSeedPacketAndRule) {
  FaultRules r;
  std::string err;
  ASSERT_EQ(faults_parse("seed=3;drop:p=0.1", &r, &err), Status::ok);
  int drops = 0;
  for (uint32_t psn = 0; psn < 20000; ++psn) {
    PacketKey k{0, 0x42, psn, 0, psn + 1, kFopSend};
    FaultKind f = fault_decide(r, k);
    EXPECT_EQ(f, fault_decide(r, k));  // same inputs, same answer
    drops += f == kFaultDrop;
  }
  EXPECT_GT(drops, 1700);  // 10% of 20000, within a wide margin
  EXPECT_LT(drops, 2300);
  // Another seed gives another pattern; a retransmission (attempt 1) is decided afresh.
  FaultRules other = r;
  other.seed = 4;
  int same = 0, again = 0;
  for (uint32_t psn = 0; psn < 2000; ++psn) {
    PacketKey k{0, 0x42, psn, 0, psn + 1, kFopSend};
    PacketKey retry = k;
    retry.attempt = 1;
    same += fault_decide(r, k) == fault_decide(other, k);
    again += fault_decide(r, k) == kFaultDrop && fault_decide(r, retry) == kFaultDrop;
  }
  EXPECT_LT(same, 2000);
  EXPECT_LT(again, 100);  // independent: about 2000 x 0.1 x 0.1; the same draw would be ~200
}

TEST(WireFaults, NthMatchesOnePacketForItsFirstTransmissions) {
  FaultRules r;
  std::string err;
  ASSERT_EQ(faults_parse("corrupt:nth=5,times=2,op=ack;drop:nth=5,qp=9", &r, &err), Status::ok);
  PacketKey k{0, 9, 100, 0, 5, kFopSend};
  EXPECT_EQ(fault_decide(r, k), kFaultDrop);
  k.attempt = 1;
  EXPECT_EQ(fault_decide(r, k), kFaultNone);  // times=1 (default)
  k.op = kFopAck;
  EXPECT_EQ(fault_decide(r, k), kFaultCorrupt);
  k.attempt = 2;
  EXPECT_EQ(fault_decide(r, k), kFaultNone);
  k = PacketKey{0, 8, 100, 0, 5, kFopSend};
  EXPECT_EQ(fault_decide(r, k), kFaultNone);  // another connection
}

// A worked IPv4 header (192.168.0.1 -> 192.168.0.199, UDP, 115 bytes): its checksum is 0xb861;
// with that in its field the header sums to all ones, so the checksum of it is 0.
TEST(WireChecksum, Ipv4HeaderChecksumOfAKnownHeader) {
  uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                   0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(emu::net::ipv4_checksum(h), 0xb861);
  h[10] = 0xb8, h[11] = 0x61;
  EXPECT_EQ(emu::net::ipv4_checksum(h), 0);
  const uint8_t odd[3] = {0x01, 0x02, 0x03};  // an odd last byte is a word's high byte
  EXPECT_EQ(emu::net::ones_sum(0, odd, 3), 0x0102u + 0x0300u);
}

TEST(WirePackets, OpcodesFollowTheIbta) {
  using namespace emu::wire;
  EXPECT_EQ(request_op(MsgKind::send, 0, 1), kSendOnly);
  EXPECT_EQ(request_op(MsgKind::send_imm, 2, 3), kSendLastImm);
  EXPECT_EQ(request_op(MsgKind::send, 1, 3), kSendMiddle);
  EXPECT_EQ(request_op(MsgKind::write, 0, 2), kWriteFirst);
  EXPECT_EQ(request_op(MsgKind::write_imm, 0, 1), kWriteOnlyImm);
  EXPECT_EQ(request_op(MsgKind::send_inv, 0, 1), kSendOnlyInv);
  EXPECT_EQ(read_response_op(0, 1), kReadRespOnly);
  EXPECT_EQ(read_response_op(3, 4), kReadRespLast);
  EXPECT_EQ(mtu_bytes(3), 1024u);
}

TEST(WireFrames, Crc32IsTheStandardOne) {
  const char* check = "123456789";
  EXPECT_EQ(wire::crc32(0, reinterpret_cast<const uint8_t*>(check), 9), 0xcbf43926u);
}

TEST(WireFrames, LengthsAndPad) {
  wire::Frame f{};
  uint8_t payload[5] = {1, 2, 3, 4, 5};
  f.opcode = wire::kTrRc | wire::kWriteOnly;
  f.payload = payload;
  f.payload_len = 5;
  uint8_t out[256];
  // InfiniBand: LRH 8, BTH 12, RETH 16, payload 5 + pad 3, ICRC 4, VCRC 2.
  size_t n = wire::build_frame(f, out);
  EXPECT_EQ(n, 8u + 12 + 16 + 8 + 4 + 2);
  EXPECT_EQ((out[9] >> 4) & 3, 3);              // BTH pad count
  EXPECT_EQ(((out[4] & 7) << 8 | out[5]), 12);  // LRH packet length in words, through the ICRC
  // RoCE v2 over IPv4: Ethernet 14, IPv4 20, UDP 8, then as above without LRH and VCRC.
  f.ethernet = true;
  f.src.gid[10] = f.src.gid[11] = f.dst.gid[10] = f.dst.gid[11] = 0xff;
  n = wire::build_frame(f, out);
  EXPECT_EQ(n, 14u + 20 + 8 + 12 + 16 + 8 + 4);
  EXPECT_EQ(out[12], 0x08);
  EXPECT_EQ(out[36] << 8 | out[37], 4791);
}

TEST(WirePcap, FileHeaderHasASectionAndTwoInterfaces) {
  std::string h = wire::Pcap::file_header(128);
  ASSERT_EQ(h.size(), 28u + 20 + 20);
  uint32_t v;
  std::memcpy(&v, h.data(), 4);
  EXPECT_EQ(v, 0x0a0d0d0au);
  uint16_t link;
  std::memcpy(&link, h.data() + 28 + 8, 2);
  EXPECT_EQ(link, 1);
  std::memcpy(&link, h.data() + 48 + 8, 2);
  EXPECT_EQ(link, 197);  // ERF, whose INFINIBAND records carry the LRH
}

}  // namespace
