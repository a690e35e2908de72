// SPDX-License-Identifier: BSD-2-Clause
// The verbs devices this process sees (the preloaded provider lists the emulated ones after the
// real ones) with their attributes and ports, and the device's race log.
#include "devices.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "emudv_link.h"
#include "errors.h"
#include "races.h"

namespace py = pybind11;

namespace pyh {

namespace {

PortInfo port_info(ibv_context* ctx, uint8_t num) {
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(ctx, num, &pa)) throw VerbsError(rc, "ibv_query_port");
  PortInfo p;
  p.num = num;
  p.state = ibv_port_state_str(pa.state);
  p.lid = pa.lid;
  p.link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  p.active_mtu = 128u << pa.active_mtu;
  return p;
}

DeviceInfo device_info(ibv_device* dev) {
  DeviceInfo d;
  d.name = ibv_get_device_name(dev);
  d.guid = be64toh(ibv_get_device_guid(dev));
  ibv_context* ctx = ibv_open_device(dev);
  if (!ctx) throw VerbsError(errno, "ibv_open_device " + d.name);
  ibv_device_attr a{};
  int rc = ibv_query_device(ctx, &a);
  if (rc == 0) {
    d.max_qp = a.max_qp;
    d.max_cq = a.max_cq;
    d.max_mr = a.max_mr;
    d.max_pd = a.max_pd;
    d.max_srq = a.max_srq;
    for (uint8_t n = 1; n <= a.phys_port_cnt && rc == 0; ++n) d.ports.push_back(port_info(ctx, n));
  }
  ibv_close_device(ctx);
  if (rc) throw VerbsError(rc, "ibv_query_device " + d.name);
  return d;
}

}  // namespace

std::vector<DeviceInfo> devices() {
  py::gil_scoped_release unlocked;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) throw VerbsError(errno, "ibv_get_device_list");
  std::vector<DeviceInfo> out;
  try {
    for (int i = 0; i < n; ++i) out.push_back(device_info(list[i]));
  } catch (...) {
    ibv_free_device_list(list);
    throw;
  }
  ibv_free_device_list(list);
  return out;
}

uint64_t races_recorded() {
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  if (!dv) throw VerbsError(ENODEV, "the emulated provider is not loaded (run under emu-run)");
  return dv->races_recorded();
}

std::vector<RaceEvent> race_events(uint64_t since) {
  const uctlite::EmudvFns* dv = uctlite::emudv_fns();
  if (!dv) throw VerbsError(ENODEV, "the emulated provider is not loaded (run under emu-run)");
  std::vector<RaceEvent> out;
  emudv_race buf[64];
  for (uint64_t next = since;;) {
    int n = dv->read_races(next, buf, 64);
    for (int i = 0; i < n; ++i) {
      const emudv_race& e = buf[i];
      next = e.seq;
      out.push_back({e.seq, stress::race_kind_name(e.kind), e.pid, e.qpn, e.reg, e.slot,
                     e.executed ? e.executed : ""});
    }
    if (n < 64) break;
  }
  return out;
}

}  // namespace pyh
