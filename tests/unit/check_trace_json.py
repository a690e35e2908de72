#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Runs the unit test that writes a scheduled run's trace, then reads the file as JSON the way
Perfetto's trace-event importer does: every event on a named track, one track per actor (the
device included), slices with ts/dur, instants thread-scoped. Usage: check_trace_json.py <emu_unit_tests>"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        env = dict(os.environ, EMU_SCHED_TRACE_OUT=path)
        subprocess.run([sys.argv[1], "--gtest_filter=SchedTrace.WritesPerfettoJson"], env=env,
                       check=True)
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == ["device", "thread 0", "thread 1"], names
    slices = [e for e in events if e["ph"] == "X"]
    instants = [e for e in events if e["ph"] == "i"]
    assert len(slices) == 4 and len(instants) == 1, events
    for e in slices + instants:
        assert e["tid"] in names, e
        assert isinstance(e["ts"], int), e
    for e in slices:
        assert e["dur"] == 1 and e["args"]["addr"].startswith("0x"), e
    assert all(e["s"] == "t" for e in instants), instants
    assert {e["tid"] for e in slices} == set(names), "one track per actor, each used"
    assert 'dbr "store"\n' in {e["name"] for e in slices}, "escaped label read back"
    print("trace ok:", len(events), "events on", len(names), "tracks")


if __name__ == "__main__":
    main()
