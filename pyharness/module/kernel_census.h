// SPDX-License-Identifier: BSD-2-Clause
// The census of a real RDMA device (rxe0, mlx5_0, ...), from the kernel's resource tracking: what
// `rdma resource show` prints, read over NETLINK_RDMA with libnl-3. The same facts the emulated
// census gives per object (kind, number, QP/SRQ type, QP state, the process that made it), so
// that a lifetime scenario asserts one census on emu0 and on a real device
// (docs/guides/pyharness.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pyh {

struct KernelObject {
  std::string kind;       // "context", "pd", "mr", "cq", "qp", "srq" (as emu/census.h names them)
  uint32_t dev = 0;       // the kernel's device index
  uint64_t number = 0;    // qpn, srqn, cqn, mrn, pdn, ctxn
  std::string type;       // QPs: "RC", "UC", "UD", "XRC_SEND", "XRC_RECV", ...; SRQs: "BASIC", ...
  std::string state;      // QPs: "RESET" ... "ERR"; else ""
  int pid = 0;            // the owner as this process's pid namespace sees it; 0 for the kernel's
  std::string kern_name;  // the kernel's own objects (ib_core's GSI QP, ...): its module
};

// Every tracked object of `device`, one dump per object family. Returns 0 or a positive errno:
// ENODEV (no such device), or what the socket or the kernel answered (EPROTONOSUPPORT: no RDMA
// netlink, ib_core not loaded; EOPNOTSUPP/EINVAL: a kernel without one of the dumps).
int kernel_census(const std::string& device, std::vector<KernelObject>* out, std::string* what);

}  // namespace pyh
