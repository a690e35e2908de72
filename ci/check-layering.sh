#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The layers' includes. The provider (verbs_provider/), stress/, tools/ and pyharness/ see the
# device model only through its public face, and that face includes nothing private. Each "..."
# include of a file there must name a public "emu/<name>.h" (a file of emu/include/emu/; the
# scheduler's are "emu/sched/<name>.h", in emu/include/emu/sched/), a file of the including file's
# own folder (under stress/, also stress/ itself), or the provider's public header ("emudv.h",
# verbs_provider/include/, as mlx5dv.h); under pyharness/ also a header of stress/ or stress/race/;
# a <...> include is a system header and must not name a file of emu/; the tools' libraries
# (CLI11, nlohmann/json) only outside emu/ and verbs_provider/ or in their tools-only files.
#
# Inside the provider and inside the device model, each room (a folder of verbs_provider/, a
# private folder of emu/) includes another room's headers only along an arrow of its table below:
# the rooms build on each other one way, so that a room can be read, and changed, knowing only what
# it points to. A provider room includes its own headers by name and another room's as
# "<room>/<name>.h"; a folder of emu/ names every private header by its path from emu/,
# "<folder>/<name>.h", its own included. Each table must stay acyclic, and every arrow in it must be
# used by some include. The public face (emu/include/emu/) is no room: anyone may include it.
#
# Usage: ci/check-layering.sh [ROOT]   (ROOT: the tree to check; the repository by default)
set -euo pipefail

# The provider's rooms: room -> the rooms whose headers it may include. A room not in the table
# may not exist. (Both tables are read through a name reference, declare -n.)
# shellcheck disable=SC2034
declare -A provider_arrows=(
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

# The device model's private folders, the same way. The segment and the things it carries come
# first; the engine builds on how bytes move and what ports and packets are; the readers of the
# whole segment, the knobs, the fault injection and the scheduler act on those.
# shellcheck disable=SC2034
declare -A emu_arrows=(
  [shm]="ports"              # a new segment's devices get their ports set up (ports/port_setup.h)
  [dma]=""                   # copies into process memory, shared windows: the public face only
  [ports]=""                 # link layers and interfaces: the public face only
  [wire]=""                  # packets, frames, the capture: the public face only
  [objects]=""               # object lifetimes: the public face only
  [xrc]=""                   # XRC domains: the public face only
  [raw]=""                   # raw packet steering: the public face only
  [device]="dma ports wire"  # the engine: DMA, the port under a QP, packets on the wire
  [audit]="shm"              # the census, the checker, the heap audit read the segment's heap
  [control]="shm"            # the fabrics' list reads segment files
  [faults]="device"          # error injection's actions go through this process's engine
  [sched]="device"           # the device actor runs the engine's steps
)

# The files of emu/ built for the tools only (emu_tools in emu/CMakeLists.txt, and the command-line
# convention's header): the only files of emu/ and verbs_provider/ that may include the tools'
# libraries, CLI11 (<CLI/...>) and nlohmann/json (<nlohmann/...>); libemu_verbs.so is preloaded
# into every program and carries neither.
tools_only=(emu/include/emu/cli.h emu/sched/totals_parse.cpp)

# Each table's rooms are the folders of this folder.
declare -A base=([provider]=verbs_provider [emu]=emu)

root=${1:-$(dirname "$0")/..}
cd "$root"
prog=ci/check-layering.sh
provider_public="verbs_provider/include/emudv.h"
dirs=(verbs_provider stress tools pyharness emu)
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

# Each table is acyclic: take away, again and again, the rooms whose arrows all point at rooms
# already taken; whatever is left is on a cycle.
for table in "${!base[@]}"; do
  declare -n arrows=${table}_arrows
  for room in "${!arrows[@]}"; do
    for to in ${arrows[$room]}; do
      [ -n "${arrows[$to]+x}" ] ||
        complain "$prog: arrow $room -> $to: no room $to in the $table arrow table"
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
      complain "$prog: room $room is on a cycle of the $table arrow table" \
               "(${room} -> ${arrows[$room]})"
  done
  unset placed
  unset -n arrows
done

# The table and room of a file of the provider's rooms or of emu/'s private folders (both ""
# elsewhere, the public face included).
room_of() {
  table="" room=""
  case $1 in
    verbs_provider/*) table=provider ;;
    emu/include/*) return 0 ;;
    emu/*) table=emu ;;
    *) return 0 ;;
  esac
  room=${1#"${base[$table]}"/}
  room=${room%%/*}
}
# A file outside the rooms, or in a room its table does not know, is an error of its own.
sources=$(grep -E '\.(h|cpp)$' <<<"$files" || true)
for f in $sources; do
  room_of "$f"
  [ -n "$table" ] || continue
  declare -n arrows=${table}_arrows
  if [[ $(dirname "$f") == "${base[$table]}" ]]; then
    complain "$f: a file of ${base[$table]}/ outside its rooms (${base[$table]}/<room>/)"
  elif [[ -z ${arrows[$room]+x} ]]; then
    complain "$f: room ${base[$table]}/$room/ is not in $prog's $table arrow table"
  fi
  unset -n arrows
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
    # emu/'s folders name their own headers by their path from emu/ too.
    elif [[ $table == emu && $name != */* && -f $dir/$name ]]; then
      why="is a header of the including file's own folder: include it as \"$room/$name\""
    elif [[ $name != */* && -f $dir/$name ]]; then ok=1
    # stress/'s subfolders (stress/race/) build on stress/'s own headers.
    elif [[ $name != */* && $dir == stress/* && -f stress/$name ]]; then ok=1
    # The Python harness's module builds on emu-race's core (stress/race/) and stress/.
    elif [[ $name != */* && $dir == pyharness/* && ( -f stress/$name || -f stress/race/$name ) ]]; then ok=1
    elif [[ $dir != emu/* && $name == "${provider_public##*/}" ]]; then ok=1
    # Another room of the same table, along an arrow (or, in emu/, the file's own folder).
    elif [[ -n $table && $name =~ ^([a-z_]+)/[A-Za-z0-9_]+\.h$ && -f ${base[$table]}/$name ]]; then
      to=${BASH_REMATCH[1]}
      declare -n arrows=${table}_arrows
      if [[ $to == "$room" && $table == emu ]]; then
        ok=1
      elif [ "$to" = "$room" ]; then
        why="is a header of the including file's own room: include it as \"${name#*/}\""
      elif [[ " ${arrows[$room]:-} " == *" $to "* ]]; then
        ok=1
        used[$table:$room:$to]=1
      else
        why="goes the wrong way: $room -> $to is not an arrow of $prog's $table table"
        why+=" ($room -> ${arrows[$room]:-nothing})"
      fi
      unset -n arrows
    fi
  elif [[ $name =~ ^(CLI|nlohmann)/ && $f =~ ^(emu|verbs_provider)/ && \
          " ${tools_only[*]} " != *" $f "* ]]; then
    why="is a tools' library: the preloaded library stays free of it (${tools_only[*]} only)"
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
for table in "${!base[@]}"; do
  declare -n arrows=${table}_arrows
  for room in "${!arrows[@]}"; do
    for to in ${arrows[$room]}; do
      [ -n "${used[$table:$room:$to]:-}" ] ||
        complain "$prog: arrow $room -> $to is in the $table table but no file of" \
                 "${base[$table]}/$room/ includes a header of $to/: drop it"
    done
  done
  unset -n arrows
done

if [ $bad != 0 ]; then
  echo "$prog: includes that break the layers (above)" >&2
  exit 1
fi
echo "$prog: includes respect the layers, the provider's rooms and emu/'s folders"
