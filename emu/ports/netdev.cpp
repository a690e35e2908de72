// SPDX-License-Identifier: BSD-2-Clause
#include "ports/netdev.h"

#include <net/if.h>
#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>

namespace emu {
namespace {

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
struct CacheDeleter {
  void operator()(nl_cache* c) const { nl_cache_free(c); }
};
using SockPtr = std::unique_ptr<nl_sock, SockDeleter>;
using CachePtr = std::unique_ptr<nl_cache, CacheDeleter>;

bool has_ipv4(nl_cache* addrs, int ifindex) {
  for (nl_object* o = nl_cache_get_first(addrs); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    if (rtnl_addr_get_ifindex(a) == ifindex && rtnl_addr_get_family(a) == AF_INET) return true;
  }
  return false;
}

// The link that `name` names, or the default choice for an empty name.
rtnl_link* pick_link(nl_cache* links, nl_cache* addrs, const std::string& name) {
  if (!name.empty()) {
    for (nl_object* o = nl_cache_get_first(links); o; o = nl_cache_get_next(o)) {
      auto* l = reinterpret_cast<rtnl_link*>(o);
      if (name == rtnl_link_get_name(l)) return l;
    }
    return nullptr;
  }
  rtnl_link* best = nullptr;
  rtnl_link* loopback = nullptr;
  for (nl_object* o = nl_cache_get_first(links); o; o = nl_cache_get_next(o)) {
    auto* l = reinterpret_cast<rtnl_link*>(o);
    unsigned flags = rtnl_link_get_flags(l);
    if (flags & IFF_LOOPBACK) {
      if (!loopback) loopback = l;
      continue;
    }
    if (!(flags & IFF_UP) || !has_ipv4(addrs, rtnl_link_get_ifindex(l))) continue;
    // The cache's order is the dump's; choose by index so every process picks the same one.
    if (!best || rtnl_link_get_ifindex(l) < rtnl_link_get_ifindex(best)) best = l;
  }
  return best ? best : loopback;
}

}  // namespace

bool read_netdev(const std::string& name, Netdev* out, std::string* err) {
  SockPtr sk(nl_socket_alloc());
  if (!sk) {
    *err = "netlink socket: out of memory";
    return false;
  }
  if (int rc = nl_connect(sk.get(), NETLINK_ROUTE); rc < 0) {
    *err = std::string("netlink: ") + nl_geterror(rc);
    return false;
  }
  nl_cache* raw = nullptr;
  if (int rc = rtnl_link_alloc_cache(sk.get(), AF_UNSPEC, &raw); rc < 0) {
    *err = std::string("netlink link dump: ") + nl_geterror(rc);
    return false;
  }
  CachePtr links(raw);
  raw = nullptr;
  if (int rc = rtnl_addr_alloc_cache(sk.get(), &raw); rc < 0) {
    *err = std::string("netlink address dump: ") + nl_geterror(rc);
    return false;
  }
  CachePtr addrs(raw);

  rtnl_link* l = pick_link(links.get(), addrs.get(), name);
  if (!l) {
    *err = name.empty() ? "no network interface found" : "no network interface " + name;
    return false;
  }
  *out = Netdev{};
  out->name = rtnl_link_get_name(l);
  out->ifindex = static_cast<uint32_t>(rtnl_link_get_ifindex(l));
  out->mtu = rtnl_link_get_mtu(l);
  unsigned flags = rtnl_link_get_flags(l);
  out->up = (flags & IFF_UP) && (flags & IFF_RUNNING);
  if (nl_addr* mac = rtnl_link_get_addr(l); mac && nl_addr_get_len(mac) == out->mac.size())
    std::memcpy(out->mac.data(), nl_addr_get_binary_addr(mac), out->mac.size());

  for (nl_object* o = nl_cache_get_first(addrs.get()); o; o = nl_cache_get_next(o)) {
    auto* a = reinterpret_cast<rtnl_addr*>(o);
    if (rtnl_addr_get_ifindex(a) != static_cast<int>(out->ifindex)) continue;
    nl_addr* local = rtnl_addr_get_local(a);
    if (!local) continue;
    const void* bytes = nl_addr_get_binary_addr(local);
    unsigned len = nl_addr_get_len(local);
    if (rtnl_addr_get_family(a) == AF_INET && len == 4) {
      std::array<uint8_t, 4> v;
      std::memcpy(v.data(), bytes, 4);
      out->ipv4.push_back(v);
    } else if (rtnl_addr_get_family(a) == AF_INET6 && len == 16) {
      std::array<uint8_t, 16> v;
      std::memcpy(v.data(), bytes, 16);
      out->ipv6.push_back(v);
    }
  }
  return true;
}

}  // namespace emu
