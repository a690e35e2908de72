// Each test process gets a fabric of its own (ctest runs every test as a separate process, two at a
// time): a test that goes wrong cannot leave state behind that another test then trips over. Peers
// a test spawns inherit the variable, so they join the same fabric. The segment file is removed
// when the test process exits.
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace {

std::string g_path;

struct TestFabric {
  TestFabric() {
    if (std::getenv("EMU_TEST_PEER")) return;  // a peer joins its parent's fabric
    const char* base = std::getenv("EMU_FABRIC");
    std::string fabric = std::string(base && *base ? base : "verbs") + "-" + std::to_string(getpid());
    setenv("EMU_FABRIC", fabric.c_str(), 1);
    const char* dir = std::getenv("EMU_SHM_DIR");
    g_path = std::string(dir && *dir ? dir : "/dev/shm") + "/rdmaemu-" + std::to_string(getuid()) +
             "-" + fabric;
    std::atexit([] { unlink(g_path.c_str()); });
  }
} g_test_fabric;

}  // namespace
