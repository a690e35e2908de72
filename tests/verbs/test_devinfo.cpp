// SPDX-License-Identifier: BSD-2-Clause
// What the unmodified ibv_devinfo prints about emu0 agrees with ibv_query_device / ibv_query_port
// in this process (ibv_devinfo runs as a child and inherits the preload).
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "verbs_fixture.h"

namespace vt {
namespace {

// "\tkey:\t\t\tvalue" lines of ibv_devinfo -v, first occurrence of each key.
std::map<std::string, std::string> devinfo() {
  std::map<std::string, std::string> kv;
  FILE* f = popen("ibv_devinfo -v -d emu0 2>&1", "r");
  if (!f) return kv;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    std::string s(line);
    size_t colon = s.find(':');
    if (colon == std::string::npos) continue;
    std::string key = s.substr(0, colon);
    key.erase(0, key.find_first_not_of(" \t"));
    std::string val = s.substr(colon + 1);
    val.erase(0, val.find_first_not_of(" \t"));
    val.erase(val.find_last_not_of(" \t\n") + 1);
    kv.emplace(key, val);
  }
  pclose(f);
  return kv;
}

class Devinfo : public VerbsTest {};

TEST_F(Devinfo, AgreesWithQueryDeviceAndPort) {
  auto kv = devinfo();
  ASSERT_EQ(kv["hca_id"], "emu0") << "ibv_devinfo did not describe emu0";
  ibv_device_attr a;
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  auto num = [&](const char* k) { return std::stoull(kv.at(k), nullptr, 0); };
  // The attributes ibv_devinfo prints under their own names.
  const std::pair<const char*, uint64_t> same_name[] = {{"max_qp", a.max_qp},
                                                        {"max_qp_wr", a.max_qp_wr},
                                                        {"max_sge", a.max_sge},
                                                        {"max_cq", a.max_cq},
                                                        {"max_cqe", a.max_cqe},
                                                        {"max_mr", a.max_mr},
                                                        {"max_mr_size", a.max_mr_size},
                                                        {"max_pd", a.max_pd},
                                                        {"max_qp_rd_atom", a.max_qp_rd_atom},
                                                        {"phys_port_cnt", a.phys_port_cnt},
                                                        {"vendor_part_id", a.vendor_part_id},
                                                        {"vendor_id", a.vendor_id}};
  for (const auto& [key, value] : same_name) EXPECT_EQ(num(key), value) << key;
  EXPECT_EQ(kv["atomic_cap"], "ATOMIC_HCA (1)");
  char guid[32];
  uint64_t g = be64toh(a.node_guid);
  std::snprintf(guid, sizeof guid, "%04x:%04x:%04x:%04x", unsigned(g >> 48),
                unsigned(g >> 32) & 0xffff, unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
  EXPECT_EQ(kv["node_guid"], guid);
  ibv_port_attr p;
  ASSERT_EQ(ibv_query_port(ctx, 1, &p), 0);
  EXPECT_EQ(kv["state"], "PORT_ACTIVE (4)");
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(num("port_lid"), p.lid);
  EXPECT_EQ(kv["link_layer"], "InfiniBand");
  EXPECT_EQ(num("max_msg_sz"), p.max_msg_sz);
}

// rdma-core's test_device refuses vendor_id 0 and wants phys_port_cnt_ex to equal phys_port_cnt
// below 256 ports; UCX drives a Mellanox vendor id through mlx5dv, which emu0 is not.
TEST_F(Devinfo, VendorIsSetAndNotMellanoxAndExtendedPortCountAgrees) {
  ibv_device_attr_ex ex = {};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ex), 0);
  EXPECT_NE(ex.orig_attr.vendor_id, 0u);
  EXPECT_NE(ex.orig_attr.vendor_id, 0x02c9u);
  EXPECT_EQ(ex.phys_port_cnt_ex, ex.orig_attr.phys_port_cnt);
}

}  // namespace
}  // namespace vt
