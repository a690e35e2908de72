// Placeholder of the RDMA CM character device until the CM emulation replaces this file.
#include <cerrno>

#include "cm_cdev.h"

namespace emu::prov {

int cm_cdev_open(int) {
  errno = ENODEV;
  return -1;
}

}  // namespace emu::prov
