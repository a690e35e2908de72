#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# emu-ctl census, text and JSON, on a fabric a verbs program used and left (kept by
# EMU_FABRIC_PERSIST=1): the JSON parses, the sweep at emu-ctl's attach has released the finished
# program's objects, the text has its sections. Then `emu-ctl persist off` lets the segment go, and
# the census of a fabric with no segment is empty.
# Usage: census_cli.sh EMU_RUN EMU_CTL
set -euo pipefail
emu_run=$1 emu_ctl=$2
export EMU_FABRIC=test-census-cli-$$
seg="${EMU_SHM_DIR:-/dev/shm}/rdmaemu-$(id -u)-$EMU_FABRIC"
trap 'rm -f "$seg"' EXIT
EMU_FABRIC_PERSIST=1 "$emu_run" ibv_devinfo -d emu0 >/dev/null
[ -e "$seg" ] || { echo "FAIL: EMU_FABRIC_PERSIST=1 did not keep $seg"; exit 1; }
"$emu_ctl" census --json | python3 -c '
import json, os, sys
c = json.load(sys.stdin)
assert c["fabric"] == os.environ["EMU_FABRIC"], c["fabric"]
for key in ("processes", "objects", "xrcds", "tgt_qps", "dead_owned"):
    assert isinstance(c[key], list), key
races = c["races"]
assert races["total"] == 0 and races["events"] == [], races  # a pingpong-free devinfo races nothing
assert set(races["by_device"][0]) == {"bf_torn", "dbrec_backwards", "dbrec_ahead", "double_write",
                                      "stale_wqe", "owner_conflict"}, races
assert c["dead_owned"] == [], c["dead_owned"]
assert all(o["owner_alive"] for o in c["objects"]), c["objects"]
print("census json ok:", len(c["processes"]), "process records")
'
text=$("$emu_ctl" census)
for section in "processes:" "objects:" "xrc domains:" "xrc tgt qps:" "owned by dead processes"; do
  grep -q "^$section" <<<"$text" || { echo "FAIL: no '$section' in:"; echo "$text"; exit 1; }
done
grep -q "^race events: 0" <<<"$text" || { echo "FAIL: no race count in:"; echo "$text"; exit 1; }
races=$("$emu_ctl" races)
grep -q "^0 race events recorded on fabric '$EMU_FABRIC'" <<<"$races" || { echo "FAIL: $races"; exit 1; }
"$emu_ctl" races --json | python3 -c 'import json, sys; assert json.load(sys.stdin) == []'
"$emu_ctl" persist "$EMU_FABRIC" off
[ ! -e "$seg" ] || { echo "FAIL: $seg stayed after persist off with no process attached"; exit 1; }
"$emu_ctl" census --json | python3 -c '
import json, sys
c = json.load(sys.stdin)
assert c["processes"] == [] and c["objects"] == [] and c["races"]["total"] == 0, c
'
[ ! -e "$seg" ] || { echo "FAIL: the census of an empty fabric made $seg"; exit 1; }
echo PASS
