// SPDX-License-Identifier: BSD-2-Clause
// A port's link state as every process sees it. The state byte in PortState is written by the
// control API (emu/control.h) while engines and port queries in other processes read it, so every
// access goes through these atomic accessors rather than the plain field.
#pragma once
#include <atomic>
#include <cstdint>

#include "emu/layout.h"

namespace emu {

// ibv_port_state numbering (what PortState.state holds).
enum PortLinkState : uint8_t { kPortDown = 1, kPortActive = 4 };
// The physical state ibv_query_port reports beside it (IBTA PortPhysicalState).
enum PortPhysState : uint8_t { kPhysDisabled = 3, kPhysLinkUp = 5 };

inline uint8_t port_state(const PortState& p) {
  // The segment is writable shared memory: the const_cast only lets a reader use atomic_ref.
  return std::atomic_ref<uint8_t>(const_cast<uint8_t&>(p.state)).load(std::memory_order_acquire);
}

inline PortPhysState port_phys_state(uint8_t state) {
  return state == kPortActive ? kPhysLinkUp : kPhysDisabled;
}

// Whether packets leave or arrive through port `port` (1-based) of device `dev`: a port that is not
// ACTIVE is a pulled cable, as is a port that does not exist.
inline bool port_carries(const Header* h, uint32_t dev, uint32_t port) {
  return dev < h->num_devices && port >= 1 && port <= h->devices[dev].num_ports &&
         port_state(h->devices[dev].ports[port - 1]) == kPortActive;
}

}  // namespace emu
