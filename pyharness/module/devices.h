// SPDX-License-Identifier: BSD-2-Clause
// Devices, ports and the device's race log, as the module returns them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pyh {

struct PortInfo {
  uint32_t num = 0;
  std::string state;  // ibv_port_state_str: "PORT_ACTIVE", "PORT_DOWN", ...
  uint32_t lid = 0;
  std::string link_layer;   // "InfiniBand" or "Ethernet"
  uint32_t active_mtu = 0;  // bytes
};

struct DeviceInfo {
  std::string name;
  uint64_t guid = 0;  // host order
  int max_qp = 0, max_cq = 0, max_mr = 0, max_pd = 0, max_srq = 0;
  std::vector<PortInfo> ports;
};

struct RaceEvent {
  uint64_t seq;
  std::string kind;  // "bf_torn", "double_write", ...
  int pid;
  uint32_t qpn;
  int reg;
  uint32_t slot;
  std::string executed;  // what the device did
};

// Every device ibv_get_device_list returns, opened and queried (the GIL released).
std::vector<DeviceInfo> devices();
// The fabric's race log: events recorded so far, and those numbered from `since` on.
uint64_t races_recorded();
std::vector<RaceEvent> race_events(uint64_t since);

}  // namespace pyh
