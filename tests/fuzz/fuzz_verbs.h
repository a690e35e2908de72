// SPDX-License-Identifier: BSD-2-Clause
// What the verbs fuzz targets share: the seeded generator, the errnos each verb's man page allows,
// and the end of every run (the segment checker and the race log, through emu-ctl).
#pragma once
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <initializer_list>
#include <string>

#include "fuzz_rng.h"
#include "verbs_fixture.h"

namespace fuzz {

// Each verb's failure must be one of `allowed` (a wrong errno is a finding, as a crash is).
inline ::testing::AssertionResult errno_in(const char* verb, int err,
                                           std::initializer_list<int> allowed) {
  for (int a : allowed)
    if (err == a) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << verb << " failed with errno " << err << " ("
                                       << std::strerror(err) << "), not one its man page allows";
}

// `emu-ctl ARGS` on this process's fabric: exit status and output.
inline int ctl(const std::string& args, std::string* out) {
  std::string cmd = std::string(EMU_CTL) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) *out += buf;
  return pclose(f);
}

// The end of a run: the checker finds the segment consistent and the device recorded no race.
inline void expect_segment_clean() {
  std::string check, races;
  EXPECT_EQ(ctl("check", &check), 0) << check;
  ctl("races", &races);
  EXPECT_EQ(races.rfind("0 race events", 0), 0u) << races;
}

inline uint64_t seed() { return env_or("FUZZ_SEED", 1); }

}  // namespace fuzz
