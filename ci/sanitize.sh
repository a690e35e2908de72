#!/bin/bash
# The suite under a sanitizer: ci/sanitize.sh address,undefined | thread
# The preloaded library is instrumented while the Debian binaries are not, so the sanitizer's
# runtime is preloaded first (emu-run keeps an existing LD_PRELOAD in front).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-address,undefined}
bash ci/setup.sh
dir=build-$(echo "$kind" | tr ',' '-')
BUILD_DIR=$dir bash ci/build.sh -DEMU_SANITIZE="$kind"
case "$kind" in
  thread) rt=$(gcc -print-file-name=libtsan.so) ;;
  *) rt=$(gcc -print-file-name=libasan.so)
     export ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 ;;
esac
export EMU_SANITIZER_RUNTIME=$rt  # for acceptance runs by hand: LD_PRELOAD=$rt emu-run ...
cd "$dir"
ctest --output-on-failure --no-tests=error --timeout 900 -L "unit|verbs" "${@:2}"
