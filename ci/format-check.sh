#!/bin/bash
# Fails if any tracked *.h / *.cpp differs from what clang-format makes of it with the project's
# .clang-format (fix: clang-format -i FILE...). Runs before the build in ci/test.sh: it is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.cpp' 2>/dev/null ||
        find . -path ./build\* -prune -o \( -name '*.h' -o -name '*.cpp' \) -print)
n=$(wc -w <<<"$files")
# shellcheck disable=SC2086  # one word per file
if ! out=$(clang-format --style=file --dry-run --Werror $files 2>&1); then
  bad=$(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u || true)
  [ -n "$bad" ] || bad=$out  # not a format difference: clang-format's own error
  sed 's/^/  /' <<<"$bad" >&2
  echo "ci/format-check.sh: $(wc -l <<<"$bad") of $n files are not clang-formatted" \
       "(clang-format -i FILE; clang-format --dry-run FILE shows where)" >&2
  exit 1
fi
echo "ci/format-check.sh: $n files clang-formatted"
