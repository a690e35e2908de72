// SPDX-License-Identifier: BSD-2-Clause
#include "ports/port_setup.h"

#include <cstdio>
#include <string>

#include "ports/link_layer.h"
#include "ports/netdev.h"

namespace emu {
namespace {

// The interface is read once, here, by the process that makes the segment: every process then
// sees the same GIDs, and a later address change is not followed (a new fabric sees it).
void init_roce_port_from(const Config& cfg, DeviceState* dev, uint32_t port) {
  Netdev nd;
  std::string err;
  if (read_netdev(cfg.roce_netdev(port), &nd, &err)) {
    init_roce_port(&dev->ports[port - 1], dev->node_guid, port, nd);
  } else {
    std::fprintf(stderr, "rdmaemu: RoCE port %s/%u is down: %s (EMU_ROCE_NETDEV)\n", dev->name,
                 port, err.c_str());
    init_roce_port_down(&dev->ports[port - 1], dev->node_guid, port);
  }
}

}  // namespace

void init_device_ports(const Config& cfg, uint32_t d, DeviceState* dev) {
  for (uint32_t p = 0; p < cfg.ports_per_dev; ++p) {
    if (cfg.link_layer(p + 1) == PortLinkLayer::ethernet) {
      init_roce_port_from(cfg, dev, p + 1);
    } else {
      init_ib_port(&dev->ports[p], dev->node_guid, p + 1,
                   static_cast<uint16_t>(1 + d * kMaxPorts + p));
    }
  }
}

}  // namespace emu
