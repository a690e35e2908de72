// SPDX-License-Identifier: BSD-2-Clause
// Sweep cases of the device family: the list, names, GUID and index, sysfs reads, open/close, and
// the queries of device, port, GID and P_Key (good and out-of-range arguments).
#include <unistd.h>

#include <cstring>
#include <string>

#include "sweep_case.h"

namespace sweep {
namespace {

using QueryPortFn = int(ibv_context*, uint8_t, ibv_port_attr*);
using QueryGidExFn = int(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t, size_t);
using QueryGidTableFn = ssize_t(ibv_context*, ibv_gid_entry*, size_t, uint32_t, size_t);
// Private to rdma-core (driver.h), yet ibv_devinfo imports it: 0 IB/RoCE v1, 1 RoCE v2.
extern "C" int ibv_query_gid_type(ibv_context*, uint8_t, unsigned, int*);
// Exported since IBVERBS_1.0, declared in rdma-core's driver.h only.
extern "C" const char* ibv_get_sysfs_path(void);
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

void device_list(Env& env) {
  int n = -1;
  ibv_device** l = ibv_get_device_list(&n);
  ASSERT_NE(l, nullptr);
  int emu = 0;
  for (int i = 0; i < n; ++i) emu += std::strncmp(ibv_get_device_name(l[i]), "emu", 3) == 0;
  EXPECT_GE(emu, 1);
  EXPECT_EQ(l[n], nullptr);
  ibv_free_device_list(l);
  EXPECT_NE(ibv_get_device_list(nullptr), nullptr);  // num_devices may be NULL (leaked on purpose)
  EXPECT_STREQ(ibv_get_device_name(env.dev), "emu0");
}

void device_guid_index(Env& env) {
  EXPECT_NE(ibv_get_device_guid(env.dev), 0u);
  EXPECT_GE(ibv_get_device_index(env.dev), 0);
}

void sysfs_files(Env& env) {
  const char* sysfs = ibv_get_sysfs_path();
  ASSERT_NE(sysfs, nullptr);
  char buf[64] = {};
  std::string dir = std::string(sysfs) + "/class/infiniband/" + ibv_get_device_name(env.dev);
  EXPECT_GT(ibv_read_sysfs_file(dir.c_str(), "node_type", buf, sizeof buf), 0);
  EXPECT_EQ(std::strncmp(buf, "1:", 2), 0) << buf;  // a CA
  EXPECT_LT(ibv_read_sysfs_file(dir.c_str(), "no_such_attribute", buf, sizeof buf), 0);
}

void open_close(Env& env) {
  ibv_context* c = ibv_open_device(env.dev);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->device, env.dev);
  EXPECT_EQ(ibv_close_device(c), 0);
}

void query_device(Env& env) {
  ibv_device_attr a = {};
  EXPECT_EQ(ibv_query_device(env.ctx, &a), 0);
  EXPECT_EQ(a.vendor_id, 0xffffffu);
  EXPECT_GE(a.phys_port_cnt, 1);
  EXPECT_GT(a.max_qp, 0);
}

void query_port(Env& env) {
  auto* fn = exported<QueryPortFn>("ibv_query_port", "IBVERBS_1.1");
  ASSERT_NE(fn, nullptr);
  ibv_port_attr pa = {};
  EXPECT_EQ(fn(env.ctx, 1, &pa), 0);
  EXPECT_NE(pa.state, 0);
  EXPECT_EQ(fn(env.ctx, 0, &pa), EINVAL);
  EXPECT_EQ(fn(env.ctx, 200, &pa), EINVAL);
  EXPECT_EQ(ibv_query_port(env.ctx, 1, &pa), 0);  // the inline path (verbs_context query_port)
  EXPECT_EQ(ibv_query_port(env.ctx, 0, &pa), EINVAL);
}

void query_gid(Env& env) {
  ibv_gid g = {};
  EXPECT_EQ(ibv_query_gid(env.ctx, 1, 0, &g), 0);
  EXPECT_NE(g.global.interface_id, 0u);
  EXPECT_EQ(ibv_query_gid(env.ctx, 1, 100000, &g), -1);
  EXPECT_EQ(ibv_query_gid(env.ctx, 200, 0, &g), -1);
}

void query_gid_ex(Env& env) {
  auto* fn = exported<QueryGidExFn>("_ibv_query_gid_ex", "IBVERBS_1.11");
  ASSERT_NE(fn, nullptr);
  ibv_gid_entry e = {};
  EXPECT_EQ(fn(env.ctx, 1, 0, &e, 0, sizeof e), 0);
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(fn(env.ctx, 1, 0, &e, 1, sizeof e), EINVAL);       // no flags are defined
  EXPECT_EQ(fn(env.ctx, 1, 100000, &e, 0, sizeof e), EINVAL);  // past the table
  EXPECT_EQ(fn(env.ctx, 200, 0, &e, 0, sizeof e), EINVAL);
  EXPECT_EQ(ibv_query_gid_ex(env.ctx, 1, 0, &e, 0), 0);
}

void query_gid_table(Env& env) {
  auto* fn = exported<QueryGidTableFn>("_ibv_query_gid_table", "IBVERBS_1.11");
  ASSERT_NE(fn, nullptr);
  ibv_gid_entry t[512] = {};
  ssize_t n = fn(env.ctx, t, 512, 0, sizeof t[0]);
  EXPECT_GE(n, 1);
  EXPECT_EQ(fn(env.ctx, t, 512, 1, sizeof t[0]), -EINVAL);  // no flags are defined
  EXPECT_EQ(ibv_query_gid_table(env.ctx, t, 512, 0), n);
}

void query_gid_type(Env& env) {
  int type = -1;
  EXPECT_EQ(ibv_query_gid_type(env.ctx, 1, 0, &type), 0);
  EXPECT_TRUE(type == 0 || type == 1) << type;
  EXPECT_EQ(ibv_query_gid_type(env.ctx, 1, 100000, &type), -1);
}

void query_pkey(Env& env) {
  __be16 pkey = 0;
  EXPECT_EQ(ibv_query_pkey(env.ctx, 1, 0, &pkey), 0);
  EXPECT_EQ(pkey, htobe16(0xffff));
  EXPECT_EQ(ibv_query_pkey(env.ctx, 1, 100000, &pkey), -1);
  EXPECT_EQ(ibv_get_pkey_index(env.ctx, 1, htobe16(0xffff)), 0);
  EXPECT_LT(ibv_get_pkey_index(env.ctx, 1, htobe16(0x1234)), 0);
  EXPECT_LT(ibv_get_pkey_index(env.ctx, 200, htobe16(0xffff)), 0);  // no such port
}

}  // namespace

std::vector<Case> device_cases() {
  return {
      {"ibv_get_device_list", device_list, nullptr},
      {"ibv_free_device_list", device_list, nullptr},
      {"ibv_get_device_name", device_list, nullptr},
      {"ibv_get_device_guid", device_guid_index, nullptr},
      {"ibv_get_device_index", device_guid_index, nullptr},
      {"ibv_get_sysfs_path", sysfs_files, nullptr},
      {"ibv_read_sysfs_file", sysfs_files, nullptr},
      {"ibv_open_device", open_close, nullptr},
      {"ibv_close_device", open_close, nullptr},
      {"ibv_query_device", query_device, nullptr},
      {"ibv_query_port", query_port, nullptr},
      {"ibv_query_gid", query_gid, nullptr},
      {"_ibv_query_gid_ex", query_gid_ex, nullptr},
      {"_ibv_query_gid_table", query_gid_table, nullptr},
      {"ibv_query_gid_type", query_gid_type, nullptr},
      {"ibv_query_pkey", query_pkey, nullptr},
      {"ibv_get_pkey_index", query_pkey, nullptr},
  };
}

}  // namespace sweep
