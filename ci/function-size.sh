#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Functions that read in one sitting: none in emu/ or verbs_provider/ longer than 80 lines (from
# its first line to its closing brace, as universal-ctags finds them), except a dispatch table
# (a switch with a case per command), which says so in the comment line right above it. Exits 1
# naming each function over the budget; prints the longest ones otherwise.
#   ci/function-size.sh [REPO_ROOT]        (FUNCTION_LINES=N: another budget)
set -euo pipefail
root=${1:-$(dirname "$0")/..}
cd "$root"
limit=${FUNCTION_LINES:-80}
# Debian's universal-ctags installs ctags-universal (ctags is an alternative pointing at it).
ctags=$(command -v ctags-universal || command -v ctags)
lengths=$("$ctags" -x --languages=C,C++ --kinds-C=f --kinds-C++=f --fields=+ne \
  --_xformat='%{end} %{line} %F %N' -R emu verbs_provider |
  awk '$1 != "" && $2 != "" { print $1 - $2 + 1, $3, $2, $4 }' | sort -rn)
over=0
while read -r n file line name; do
  [ "$n" -gt "$limit" ] || break
  if [ "$line" -gt 1 ] && sed -n "$((line - 1))p" "$file" | grep -q "dispatch table"; then
    echo "ci/function-size.sh: $file:$line $name: $n lines (a dispatch table)"
    continue
  fi
  echo "ci/function-size.sh: $file:$line $name has $n lines, over $limit: split it into named steps"
  over=1
done <<<"$lengths"
if [ "$over" = 0 ]; then
  echo "ci/function-size.sh: no function over $limit lines; the longest:"
  head -3 <<<"$lengths" | sed 's/^/  /'
fi
exit "$over"
