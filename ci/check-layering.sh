#!/bin/bash
# The layers' includes: the provider (verbs_provider/), stress/, tools/ and pyharness/ see the device model
# only through its public face, and that face includes nothing private. Each "..." include of a
# file there must name a public "emu/<name>.h" (a file of emu/include/emu/), a file of the
# including file's own folder (under stress/, also stress/ itself), or the provider's own public
# header (emudv.h, as mlx5dv.h); under pyharness/ also a header of stress/ or stress/race/;
# a <...> include is a system header and must not name a file of emu/.
set -euo pipefail
cd "$(dirname "$0")/.."
provider_public="verbs_provider/emudv.h"
files=$(git ls-files 'verbs_provider/*' 'stress/*' 'tools/*' 'pyharness/*' 'emu/include/emu/*' \
          2>/dev/null || find verbs_provider stress tools pyharness emu/include/emu -type f)
bad=0
for f in $(grep -E '\.(h|cpp)$' <<<"$files"); do
  dir=$(dirname "$f")
  while IFS=: read -r line kind name; do
    ok=0
    if [ "$kind" = '"' ]; then
      if [[ $name =~ ^emu/[A-Za-z0-9_]+\.h$ && -f emu/include/$name ]]; then ok=1
      elif [[ $name != */* && -f $dir/$name ]]; then ok=1
      # stress/'s subfolders (stress/race/) build on stress/'s own headers.
      elif [[ $name != */* && $dir == stress/* && -f stress/$name ]]; then ok=1
      # The Python harness's module builds on emu-race's core (stress/race/) and stress/.
      elif [[ $name != */* && $dir == pyharness/* && ( -f stress/$name || -f stress/race/$name ) ]]; then ok=1
      elif [[ $dir != emu/* && " $provider_public " == *" verbs_provider/$name "* ]]; then ok=1
      fi
    elif [[ ! -e emu/$name && ( $name != emu/* || -f emu/include/$name ) ]]; then
      ok=1
    fi
    if [ $ok = 0 ]; then
      close='"' && [ "$kind" = '<' ] && close='>'
      echo "$f:$line: #include $kind$name$close is not a public \"emu/<name>.h\" (emu/include/emu/)," \
           "a file of $dir/ or a system header" >&2
      bad=1
    fi
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$f" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*(["<])([^">]+)[">].*/\1:\2:\3/')
done
if [ $bad != 0 ]; then
  echo "ci/check-layering.sh: private headers of the device model included outside it" >&2
  exit 1
fi
echo "ci/check-layering.sh: includes respect the layers"
