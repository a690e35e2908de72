// SPDX-License-Identifier: BSD-2-Clause
// The view's tree (sysfs_view.h): which entries exist, where links point, and what files say. The
// device's directories mirror a real one's: /sys/class/infiniband/<dev> links to the device under
// its bus device (here /sys/devices/virtual/rdmaemu/<dev>), whose net/ holds the RoCE netdevs.
#include "sysfs_view.h"

#include <dirent.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "emu/port.h"
#include "verbs/provider.h"

namespace emu::prov::view {
namespace {

// The kernel's numbers: uverbs character devices (IB_UVERBS_MAJOR, minors from 192) and the misc
// device rdma_cm; the ABI versions librdmacm 44 and libibverbs 44 accept.
constexpr unsigned kUverbsMajor = 231, kUverbsMinorBase = 192, kMiscMajor = 10, kRdmaCmMinor = 58;
constexpr int kUcmaAbiVersion = 4, kUverbsAbiVersion = 1;
constexpr char kEmuRoot[] = "/sys/devices/virtual/rdmaemu";

const Header* hdr() {
  Segment* s = segment();
  return s ? s->hdr() : nullptr;
}

uint32_t num_devices() {
  const Header* h = hdr();
  return h ? h->num_devices : 0;
}

const char* dev_name(uint32_t dev) { return hdr()->devices[dev].name; }
const PortState& port_state_of(const Node& n) { return hdr()->devices[n.dev].ports[n.port - 1]; }

std::string uverbs_name(uint32_t dev) { return std::string("uverbs-") + dev_name(dev); }

// The netdevs of a device's RoCE ports, each once.
std::vector<std::string> netdevs(uint32_t dev) {
  std::vector<std::string> out;
  const DeviceState& d = hdr()->devices[dev];
  for (uint32_t p = 0; p < d.num_ports; ++p) {
    const PortState& ps = d.ports[p];
    if (ps.link_layer != kLinkLayerEthernet || !ps.ndev_name[0]) continue;
    std::string name(ps.ndev_name, strnlen(ps.ndev_name, sizeof ps.ndev_name));
    bool seen = false;
    for (const auto& o : out) seen |= o == name;
    if (!seen) out.push_back(name);
  }
  return out;
}

// The directories on the way to the view, and the view's top directories under them.
// The view's top directories; the directories above them (/dev, /sys, /sys/class, ...) are the
// host's, and only the way to ours.
struct TopEntry {
  const char* path;
  Id id;
};
constexpr TopEntry kTop[] = {
    {"/dev/infiniband", Id::dev_ib},
    {"/sys/class/infiniband", Id::class_ib},
    {"/sys/class/infiniband_verbs", Id::class_verbs},
    {"/sys/class/infiniband_ucma", Id::class_ucma},
    {"/sys/class/misc/rdma_cm", Id::misc_rdma_cm},
    {kEmuRoot, Id::emu_root},
};

// Whether `path` is a top directory (its id) or a directory above one (ancestor).
bool top_or_above(const std::string& path, Id* id) {
  for (const TopEntry& t : kTop) {
    size_t n = path.size();
    if (path == t.path) return *id = t.id, true;
    if (std::strncmp(t.path, path.c_str(), n) == 0 && t.path[n] == '/')
      return *id = Id::ancestor, true;
  }
  return false;
}

const char* const kIbdevAttrs[] = {"node_guid", "sys_image_guid", "fw_ver", "node_type",
                                   "node_desc", "hca_type",       "hw_rev", "board_id"};
const char* const kPortAttrs[] = {"state", "phys_state", "rate",           "lid",       "sm_lid",
                                  "sm_sl", "cap_mask",   "lid_mask_count", "link_layer"};
const char* const kPdevAttrs[] = {"numa_node", "vendor", "device"};
const char* const kUverbsAttrs[] = {"ibdev", "abi_version", "dev"};

void add(std::vector<Entry>& v, std::string name, Kind k) {
  unsigned char t = k == Kind::dir       ? DT_DIR
                    : k == Kind::file    ? DT_REG
                    : k == Kind::symlink ? DT_LNK
                                         : DT_CHR;
  v.push_back({std::move(name), t});
}
template <size_t N>
void add_all(std::vector<Entry>& v, const char* const (&names)[N]) {
  for (const char* s : names) add(v, s, Kind::file);
}
void add_per_device(std::vector<Entry>& v, bool uverbs, Kind k) {
  for (uint32_t d = 0; d < num_devices(); ++d) add(v, uverbs ? uverbs_name(d) : dev_name(d), k);
}

uint32_t table_len(const Node& n) {
  if (n.name == "pkeys") return 1;  // ibv_query_port's pkey_tbl_len
  return port_state_of(n).gid_tbl_len;
}

// Directories whose entries are all of one kind.
struct OneKind {
  Id parent, child;
};
constexpr OneKind kOneKind[] = {
    {Id::class_ucma, Id::cm_attr}, {Id::misc_rdma_cm, Id::cm_attr}, {Id::pdev_ib, Id::ibdev},
    {Id::pdev_verbs, Id::uverbs},  {Id::pdev_net, Id::net_link},    {Id::gid_attrs, Id::port_table},
};

// The node a directory's entry `name` is (its parent's fields carried on).
Node child_node(const Node& parent, const std::string& name) {
  Node c = parent;
  c.name = name;
  c.path = parent.path + "/" + name;
  auto dev_named = [&](const std::string& s) {
    for (uint32_t d = 0; d < num_devices(); ++d)
      if (s == dev_name(d) || s == uverbs_name(d)) return static_cast<uint8_t>(d);
    return uint8_t{0};
  };
  for (const OneKind& k : kOneKind)
    if (parent.id == k.parent) c.id = k.child;
  switch (parent.id) {
    case Id::ancestor:
      top_or_above(c.path, &c.id);
      break;
    case Id::dev_ib:
      c.id = name == "rdma_cm" ? Id::cm_cdev : Id::uverbs_cdev;
      c.dev = dev_named(name);
      break;
    case Id::class_ib:
    case Id::class_verbs:
      c.id = Id::class_link;
      c.dev = dev_named(name);
      c.index = parent.id == Id::class_verbs;
      break;
    case Id::emu_root:
      c.id = Id::pdev;
      c.dev = dev_named(name);
      break;
    case Id::pdev:
      c.id = name == "infiniband"         ? Id::pdev_ib
             : name == "infiniband_verbs" ? Id::pdev_verbs
             : name == "net"              ? Id::pdev_net
                                          : Id::pdev_attr;
      break;
    case Id::ibdev:
      c.id = name == "device" ? Id::device_link : name == "ports" ? Id::ports : Id::ibdev_attr;
      break;
    case Id::ports:
      c.id = Id::port;
      c.port = static_cast<uint8_t>(std::atoi(name.c_str()));
      break;
    case Id::port:
      c.id = name == "gid_attrs"                 ? Id::gid_attrs
             : name == "gids" || name == "pkeys" ? Id::port_table
                                                 : Id::port_attr;
      break;
    case Id::port_table:
      c.id = Id::table_entry;
      c.index = static_cast<uint16_t>(std::atoi(name.c_str()));
      c.name = parent.name;  // the entry's content depends on its table
      break;
    case Id::uverbs:
      c.id = name == "device" ? Id::device_link : Id::uverbs_attr;
      break;
    default:
      break;
  }
  return c;
}

enum class Step : uint8_t { view, host, missing };

// Whether `name` is in the directory `parent` (of the view or on the way to it).
Step step(const Node& parent, const std::string& name, Node* out) {
  if (parent.id == Id::ancestor) {
    Id id;
    if (!top_or_above(parent.path + "/" + name, &id)) return Step::host;
    *out = child_node(parent, name);
    return Step::view;
  }
  for (const Entry& e : children(parent))
    if (e.name == name) {
      *out = child_node(parent, name);
      return Step::view;
    }
  // Beside our entries, the host's own (a real device's) stay the host's.
  return parent.may_exist_for_real() ? Step::host : Step::missing;
}

std::deque<std::string> split(const std::string& path) {
  std::deque<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.emplace_back(path, i, j - i);
    i = j + 1;
  }
  return out;
}

std::string guid_text(uint64_t g) {
  char b[32];
  std::snprintf(b, sizeof b, "%04x:%04x:%04x:%04x\n", unsigned(g >> 48), unsigned(g >> 32) & 0xffff,
                unsigned(g >> 16) & 0xffff, unsigned(g) & 0xffff);
  return b;
}

// "100 Gb/sec (4X EDR)": the kernel's rate file from ibv_port_attr's width and speed codes.
std::string rate_text(const ibv_port_attr& a) {
  int lanes = a.active_width == 1   ? 1
              : a.active_width == 2 ? 4
              : a.active_width == 4 ? 8
              : a.active_width == 8 ? 12
                                    : 2;
  struct Speed {
    uint8_t code;
    int tenths;  // per lane, in 0.1 Gb/s
    const char* name;
  };
  constexpr Speed kSpeeds[] = {{1, 25, ""},        {2, 50, " DDR"},    {4, 100, " QDR"},
                               {8, 100, " FDR10"}, {16, 140, " FDR"},  {32, 250, " EDR"},
                               {64, 500, " HDR"},  {128, 1000, " NDR"}};
  Speed s = kSpeeds[0];
  for (const Speed& k : kSpeeds)
    if (k.code == a.active_speed) s = k;
  int rate = s.tenths * lanes;
  char b[64];
  std::snprintf(b, sizeof b, "%d%s Gb/sec (%dX%s)\n", rate / 10, rate % 10 ? ".5" : "", lanes,
                s.name);
  return b;
}

std::string gid_text(const uint8_t* g) {
  char b[48];
  int n = 0;
  for (int i = 0; i < 16; i += 2)
    n += std::snprintf(b + n, sizeof b - n, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
  return std::string(b) + "\n";
}

int port_attr_text(const Node& n, std::string* out) {
  ibv_port_attr a;
  if (port_attr_fill(n.dev, n.port, &a)) return ENOENT;
  static const char* const kStates[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  static const char* const kPhys[] = {
      "<unknown>",         "Sleep",   "Polling", "Disabled", "PortConfigurationTraining", "LinkUp",
      "LinkErrorRecovery", "Phy Test"};
  char b[96];
  const std::string& k = n.name;
  if (k == "state")
    std::snprintf(b, sizeof b, "%d: %s\n", a.state, kStates[a.state <= 5 ? a.state : 0]);
  else if (k == "phys_state")
    std::snprintf(b, sizeof b, "%u: %s\n", a.phys_state,
                  kPhys[a.phys_state <= 7 ? a.phys_state : 0]);
  else if (k == "rate")
    return *out = rate_text(a), 0;
  else if (k == "lid")
    std::snprintf(b, sizeof b, "0x%x\n", a.lid);
  else if (k == "sm_lid")
    std::snprintf(b, sizeof b, "0x%x\n", a.sm_lid);
  else if (k == "sm_sl")
    std::snprintf(b, sizeof b, "%u\n", a.sm_sl);
  else if (k == "lid_mask_count")
    std::snprintf(b, sizeof b, "%u\n", a.lmc);
  else if (k == "cap_mask")
    std::snprintf(b, sizeof b, "0x%08x\n", a.port_cap_flags);
  else
    std::snprintf(b, sizeof b, "%s\n",
                  a.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
  *out = b;
  return 0;
}

// One entry of gids, pkeys, gid_attrs/types or gid_attrs/ndevs. The kernel refuses to read the type
// or netdev of an empty GID entry, and the netdev of an InfiniBand port's: EINVAL.
int table_entry_text(const Node& n, std::string* out) {
  const PortState& ps = port_state_of(n);
  if (n.name == "pkeys") return *out = "0xffff\n", 0;
  if (n.name == "gids") return *out = gid_text(ps.gid[n.index]), 0;
  if (n.index >= ps.gid_count) return EINVAL;
  if (n.name == "types")
    return *out = ps.gid_type[n.index] == kGidTypeRoceV2 ? "RoCE v2\n" : "IB/RoCE v1\n", 0;
  if (ps.link_layer != kLinkLayerEthernet || !ps.ndev_name[0]) return EINVAL;
  *out = std::string(ps.ndev_name, strnlen(ps.ndev_name, sizeof ps.ndev_name)) + "\n";
  return 0;
}

std::string ibdev_attr_text(const Node& n) {
  ibv_device_attr a;
  device_attr_fill(n.dev, &a);
  const std::string& k = n.name;
  char b[96];
  if (k == "node_guid") return guid_text(be64toh(a.node_guid));
  if (k == "sys_image_guid") return guid_text(be64toh(a.sys_image_guid));
  if (k == "fw_ver") return std::string(a.fw_ver) + "\n";
  if (k == "node_type") return "1: CA\n";
  if (k == "node_desc") return std::string("rdmaemu ") + dev_name(n.dev) + "\n";
  if (k == "hw_rev") return std::snprintf(b, sizeof b, "0x%x\n", a.hw_ver), b;
  return "rdmaemu\n";  // hca_type, board_id
}

std::string pdev_attr_text(const Node& n) {
  ibv_device_attr a;
  device_attr_fill(n.dev, &a);
  char b[32];
  if (n.name == "numa_node") return "-1\n";  // a virtual device has no NUMA affinity
  // The PCI ids: an mlx5 personality's are a ConnectX's (UCX finds its part there), emu0's own
  // what ibv_query_device says.
  uint32_t vendor = config().personality_mlx5 ? kMellanoxPciVendor : a.vendor_id;
  std::snprintf(b, sizeof b, "0x%04x\n", n.name == "vendor" ? vendor : a.vendor_part_id);
  return b;
}

std::string uverbs_attr_text(const Node& n) {
  char b[64];
  if (n.name == "ibdev") return std::string(dev_name(n.dev)) + "\n";
  if (n.name == "abi_version") return std::to_string(kUverbsAbiVersion) + "\n";
  std::snprintf(b, sizeof b, "%u:%u\n", kUverbsMajor, kUverbsMinorBase + n.dev);
  return b;
}

}  // namespace

Kind Node::kind() const {
  switch (id) {
    case Id::cm_attr:
    case Id::pdev_attr:
    case Id::ibdev_attr:
    case Id::port_attr:
    case Id::table_entry:
    case Id::uverbs_attr:
      return Kind::file;
    case Id::class_link:
    case Id::net_link:
    case Id::device_link:
      return Kind::symlink;
    case Id::cm_cdev:
    case Id::uverbs_cdev:
      return Kind::cdev;
    default:
      return Kind::dir;
  }
}

bool Node::may_exist_for_real() const {
  return id == Id::ancestor || id == Id::dev_ib || id == Id::class_ib || id == Id::class_verbs ||
         id == Id::class_ucma || id == Id::misc_rdma_cm;
}

std::vector<Entry> children(const Node& n) {
  std::vector<Entry> v;
  switch (n.id) {
    case Id::dev_ib:
      add(v, "rdma_cm", Kind::cdev);
      add_per_device(v, true, Kind::cdev);
      break;
    case Id::class_ib:
      add_per_device(v, false, Kind::symlink);
      break;
    case Id::class_verbs:
      add_per_device(v, true, Kind::symlink);
      break;
    case Id::class_ucma:
    case Id::misc_rdma_cm:
      add(v, "abi_version", Kind::file);
      break;
    case Id::emu_root:
      add_per_device(v, false, Kind::dir);
      break;
    case Id::pdev:
      add_all(v, kPdevAttrs);
      add(v, "infiniband", Kind::dir);
      add(v, "infiniband_verbs", Kind::dir);
      if (!netdevs(n.dev).empty()) add(v, "net", Kind::dir);
      break;
    case Id::pdev_ib:
      add(v, dev_name(n.dev), Kind::dir);
      break;
    case Id::pdev_verbs:
      add(v, uverbs_name(n.dev), Kind::dir);
      break;
    case Id::pdev_net:
      for (auto& nd : netdevs(n.dev)) add(v, nd, Kind::symlink);
      break;
    case Id::ibdev:
      add_all(v, kIbdevAttrs);
      add(v, "device", Kind::symlink);
      add(v, "ports", Kind::dir);
      break;
    case Id::ports:
      for (uint32_t p = 1; p <= hdr()->devices[n.dev].num_ports; ++p)
        add(v, std::to_string(p), Kind::dir);
      break;
    case Id::port:
      add_all(v, kPortAttrs);
      add(v, "gids", Kind::dir);
      add(v, "gid_attrs", Kind::dir);
      add(v, "pkeys", Kind::dir);
      break;
    case Id::gid_attrs:
      add(v, "types", Kind::dir);
      add(v, "ndevs", Kind::dir);
      break;
    case Id::port_table:
      for (uint32_t i = 0; i < table_len(n); ++i) add(v, std::to_string(i), Kind::file);
      break;
    case Id::uverbs:
      add_all(v, kUverbsAttrs);
      add(v, "device", Kind::symlink);
      break;
    default:
      break;
  }
  return v;
}

Lookup lookup(const char* path, bool follow_last) {
  Lookup r;
  // A trailing slash names a directory: a link there is followed, as the kernel does.
  bool dir_only = path[0] && path[std::strlen(path) - 1] == '/';
  follow_last |= dir_only;
  std::deque<std::string> todo = split(path);
  std::vector<Node> done(1);  // the root, then each component's node
  // Whether the path the host would resolve differs from the one given: "..", "." or one of our
  // links resolved here (the host cannot resolve them through entries it does not have).
  bool rewritten = false;
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == "." || c == "..") {
      if (c == ".." && done.size() > 1) done.pop_back();
      rewritten = true;
      continue;
    }
    Node next;
    Step s = step(done.back(), c, &next);
    if (s == Step::missing) return r.where = Where::view, r.err = ENOENT, r;
    if (s == Step::host) {
      if (!rewritten) return r;  // the host's path, untouched
      r.where = Where::redirected;
      r.host_path = done.back().path + "/" + c;
      for (const auto& t : todo) r.host_path += "/" + t;
      return r;
    }
    bool last = todo.empty();
    if (next.kind() == Kind::symlink && (!last || follow_last)) {
      if (++links > 40) return r.where = Where::view, r.err = ELOOP, r;
      rewritten = true;
      std::string target = link_target(next);
      if (target[0] == '/') done.resize(1);
      auto parts = split(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    if (!last && next.kind() != Kind::dir) return r.where = Where::view, r.err = ENOTDIR, r;
    done.push_back(std::move(next));
  }
  if (done.back().id == Id::ancestor) {  // "/sys", "/dev": the host's
    if (!rewritten) return r;
    r.where = Where::redirected;
    r.host_path = done.size() == 1 ? "/" : done.back().path;
    return r;
  }
  r.where = Where::view;
  r.node = std::move(done.back());
  if (dir_only && r.node.kind() != Kind::dir) r.err = ENOTDIR;
  return r;
}

std::string link_target(const Node& n) {
  std::string dev = dev_name(n.dev);
  switch (n.id) {
    case Id::class_link:
      return std::string("../..") + (kEmuRoot + 4) + "/" + dev +
             (n.index ? "/infiniband_verbs/" + uverbs_name(n.dev) : "/infiniband/" + dev);
    case Id::device_link:
      return "../../../" + dev;
    default:
      return "/sys/class/net/" + n.name;  // net_link
  }
}

dev_t cdev_number(const Node& n) {
  return n.id == Id::cm_cdev ? makedev(kMiscMajor, kRdmaCmMinor)
                             : makedev(kUverbsMajor, kUverbsMinorBase + n.dev);
}

int file_content(const Node& n, std::string* out) {
  switch (n.id) {
    case Id::cm_attr:
      *out = std::to_string(kUcmaAbiVersion) + "\n";
      return 0;
    case Id::pdev_attr:
      *out = pdev_attr_text(n);
      return 0;
    case Id::ibdev_attr:
      *out = ibdev_attr_text(n);
      return 0;
    case Id::port_attr:
      return port_attr_text(n, out);
    case Id::table_entry:
      return table_entry_text(n, out);
    case Id::uverbs_attr:
      *out = uverbs_attr_text(n);
      return 0;
    default:
      return EISDIR;
  }
}

}  // namespace emu::prov::view
