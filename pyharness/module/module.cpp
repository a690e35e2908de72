// SPDX-License-Identifier: BSD-2-Clause
// rdmaemu._rdmaemu: the C++ half of the Python harness (docs/guides/pyharness.md). It links
// libemu_verbs.so, whose exported scheduler (EMU_SCHED_1.0) is the one the provider's points
// call, and never the static emu library: one copy of the model per process.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "devices.h"
#include "errors.h"
#include "kernel_census.h"
#include "scheduler.h"

namespace py = pybind11;

namespace {

// A real device's objects as dicts shaped like the emulated census's (census.py builds one Census
// from either); the netlink dumps run with the GIL released.
py::list kernel_objects(const std::string& device) {
  std::vector<pyh::KernelObject> objs;
  std::string what;
  int rc;
  {
    py::gil_scoped_release unlocked;
    rc = pyh::kernel_census(device, &objs, &what);
  }
  if (rc) throw pyh::VerbsError(rc, what);
  py::list out;
  for (const pyh::KernelObject& o : objs) {
    py::dict d;
    d["kind"] = o.kind;
    d["dev"] = o.dev;
    d["number"] = o.number;
    d["type"] = o.type;
    d["state"] = o.state;
    d["owner_pid"] = o.pid;
    d["kern_name"] = o.kern_name;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_rdmaemu, m) {
  m.doc() = "rdmaemu's devices, race log and deterministic scheduler";
  pyh::register_errors(m);
  py::class_<pyh::PortInfo>(m, "PortInfo")
      .def_readonly("num", &pyh::PortInfo::num)
      .def_readonly("state", &pyh::PortInfo::state)
      .def_readonly("lid", &pyh::PortInfo::lid)
      .def_readonly("link_layer", &pyh::PortInfo::link_layer)
      .def_readonly("active_mtu", &pyh::PortInfo::active_mtu);
  py::class_<pyh::DeviceInfo>(m, "DeviceInfo")
      .def_readonly("name", &pyh::DeviceInfo::name)
      .def_readonly("guid", &pyh::DeviceInfo::guid)
      .def_readonly("max_qp", &pyh::DeviceInfo::max_qp)
      .def_readonly("max_cq", &pyh::DeviceInfo::max_cq)
      .def_readonly("max_mr", &pyh::DeviceInfo::max_mr)
      .def_readonly("max_pd", &pyh::DeviceInfo::max_pd)
      .def_readonly("max_srq", &pyh::DeviceInfo::max_srq)
      .def_readonly("ports", &pyh::DeviceInfo::ports);
  py::class_<pyh::RaceEvent>(m, "RaceEvent")
      .def_readonly("seq", &pyh::RaceEvent::seq)
      .def_readonly("kind", &pyh::RaceEvent::kind)
      .def_readonly("pid", &pyh::RaceEvent::pid)
      .def_readonly("qpn", &pyh::RaceEvent::qpn)
      .def_readonly("reg", &pyh::RaceEvent::reg)
      .def_readonly("slot", &pyh::RaceEvent::slot)
      .def_readonly("executed", &pyh::RaceEvent::executed);
  m.def("devices", &pyh::devices);
  m.def("races_recorded", &pyh::races_recorded);
  m.def("race_events", &pyh::race_events, py::arg("since") = 0);
  m.def("kernel_objects", &kernel_objects, py::arg("device"),
        "every object the kernel tracks on a real RDMA device (RDMA netlink)");
  pyh::register_scheduler(m);
}
