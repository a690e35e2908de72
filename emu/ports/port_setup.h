// SPDX-License-Identifier: BSD-2-Clause
// A device's ports as the process that makes the segment sets them up (Segment::init_devices):
// the segment lays out the devices, and this folder knows what a port is on each link layer.
#pragma once
#include <cstdint>

#include "emu/config.h"
#include "emu/layout.h"

namespace emu {

// Sets up the cfg.ports_per_dev ports of `dev`, device number `d` of the fabric, whose name and
// node GUID are already set: an InfiniBand port gets a LID no other port of the fabric has, a RoCE
// port its interface's (EMU_ROCE_NETDEV) addresses as GIDs, its MTU and its state.
void init_device_ports(const Config& cfg, uint32_t d, DeviceState* dev);

}  // namespace emu
