// SPDX-License-Identifier: BSD-2-Clause
// The file-system view of emu devices: the /dev/infiniband nodes and the /sys entries that real
// stacks (UCX, librdmacm, libibverbs, pyverbs) read about a device, answered from the segment with
// the values ibv_query_device/port/gid give. Nothing is created on disk; file_view.cpp routes the
// libc path calls here. See docs/design/rdma-cm-and-presence.md, "Device presence".
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace emu::prov::view {

// The cheap test every interposed path call makes first: can `p` name something of the view?
// Everything else goes to libc untouched.
inline bool may_be_view_path(const char* p) {
  if (!p || p[0] != '/') return false;
  if (p[1] == 'd') return std::strncmp(p, "/dev/infiniband", 15) == 0;
  if (p[1] != 's' || std::strncmp(p, "/sys/", 5) != 0) return false;
  return std::strncmp(p + 5, "class/infiniband", 16) == 0 ||
         std::strncmp(p + 5, "class/misc/rdma_cm", 18) == 0 ||
         std::strncmp(p + 5, "devices/virtual/rdmaemu", 23) == 0;
}

enum class Kind : uint8_t { dir, file, symlink, cdev };

// Which entry of the view a node is (the directories on the way to the view are `ancestor`).
enum class Id : uint8_t {
  ancestor,
  dev_ib,        // /dev/infiniband
  cm_cdev,       // /dev/infiniband/rdma_cm
  uverbs_cdev,   // /dev/infiniband/uverbs-<dev>
  class_ib,      // /sys/class/infiniband
  class_verbs,   // /sys/class/infiniband_verbs
  class_ucma,    // /sys/class/infiniband_ucma
  misc_rdma_cm,  // /sys/class/misc/rdma_cm
  class_link,    // /sys/class/infiniband{,_verbs}/<entry> -> the device's directory
  cm_attr,       // abi_version of the two directories above
  emu_root,      // /sys/devices/virtual/rdmaemu
  pdev,          // .../rdmaemu/<dev>: the device as a bus device (numa_node, vendor, net)
  pdev_attr,     // numa_node, vendor, device
  pdev_ib,       // <pdev>/infiniband
  pdev_verbs,    // <pdev>/infiniband_verbs
  pdev_net,      // <pdev>/net
  net_link,      // <pdev>/net/<netdev> -> /sys/class/net/<netdev>
  ibdev,         // <pdev>/infiniband/<dev>
  ibdev_attr,    // node_guid, fw_ver, ...
  device_link,   // <ibdev>/device, <uverbs>/device -> <pdev>
  ports,         // <ibdev>/ports
  port,          // <ibdev>/ports/<n>
  port_attr,     // state, lid, rate, ...
  port_table,    // gids, pkeys, gid_attrs/types, gid_attrs/ndevs
  gid_attrs,     // <port>/gid_attrs
  table_entry,   // one entry of a port table
  uverbs,        // <pdev>/infiniband_verbs/uverbs-<dev>
  uverbs_attr,   // ibdev, abi_version, dev
};

struct Node {
  Id id = Id::ancestor;
  uint8_t dev = 0;
  uint8_t port = 0;
  uint16_t index = 0;
  std::string name;  // the last component (an attribute's or a table's name)
  std::string path;  // canonical, no trailing slash
  Kind kind() const;
  // A directory the host may also have (its real entries stay, ours join them).
  bool may_exist_for_real() const;
};

enum class Where : uint8_t { host, view, redirected };

struct Lookup {
  Where where = Where::host;
  int err = 0;            // view: 0, or the errno the path gets (ENOENT, ENOTDIR, ELOOP)
  Node node;              // view
  std::string host_path;  // redirected: a host path reached through one of our links
};

// Resolves an absolute path: components, "." and "..", and the view's symbolic links (the last one
// too when `follow_last`). Host: the path is not ours (use it untouched).
Lookup lookup(const char* path, bool follow_last);

// The contents of a file node (as the kernel prints it, newline included), or an errno.
int file_content(const Node& n, std::string* out);
std::string link_target(const Node& n);
dev_t cdev_number(const Node& n);

struct Entry {
  std::string name;
  unsigned char type;  // DT_*
};
std::vector<Entry> children(const Node& n);

}  // namespace emu::prov::view
