#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Configures and builds into ${BUILD_DIR:-build}, warnings as errors (EMU_WERROR; -DEMU_WERROR=OFF
# among the arguments to allow them). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DEMU_WERROR=ON "$@" \
  >/dev/null
cmake --build "$BUILD_DIR" -j2
