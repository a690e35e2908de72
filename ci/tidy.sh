#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# clang-tidy (Debian's) with the project's small check set (.clang-tidy) over the C and C++ sources
# that differ from ci/tidy-base: the sources as they were when every one was last checked, one
# "<git blob hash> <path>" line each. A source whose content hashes to another blob, or that is
# not listed, is checked; the comparison needs no history, so a shallow clone runs it the same.
# TIDY_ALL=1 checks every source: after a clean run of it, write the base anew with
#   git ls-files -s -- '*.c' '*.cpp' | awk '{print $2, $4}' >ci/tidy-base
# The files are those of a build's compile commands (BUILD_DIR, default build): run it after
# ci/build.sh. Exits 1 if anything was found.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
db=$build/compile_commands.json
[ -f "$db" ] || { echo "ci/tidy.sh: no $db: build first (ci/build.sh)"; exit 1; }
# Every source the build compiles, once, as a path relative to the repository.
compiled=$(python3 - "$db" "$PWD" <<'PY'
import json, os, sys
root = sys.argv[2]
seen = set()
for entry in json.load(open(sys.argv[1])):
    path = os.path.relpath(os.path.join(entry["directory"], entry["file"]), root)
    if not path.startswith("..") and path not in seen:
        seen.add(path)
        print(path)
PY
)
if [ "${TIDY_ALL:-0}" = 1 ]; then
  files=$compiled
  what="every compiled source"
else
  # Each compiled source as "<blob> <path>" (its content now), less the lines the base has.
  hashes=$(git hash-object --stdin-paths <<<"$compiled")
  files=$(comm -13 <(sort ci/tidy-base) <(paste -d' ' <(echo "$hashes") <(echo "$compiled") | sort) |
          cut -d' ' -f2-)
  what="the sources changed since ci/tidy-base"
fi
n=$(grep -c . <<<"$files" || true)
if [ "$n" = 0 ]; then
  echo "ci/tidy.sh: no compiled source changed since the base"
  exit 0
fi
# One process per core; each file's findings end with clang-tidy's own summary line.
if ! xargs -P "$(nproc)" -n 1 clang-tidy -p "$build" --quiet <<<"$files" >"$build/tidy.log" 2>&1; then
  grep -E "(warning|error):" "$build/tidy.log" | sort -u
  echo "ci/tidy.sh: clang-tidy found the above in $what ($n files; .clang-tidy has the checks)"
  exit 1
fi
echo "ci/tidy.sh: clang-tidy found nothing in $what ($n files)"
