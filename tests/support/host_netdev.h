// SPDX-License-Identifier: BSD-2-Clause
// A host interface's addresses read with getifaddrs, as the tests' independent view of what a
// RoCE port bound to it must list (the emulator reads them over rtnetlink with libnl instead).
#pragma once
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

namespace testhost {

using Gid = std::array<uint8_t, 16>;

struct HostNetdev {
  std::string name;
  unsigned ifindex = 0;
  std::array<uint8_t, 6> mac{};
  unsigned flags = 0;
  std::set<Gid> ipv4;  // as ::ffff:a.b.c.d
  std::set<Gid> ipv6;
};

// fe80::/64 with the MAC as a modified EUI-64 (RFC 4291 appendix A).
inline Gid link_local_from_mac(const std::array<uint8_t, 6>& m) {
  return {0xfe, 0x80, 0,    0,    0,    0,    0,   0, uint8_t(m[0] ^ 0x02),
          m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
}

inline Gid v4_mapped(const void* in_addr) {
  Gid g{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::memcpy(g.data() + 12, in_addr, 4);
  return g;
}

// The interface `name`, or for "" the one a RoCE port picks by default: the UP non-loopback
// interface with an IPv4 address and the lowest index, else lo. false if there is none.
inline bool host_netdev(std::string name, HostNetdev* out) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return false;
  if (name.empty()) {
    unsigned best = 0;
    for (ifaddrs* a = all; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
      unsigned idx = if_nametoindex(a->ifa_name);
      if (idx && (!best || idx < best)) {
        best = idx;
        name = a->ifa_name;
      }
    }
    if (name.empty()) name = "lo";
  }
  *out = HostNetdev{};
  out->name = name;
  out->ifindex = if_nametoindex(name.c_str());
  for (ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || name != a->ifa_name) continue;
    out->flags = a->ifa_flags;
    switch (a->ifa_addr->sa_family) {
      case AF_PACKET: {
        auto* ll = reinterpret_cast<sockaddr_ll*>(a->ifa_addr);
        if (ll->sll_halen == 6) std::memcpy(out->mac.data(), ll->sll_addr, 6);
        break;
      }
      case AF_INET:
        out->ipv4.insert(v4_mapped(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr));
        break;
      case AF_INET6: {
        Gid g;
        std::memcpy(g.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
        out->ipv6.insert(g);
        break;
      }
    }
  }
  freeifaddrs(all);
  // The interface's own link-local address is the default GID already.
  out->ipv6.erase(link_local_from_mac(out->mac));
  return out->ifindex != 0;
}

// The interface's MTU, from sysfs.
inline unsigned host_mtu(const std::string& name) {
  std::string path = "/sys/class/net/" + name + "/mtu";
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  unsigned mtu = 0;
  if (std::fscanf(f, "%u", &mtu) != 1) mtu = 0;
  std::fclose(f);
  return mtu;
}

}  // namespace testhost
