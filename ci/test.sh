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
cd build
# Two tests at a time on the two cores: the suite is held to pass so (ci/loaded.sh runs it beside
# a CPU hog as well); tests that must be alone say so (RUN_SERIAL).
ctest -j2 --output-on-failure --no-tests=error --timeout 900 "$@"
cd ..
# clang-tidy's small check set over the sources changed since ci/tidy-base (it reads the build's
# compile commands).
bash ci/tidy.sh
# The sanitizer subset (README "Sanitizers"): its two instrumented builds, then its runs. After
# the suite, not beside it: built at the lowest priority while the suite ran, they took 20 minutes
# and made the suite's 9.5 take 18 (bench/results/2026-12-08-ci-phases.md); alone they take 7.
bash ci/sanitize.sh
