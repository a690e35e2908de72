// SPDX-License-Identifier: BSD-2-Clause
// The main of every test binary: a fabric of its own for this process, then GoogleTest.
//
// ctest runs every test as a separate process, two at a time: a test that goes wrong (or forges
// process records, or sweeps) must not leave state behind that another test then trips over. The
// fabric is $EMU_FABRIC (else the program's name) with the pid appended; peers a test spawns
// inherit the variable and so join the same fabric. The segment file is removed at exit.
//
// A main rather than a global constructor: a static library's object is linked only when
// something refers to it, and the C runtime refers to main. Peers and probes never get here:
// their constructors run them and _exit before main (peer.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace {

std::string g_segment_path;

void use_own_fabric() {
  const char* base = std::getenv("EMU_FABRIC");
  std::string fabric = std::string(base && *base ? base : program_invocation_short_name) + "-" +
                       std::to_string(getpid());
  setenv("EMU_FABRIC", fabric.c_str(), 1);
  const char* dir = std::getenv("EMU_SHM_DIR");
  g_segment_path = std::string(dir && *dir ? dir : "/dev/shm") + "/rdmaemu-" +
                   std::to_string(getuid()) + "-" + fabric;
  std::atexit([] { unlink(g_segment_path.c_str()); });
}

}  // namespace

int main(int argc, char** argv) {
  use_own_fabric();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
