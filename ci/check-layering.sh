#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The layers' includes. The provider (verbs_provider/), stress/, tools/ and pyharness/ see the
# device model only through its public face, and that face includes nothing private. Each "..."
# include of a file there must name a public "emu/<name>.h" (a file of emu/include/emu/; the
# scheduler's are "emu/sched/<name>.h", in emu/include/emu/sched/), a file of the including file's
# own folder (under stress/, also stress/ itself), or the provider's public header ("emudv.h",
# verbs_provider/include/, as mlx5dv.h); under pyharness/ also a header of stress/ or stress/race/;
# a <...> include is a system header and must not name a file of emu/.
#
# Inside the provider, each room (a folder of verbs_provider/) includes its own headers by name
# and another room's as "<room>/<name>.h", and only along an arrow of the table below: the rooms
# build on each other one way, so that a room can be read, and changed, knowing only what it
# points to. The table must stay acyclic, and every arrow in it must be used by some include.
#
# Usage: ci/check-layering.sh [ROOT]   (ROOT: the tree to check; the repository by default)
set -euo pipefail

# Room -> the rooms whose headers it may include. A room not in the table may not exist.
declare -A arrows=(
  [verbs]="mmio"             # the verbs objects (provider.h): the others build on them; their
                             # registers are trapped windows
  [memory]="verbs"           # registered memory: an MR's pages (provider.h's MrSlot)
  [raw]="verbs"              # flow rules and WQs are made on QPs
  [cm]="verbs"               # the CM resolves addresses to ports and makes QP attributes
  [presence]="verbs cm"      # /sys from the device's attributes; /dev/infiniband/rdma_cm opens a CM channel
  [mlx5]="verbs"             # the mlx5dv entry points answer for the verbs objects
  [mmio]=""                  # trapped register windows: system headers only
  [sched]=""                 # libemu_sched.so: the public emu/ headers and emudv.h only
  [include]=""               # emudv.h: system headers only
)

root=${1:-$(dirname "$0")/..}
cd "$root"
prog=ci/check-layering.sh
provider_public="verbs_provider/include/emudv.h"
dirs=(verbs_provider stress tools pyharness emu/include/emu)
# The tracked files when ROOT is a git work tree of its own; every file otherwise (a copy).
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
  files=$(git ls-files "${dirs[@]/%//*}")
else
  files=$(find "${dirs[@]}" -type f 2>/dev/null)
fi
bad=0
complain() {
  echo "$*" >&2
  bad=1
}

# The table is acyclic: take away, again and again, the rooms whose arrows all point at rooms
# already taken; whatever is left is on a cycle.
for room in "${!arrows[@]}"; do
  for to in ${arrows[$room]}; do
    [ -n "${arrows[$to]+x}" ] || complain "$prog: arrow $room -> $to: no room $to in the table"
  done
done
declare -A placed=()
for _ in "${!arrows[@]}"; do
  for room in "${!arrows[@]}"; do
    [ -n "${placed[$room]:-}" ] && continue
    ready=1
    for to in ${arrows[$room]}; do
      [ -n "${placed[$to]:-}" ] || ready=0
    done
    [ $ready = 1 ] && placed[$room]=1
  done
done
for room in "${!arrows[@]}"; do
  [ -n "${placed[$room]:-}" ] ||
    complain "$prog: room $room is on a cycle of the arrow table (${room} -> ${arrows[$room]})"
done

# The room of a file of the provider ("" elsewhere); a file outside the rooms, or in a room the
# table does not know, is an error of its own.
room_of() {
  room=""
  [[ $1 == verbs_provider/* ]] || return 0
  room=${1#verbs_provider/}
  room=${room%%/*}
}
sources=$(grep -E '\.(h|cpp)$' <<<"$files" || true)
for f in $sources; do
  room_of "$f"
  if [[ $(dirname "$f") == verbs_provider ]]; then
    complain "$f: a file of the provider outside its rooms (verbs_provider/<room>/)"
  elif [[ -n $room && -z ${arrows[$room]+x} ]]; then
    complain "$f: room verbs_provider/$room/ is not in $prog's arrow table"
  fi
done

# Every include of every file, read by one grep (a process per file is slow on a busy machine).
declare -A used=()
# shellcheck disable=SC2086  # one word per file
while IFS=: read -r f line kind name; do
  dir=${f%/*}
  room_of "$f"
  ok=0
  why="is not a public \"emu/<name>.h\" or \"emu/sched/<name>.h\" (emu/include/emu/), a file of"
  why+=" $dir/ or a system header"
  if [ "$kind" = '"' ]; then
    if [[ $name =~ ^emu/(sched/)?[A-Za-z0-9_]+\.h$ && -f emu/include/$name ]]; then ok=1
    elif [[ $name != */* && -f $dir/$name ]]; then ok=1
    # stress/'s subfolders (stress/race/) build on stress/'s own headers.
    elif [[ $name != */* && $dir == stress/* && -f stress/$name ]]; then ok=1
    # The Python harness's module builds on emu-race's core (stress/race/) and stress/.
    elif [[ $name != */* && $dir == pyharness/* && ( -f stress/$name || -f stress/race/$name ) ]]; then ok=1
    elif [[ $dir != emu/* && $name == "${provider_public##*/}" ]]; then ok=1
    # Another room of the provider, along an arrow.
    elif [[ -n $room && $name =~ ^([a-z_]+)/[A-Za-z0-9_]+\.h$ && -f verbs_provider/$name ]]; then
      to=${BASH_REMATCH[1]}
      if [ "$to" = "$room" ]; then
        why="is a header of the including file's own room: include it as \"${name#*/}\""
      elif [[ " ${arrows[$room]:-} " == *" $to "* ]]; then
        ok=1
        used[$room:$to]=1
      else
        why="goes the wrong way: $room -> $to is not an arrow of $prog's table"
        why+=" ($room -> ${arrows[$room]:-nothing})"
      fi
    fi
  elif [[ ! -e emu/$name && ( $name != emu/* || -f emu/include/$name ) ]]; then
    ok=1
  fi
  if [ $ok = 0 ]; then
    close='"' && [ "$kind" = '<' ] && close='>'
    complain "$f:$line: #include $kind$name$close $why"
  fi
done < <([ -z "$sources" ] || grep -nHE '^[[:space:]]*#[[:space:]]*include' $sources |
         sed -E 's/^([^:]+):([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*(["<])([^">]+)[">].*/\1:\2:\3:\4/')

# An arrow no include uses would let a wrong-way include in unnoticed: the table says what is.
for room in "${!arrows[@]}"; do
  for to in ${arrows[$room]}; do
    [ -n "${used[$room:$to]:-}" ] ||
      complain "$prog: arrow $room -> $to is in the table but no file of verbs_provider/$room/" \
               "includes a header of $to/: drop it"
  done
done

if [ $bad != 0 ]; then
  echo "$prog: includes that break the layers (above)" >&2
  exit 1
fi
echo "$prog: includes respect the layers and the provider's rooms"
