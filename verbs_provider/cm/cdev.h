// SPDX-License-Identifier: BSD-2-Clause
// The RDMA CM character device of emu fabrics: what /dev/infiniband/rdma_cm opens to under emu-run.
// The file-view interposer (presence/file_view.cpp) routes an open of that path here; the RDMA CM
// emulation (cdev.cpp) implements it.
#pragma once

namespace emu::prov {

// Opens one RDMA CM event channel for this process; `flags` are open(2)'s (O_CLOEXEC, O_NONBLOCK).
// Returns a file descriptor, or -1 with errno set.
int cm_cdev_open(int flags);

// Whether fd is an open channel (an epoll fd: all of those share one inode, so the file view's
// fstat asks here rather than trusting the file's identity alone).
bool cm_cdev_is_channel(int fd);

}  // namespace emu::prov
