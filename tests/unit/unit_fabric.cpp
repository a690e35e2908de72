// Each unit-test process gets a fabric of its own (ctest runs the tests of this binary as separate
// processes, in parallel): tests that forge process records or sweep must not see each other's.
// The segment file is removed when the process exits.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {

std::string g_path;

struct UnitFabric {
  UnitFabric() {
    if (std::getenv("EMU_UNIT_PROBE")) return;  // a probe process attaches where it is told
    std::string fabric = "unit-" + std::to_string(getpid());
    setenv("EMU_FABRIC", fabric.c_str(), 1);
    const char* dir = std::getenv("EMU_SHM_DIR");
    g_path = std::string(dir && *dir ? dir : "/dev/shm") + "/rdmaemu-" + std::to_string(getuid()) +
             "-" + fabric;
    std::atexit([] { unlink(g_path.c_str()); });
  }
} g_unit_fabric;

}  // namespace
