#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Installs what is missing, checks the format and the layers' includes (fast, so first), builds
# with warnings as errors, and runs every test (unit, verbs-level, acceptance with the unmodified
# Debian binaries), then the sanitizer subset. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/format-check.sh
bash ci/check-layering.sh
bash ci/build.sh
cd build
# Two tests at a time on the two cores: the suite is held to pass so (ci/loaded.sh runs it beside
# a CPU hog as well); tests that must be alone say so (RUN_SERIAL).
ctest -j2 --output-on-failure --no-tests=error --timeout 900 "$@"
cd ..
# The sanitizer subset (README "Sanitizers"), its two instrumented builds of their own.
bash ci/sanitize.sh
