// SPDX-License-Identifier: BSD-2-Clause
// Raw packet steering's pure parts (emu/raw.h): the Toeplitz hash against Microsoft's published
// verification vectors (the key rdma-core's RSS test uses), frame parsing and rule matching.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "emu/raw.h"

using namespace emu;

namespace {

const uint8_t kMsKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                            0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                            0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                            0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

// Eth | IPv4 | UDP from src to dst, with the given ports.
std::vector<uint8_t> udp4(const uint8_t src[4], const uint8_t dst[4], uint16_t sport,
                          uint16_t dport) {
  std::vector<uint8_t> f(14 + 20 + 8 + 4, 0);
  const uint8_t dmac[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};
  std::memcpy(f.data(), dmac, 6);
  f[12] = 0x08;
  f[14] = 0x45;
  f[14 + 8] = 64;
  f[14 + 9] = 17;
  std::memcpy(&f[14 + 12], src, 4);
  std::memcpy(&f[14 + 16], dst, 4);
  f[34] = sport >> 8;
  f[35] = sport & 0xff;
  f[36] = dport >> 8;
  f[37] = dport & 0xff;
  return f;
}

TEST(RawSteering, ToeplitzMatchesMicrosoftVectors) {
  // Destination 161.142.100.80:1766, source 66.9.149.187:2794: IPv4 0x323e8fc2, with ports
  // 0x51ccc178. Input order: source address, destination address, source port, destination port.
  const uint8_t in[12] = {66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6};
  EXPECT_EQ(toeplitz(kMsKey, 40, in, 8), 0x323e8fc2u);
  EXPECT_EQ(toeplitz(kMsKey, 40, in, 12), 0x51ccc178u);
}

TEST(RawSteering, RssHashTakesTheNamedFields) {
  const uint8_t src[4] = {66, 9, 149, 187}, dst[4] = {161, 142, 100, 80};
  auto f = udp4(src, dst, 2794, 1766);
  FrameKey key;
  uint8_t layers = parse_frame(f.data(), static_cast<uint32_t>(f.size()), &key);
  ASSERT_EQ(layers, kLayerEth | kLayerIpv4 | kLayerUdp);
  RssSlot rss{};
  std::memcpy(rss.key, kMsKey, 40);
  rss.key_len = 40;
  rss.fields = kRssSrcIpv4 | kRssDstIpv4;
  EXPECT_EQ(rss_hash(rss, key, layers), 0x323e8fc2u);
  rss.fields |= kRssSrcPortUdp | kRssDstPortUdp;
  EXPECT_EQ(rss_hash(rss, key, layers), 0x51ccc178u);
  rss.fields = kRssSrcPortTcp | kRssDstPortTcp;  // a UDP frame has no TCP ports: nothing hashed
  EXPECT_EQ(rss_hash(rss, key, layers), 0u);
}

TEST(RawSteering, RulesMatchByMaskedFieldsAndLayers) {
  const uint8_t src[4] = {1, 1, 1, 1}, dst[4] = {2, 2, 2, 2};
  auto f = udp4(src, dst, 1234, 5678);
  FrameKey key;
  uint8_t layers = parse_frame(f.data(), static_cast<uint32_t>(f.size()), &key);
  FlowRule rule{};
  rule.needs = kLayerIpv4;
  std::memcpy(rule.value.dst_ip, dst, 4);
  std::memset(rule.mask.dst_ip, 0xff, 4);
  EXPECT_TRUE(flow_matches(rule, key, layers));
  rule.value.dst_ip[3] = 3;
  EXPECT_FALSE(flow_matches(rule, key, layers));
  rule.mask.dst_ip[3] = 0;  // the last byte masked off: any value
  rule.value.dst_ip[3] = 0;
  EXPECT_TRUE(flow_matches(rule, key, layers));
  rule.needs |= kLayerTcp;  // a TCP rule does not take a UDP frame
  EXPECT_FALSE(flow_matches(rule, key, layers));
  EXPECT_EQ(parse_frame(f.data(), 13, &key), 0);  // shorter than an Ethernet header
}

}  // namespace
