// SPDX-License-Identifier: BSD-2-Clause
#include "emu/control.h"

#include <atomic>
#include <cstring>
#include <ctime>

#include "emu/config.h"
#include "emu/device.h"
#include "emu/notify.h"
#include "emu/reclaim.h"

namespace emu {
namespace {

PortState* port_at(Header* h, uint32_t dev, uint32_t port) {
  if (dev >= h->num_devices || port < 1 || port > h->devices[dev].num_ports) return nullptr;
  return &h->devices[dev].ports[port - 1];
}

// Port events to every context open on `dev`. A context still opening has no pipe published yet
// (async_wfd < 0): it finds the new state when it queries the port.
void notify_port_event(Segment* seg, uint32_t dev, uint32_t port, uint32_t type) {
  Header* h = seg->hdr();
  // A context closing meanwhile waits for this section to end before it closes its pipe, so the
  // pipe named by a live slot is still the context's while its record is written.
  EngineSection in_engine(seg);
  for (ContextSlot& c : h->ctxs) {
    if (c.state.load(std::memory_order_acquire) != kSlotLive) continue;
    if (std::atomic_ref<int32_t>(c.async_wfd).load(std::memory_order_acquire) < 0) continue;
    if (c.dev != dev) continue;
    notify_async(c, port, type);
  }
}

}  // namespace

Status find_device(const Segment* seg, std::string_view name, uint32_t* dev) {
  const Header* h = seg->hdr();
  for (uint32_t d = 0; d < h->num_devices; ++d) {
    const char* n = h->devices[d].name;
    if (name == std::string_view(n, strnlen(n, sizeof h->devices[d].name))) {
      *dev = d;
      return Status::ok;
    }
  }
  return Status::not_found;
}

Status get_port_state(const Segment* seg, uint32_t dev, uint32_t port, uint8_t* state) {
  const PortState* p = port_at(seg->hdr(), dev, port);
  if (!p) return Status::not_found;
  *state = port_state(*p);
  return Status::ok;
}

Status set_port_state(Segment* seg, uint32_t dev, uint32_t port, bool up, bool* changed) {
  Header* h = seg->hdr();
  PortState* p = port_at(h, dev, port);
  if (!p) return Status::not_found;
  const uint8_t want = up ? kPortActive : kPortDown;
  // The table lock orders concurrent changes, so their events reach every context in the order the
  // state changed. It is taken before the engine section: a sweep holds it while waiting for
  // sections to close.
  ShmLockGuard g(h->table_lock, seg->self());
  std::atomic_ref<uint8_t> state(p->state);
  bool did = state.exchange(want, std::memory_order_acq_rel) != want;
  if (did) {
    device_routes_changed(h);  // engines look their responders up anew (a path through it went)
    log("%s port %u: %s", h->devices[dev].name, port, up ? "up (ACTIVE)" : "down");
    notify_port_event(seg, dev, port, up ? kEvPortActive : kEvPortErr);
  }
  if (changed) *changed = did;
  return Status::ok;
}

Status set_transport_timers_held(Segment* seg, bool held, bool* changed) {
  Header* h = seg->hdr();
  ShmLockGuard g(h->table_lock, seg->self());  // one hold or release at a time
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t now = uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  uint64_t since = h->timers_held_since.load(std::memory_order_acquire);
  bool did = held != (since != 0);
  if (did && held) {
    h->timers_held_since.store(now, std::memory_order_release);
  } else if (did) {
    // The held time joins the total before the hold ends, so that an engine that sees the hold
    // gone also sees the time it lasted (its clock never jumps ahead by it).
    h->timers_held_ns.fetch_add(now - since, std::memory_order_release);
    h->timers_held_since.store(0, std::memory_order_release);
  }
  if (did) log("transport timers %s", held ? "held" : "running again");
  if (changed) *changed = did;
  return Status::ok;
}

bool transport_timers_held(const Segment* seg) {
  return seg->hdr()->timers_held_since.load(std::memory_order_acquire) != 0;
}

}  // namespace emu
