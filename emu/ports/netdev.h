// SPDX-License-Identifier: BSD-2-Clause
// A network interface as a RoCE port sees it: read from the kernel with libnl-route (rtnetlink),
// as soft-RoCE learns its netdev's MAC, MTU and addresses.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace emu {

struct Netdev {
  std::string name;
  uint32_t ifindex = 0;
  std::array<uint8_t, 6> mac{};  // all zero where the link has no 6-byte address (lo)
  uint32_t mtu = 0;
  bool up = false;  // IFF_UP and IFF_RUNNING: administratively up with carrier
  std::vector<std::array<uint8_t, 4>> ipv4;   // in the kernel's order
  std::vector<std::array<uint8_t, 16>> ipv6;  // in the kernel's order
};

// Reads interface `name`, or with an empty name the default choice: the UP non-loopback
// interface with an IPv4 address and the lowest index, else the loopback interface. false (with
// *err saying why) if netlink fails or the interface does not exist.
bool read_netdev(const std::string& name, Netdev* out, std::string* err);

}  // namespace emu
