#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""The seed's question under EMU_SCHEDULE, with UCX's own code: found, replayed, shrunk, drawn.

  sched_seed.py --emu-run PATH --emu-ctl PATH --emu-shrink PATH --schedule SPEC
                --signature SIG [--replays N] [--budget N] [--max-preemptions N] -- PROGRAM ARGS

The program (uct-shared-single) runs unmodified as one scheduled run: under SPEC it must fail with
SIG (the device's race event first, as emu-race orders its oracles); its trace (EMU_SCHEDULE_TRACE)
must parse with a track per thread and one for the device, and show register stores; the schedule
it printed, replayed N times, each a process in a fabric of its own, must give the same trace hash
and signature every time; emu-shrink must shrink it to at most --max-preemptions preemptions, and
the shrunk schedule replayed once more must fail with SIG. Nothing is timed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


class Failed(Exception):
    pass


def run(args, fabric, schedule, tmp, trace=None):
    """One scheduled run; its outcome (EMU_SCHEDULE_OUT) and its output."""
    out = os.path.join(tmp, "outcome.json")
    if os.path.exists(out):
        os.unlink(out)
    env = dict(os.environ, EMU_FABRIC=fabric, EMU_SCHEDULE=schedule, EMU_SCHEDULE_OUT=out)
    env.pop("EMU_SCHEDULE_TRACE", None)
    if trace:
        env["EMU_SCHEDULE_TRACE"] = trace
    p = subprocess.run([args.emu_run, *args.program], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    # A run stopped by its failure (_exit, abort) leaves its fabric's segment behind.
    subprocess.run([args.emu_ctl, "rm", fabric, "--force"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    if not os.path.exists(out):
        raise Failed(f"{schedule}: no outcome written (exit {p.returncode})\n{p.stdout}")
    with open(out) as f:
        return json.load(f), p.stdout


def check_trace(path, outcome):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device = [t for t, n in names.items() if n.startswith("device")]
    if len(names) != outcome["actors"] + 1 or len(device) != 1:
        raise Failed(f"trace tracks {sorted(names.values())}: want one per actor "
                     f"({outcome['actors']}) and the device")
    slices = [e for e in events if e.get("ph") == "X"]
    if not any(e["tid"] == device[0] for e in slices):
        raise Failed("trace: no slice on the device's track")
    if not any(e["name"] == "mmio store" for e in slices):
        raise Failed("trace: no register store")
    print(f"trace: {len(slices)} slices on {len(names)} tracks ({', '.join(names.values())})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--emu-run", required=True)
    ap.add_argument("--emu-ctl", required=True)
    ap.add_argument("--emu-shrink", required=True)
    ap.add_argument("--schedule", required=True)
    ap.add_argument("--signature", required=True)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--max-preemptions", type=int, default=3)
    ap.add_argument("--name", default="sched_seed")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    fabric = f"{args.name}-{os.getpid()}"
    try:
        with tempfile.TemporaryDirectory(prefix="emu-sched-seed-") as tmp:
            trace = os.path.join(tmp, "trace.json")
            first, text = run(args, f"{fabric}-found", args.schedule, tmp, trace)
            print(text)
            if first["signature"] != args.signature:
                raise Failed(f"{args.schedule}: signature {first['signature']!r}, "
                             f"want {args.signature!r}")
            check_trace(trace, first)
            replay = "replay:" + first["schedule"]
            for i in range(args.replays):
                o, text = run(args, f"{fabric}-replay", replay, tmp)
                if (o["trace_hash"], o["signature"]) != (first["trace_hash"], args.signature):
                    raise Failed(f"replay {i + 1}: hash {o['trace_hash']} signature "
                                 f"{o['signature']!r}, want {first['trace_hash']}\n{text}")
            print(f"{args.replays} replays in processes of their own: trace hash "
                  f"{first['trace_hash']}, {args.signature}, every time")
            shrunk_json = os.path.join(tmp, "shrunk.json")
            env = dict(os.environ, EMU_FABRIC=f"{fabric}-shrink", EMU_SCHEDULE=args.schedule)
            # Shrunk until within the bound (--goal-preemptions), not as far as it goes.
            p = subprocess.run([args.emu_shrink, "--budget", str(args.budget),
                                "--goal-preemptions", str(args.max_preemptions), "--json",
                                shrunk_json, args.emu_run, *args.program], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(p.stdout)
            if p.returncode != 0:
                raise Failed(f"emu-shrink: exit {p.returncode}")
            with open(shrunk_json) as f:
                shrunk = json.load(f)
            if shrunk["preemptions_after"] > args.max_preemptions:
                raise Failed(f"shrunk to {shrunk['preemptions_after']} preemptions, "
                             f"want at most {args.max_preemptions}")
            o, text = run(args, f"{fabric}-shrunk", "replay:" + shrunk["schedule"], tmp)
            if o["signature"] != args.signature:
                raise Failed(f"the shrunk schedule replayed: {o['signature']!r}\n{text}")
            print(text)
            print(f"PASS found by {args.schedule} ({args.signature}), replayed {args.replays} "
                  f"times to one hash, shrunk to {shrunk['preemptions_after']} preemptions")
    except Failed as e:
        print(f"FAIL {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
