#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# docs/knobs.md's table is generated from the knob table in emu/control/config.cpp: this checks
# that the lines between the two markers are exactly `emu-ctl knobs --markdown` (names, defaults
# and text), or with --write puts that output there.
# Usage: knobs-doc.sh EMU_CTL KNOBS_MD [--write]
set -euo pipefail
ctl=$1 doc=$2 mode=${3:-check}
begin='<!-- begin: emu-ctl knobs --markdown -->'
end='<!-- end: emu-ctl knobs --markdown -->'
if [ "$(grep -cxF -e "$begin" -e "$end" "$doc")" != 2 ]; then
  echo "$doc: needs the lines '$begin' and '$end' around the table, once each" >&2
  exit 1
fi
generated=$(mktemp)
trap 'rm -f "$generated" "$generated.doc"' EXIT
"$ctl" knobs --markdown >"$generated"
if [ "$mode" = --write ]; then
  awk -v b="$begin" -v e="$end" -v g="$generated" '
    $0 == e { skip = 0 }
    !skip { print }
    $0 == b { while ((getline line < g) > 0) print line; skip = 1 }' "$doc" >"$generated.doc"
  cat "$generated.doc" >"$doc"
  exit 0
fi
if ! awk -v b="$begin" -v e="$end" '$0 == e { on = 0 } on { print } $0 == b { on = 1 }' "$doc" |
    diff -u --label "$doc" --label "emu-ctl knobs --markdown" - "$generated"; then
  echo "$doc differs from the knob table in emu/control/config.cpp: edit the table there, then" \
       "run tools/knobs-doc.sh build/bin/emu-ctl docs/knobs.md --write" >&2
  exit 1
fi
