#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Fails if any tracked *.h / *.cpp / *.c differs from what clang-format makes of it with the project's
# .clang-format (fix: clang-format -i FILE...). Runs before the build in ci/test.sh: it is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.cpp' '*.c' 2>/dev/null ||
        find . -path ./build\* -prune -o \( -name '*.h' -o -name '*.cpp' -o -name '*.c' \) -print)
n=$(wc -w <<<"$files")
# shellcheck disable=SC2086  # one word per file
if ! out=$(clang-format --style=file --dry-run --Werror $files 2>&1); then
  bad=$(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u || true)
  [ -n "$bad" ] || bad=$out  # not a format difference: clang-format's own error
  # shellcheck disable=SC2001  # a prefix on every line
  sed 's/^/  /' <<<"$bad" >&2
  echo "ci/format-check.sh: $(wc -l <<<"$bad") of $n files are not clang-formatted" \
       "(clang-format -i FILE; clang-format --dry-run FILE shows where)" >&2
  exit 1
fi
echo "ci/format-check.sh: $n files clang-formatted"
# Every source file names its licence (LICENSE) in an SPDX line near its top.
sources=$(git ls-files '*.h' '*.cpp' '*.c' '*.py' '*.pyi' '*.sh' '*.cmake' '*CMakeLists.txt' \
          2>/dev/null || true)
# shellcheck disable=SC2086  # one word per file
unlicensed=$(for f in $sources; do
               head -3 "$f" | grep -q 'SPDX-License-Identifier: BSD-2-Clause' || echo "$f"
             done)
if [ -n "$unlicensed" ]; then
  # shellcheck disable=SC2001  # a prefix on every line
  sed 's/^/  /' <<<"$unlicensed" >&2
  echo "ci/format-check.sh: files without '# SPDX-License-Identifier: BSD-2-Clause' (or //) in" \
       "their first three lines" >&2
  exit 1
fi
# The team's briefs outside the repository are not part of the product: nothing may point there.
brief_dir='shared/''brief'
if refs=$(git grep -nE "\.\./shared/|$brief_dir" -- . 2>/dev/null); then
  echo "$refs" >&2
  echo "ci/format-check.sh: references to the briefs outside the repository ($brief_dir)" >&2
  exit 1
fi
echo "ci/format-check.sh: every source file licensed, no reference outside the repository"
# The shell scripts of ci/ and bench/ pass shellcheck (a word split on purpose says so where it
# happens).
scripts=$(git ls-files 'ci/*.sh' 'bench/*.sh' 2>/dev/null || ls ci/*.sh bench/*.sh)
# shellcheck disable=SC2086  # one word per file
shellcheck -x $scripts
echo "ci/format-check.sh: $(wc -w <<<"$scripts") shell scripts pass shellcheck"
# The Python of tools/, tests/, pyharness/ and bench/ passes pyflakes (Debian's python3-pyflakes).
py=$(git ls-files 'tools/*.py' 'tests/*.py' 'pyharness/*.py' 'bench/*.py' 'ci/*.py' 2>/dev/null ||
     find tools tests pyharness bench ci -name '*.py')
# shellcheck disable=SC2086  # one word per file
pyflakes3 $py
echo "ci/format-check.sh: $(wc -w <<<"$py") Python files pass pyflakes"
