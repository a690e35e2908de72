#!/bin/bash
# Installs what is missing, builds, and runs every test (unit, verbs-level, acceptance with the
# unmodified Debian binaries). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
cd build
ctest --output-on-failure --no-tests=error --timeout 900 "$@"
