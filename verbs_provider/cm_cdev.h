// The RDMA CM character device of emu fabrics: what /dev/infiniband/rdma_cm opens to under emu-run.
// The file-view interposer (the device-presence side) routes an open of that path here; the RDMA CM
// emulation implements it. Until it exists, the stub (cm_cdev_stub.cpp) answers ENODEV, which
// librdmacm reports as "failed to create RDMA CM event channel", as on a host without rdma_ucm.
#pragma once

namespace emu::prov {

// Opens one RDMA CM event channel for this process; `flags` are open(2)'s (O_CLOEXEC, O_NONBLOCK).
// Returns a file descriptor, or -1 with errno set.
int cm_cdev_open(int flags);

}  // namespace emu::prov
