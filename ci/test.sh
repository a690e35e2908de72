#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Installs what is missing, checks the format, the layers' includes and the functions' length
# (fast, so first), builds with warnings as errors, and runs every test (unit, verbs-level,
# acceptance with the unmodified Debian binaries), clang-tidy over the changed sources, then the
# sanitizer subset. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/format-check.sh
bash ci/check-layering.sh
bash ci/function-size.sh
bash ci/build.sh
# The sanitizer subset's two instrumented builds (README "Sanitizers") start now at the lowest
# priority: they take what the suite leaves of the cores (its processes wait on each other, on
# sockets, on the VM) and yield them whenever a test wants them.
# In a session of its own, so that a failure below stops the whole build (its compilers too).
SAN_STEPS=build nice -n 19 setsid bash ci/sanitize.sh >build/sanitize-build.log 2>&1 &
san_build=$!
trap 'kill -- -$san_build 2>/dev/null || true' EXIT
cd build
# Two tests at a time on the two cores: the suite is held to pass so (ci/loaded.sh runs it beside
# a CPU hog as well); tests that must be alone say so (RUN_SERIAL).
ctest -j2 --output-on-failure --no-tests=error --timeout 900 "$@"
cd ..
# clang-tidy's small check set over the sources changed since ci/tidy-base (after the suite: it
# reads the build's compile commands, and the sanitizer builds are still going).
bash ci/tidy.sh
wait $san_build || { tail -50 build/sanitize-build.log; exit 1; }
trap - EXIT
SAN_STEPS=run bash ci/sanitize.sh
