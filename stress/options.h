// SPDX-License-Identifier: BSD-2-Clause
// emu-stress's command line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "uctlite.h"

namespace stress {

struct Options {
  uint32_t threads = 2;
  uint32_t qps = 1;
  uctlite::Api api = uctlite::Api::verbs;
  uctlite::MmioMode mmio = uctlite::MmioMode::bf_post_mt;
  bool mmio_given = false;
  bool plain_stores = false;  // --stores plain
  bool stores_given = false;
  uctlite::ThreadMode thread_mode = uctlite::ThreadMode::serialized;
  uctlite::Op op = uctlite::Op::write;
  std::vector<uint32_t> sizes{8, 64, 128, 200};
  uint64_t count = 0;  // messages per thread (0: --duration-ms decides)
  uint64_t duration_ms = 0;
  std::string device = "emu0";
  bool td = false;
  std::string json_path;
  bool expect_clean = false;
  uint64_t drain_ms = 2000;
  uint32_t sq_depth = 64;
  uint32_t rq_depth = 128;
  uint32_t max_inline = 256;
  bool sge_only = false;
  uint32_t races_shown = 8;
  uint32_t yield_every = 0;  // posting threads yield the CPU after every N posts (0: never)
  bool pin_block = false;    // --pin block: threads in contiguous blocks over the allowed CPUs
};

// Parses argv into *o: -1 when the run goes on, else the status to exit with (0 after --help, 2
// after a bad command line, which is said on stderr; emu/cli.h).
int parse_options(int argc, char** argv, Options* o);

}  // namespace stress
