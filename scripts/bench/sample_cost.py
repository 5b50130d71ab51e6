#!/usr/bin/env python3
"""What on-CPU samples with native stacks cost (issue 35): the program's slowdown, the bytes the
stack copies add, and the collector's time to unwind them.

usage: scripts/bench/sample_cost.py BUILD_DIR [--runs N] [--threads T] [--rounds R]
                                    [--sample-hz HZ] [--json FILE]

BUILD_DIR holds a built bin/gprof-run and tests/apps/native_holder_app (built without frame
pointers); this script builds nothing. Run as root: gprof-run loads BPF.

`native_holder_app burn T R` (T threads, default one per CPU, each sorting a 4096-element array R
times with a slow comparator: fixed CPU work, timed by the program itself, so gprof-run's start
and report are not counted) runs in interleaved rounds, each round three ways back to back:
plain, under `gprof-run --cuda=off --sample-hz 0` (the kernel recorder, samples off), and under
`gprof-run --cuda=off --sample-hz HZ` (samples on, default 99 Hz per CPU: a native stack copy at
each tick, and the collector unwinds every copy). RUNS rounds (default 7) after one round not
counted. Printed: the median and range of the program's time each way and of the pairwise ratios
to plain of the same round; for the runs with samples, from report.json: samples taken, the bytes
of native stack records written (the ring buffer's and kernel.gpr's share, before compression)
per second of the program, and the collector's unwind time per copy (libdwfl, every copy of the
run; the first of each process pays for opening its files).

Everything also goes to --json FILE (default: sample_cost.json in the results folder of
scripts/results_dir.py: $GPROF_RESULTS_DIR/<today>/, default ~/.cache/gprof-run/results/<today>/).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# The results folder outside the source tree (scripts/results_dir.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402

LINE = re.compile(r"^burn threads=\d+ rounds=\d+ elapsed_ns=(\d+)", re.M)
RUN_TIMEOUT_S = 600


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sample-hz", type=int, default=99)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.json is None:
        args.json = os.path.join(results_dir.folder(), "sample_cost.json")
    return args


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    found = LINE.search(done.stdout)
    if not found:
        sys.exit(f"no burn line from {' '.join(argv)}:\n{done.stdout[-2000:]}")
    return int(found.group(1))


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    args = parse_args()
    gprof = os.path.join(args.build_dir, "bin", "gprof-run")
    app = os.path.join(args.build_dir, "tests", "apps", "native_holder_app")
    for path in (gprof, app):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path}: not built")
    program = [app, "burn", str(args.threads), str(args.rounds)]
    ways = {
        "plain": lambda d: program,
        "samples_off": lambda d: [gprof, "-q", "--cuda=off", "--sample-hz", "0", "-o", d, "--"]
        + program,
        "samples_on": lambda d: [gprof, "-q", "--cuda=off", "--sample-hz", str(args.sample_hz),
                                 "-o", d, "--"] + program,
    }
    times = {way: [] for way in ways}
    native = []
    work = tempfile.mkdtemp(prefix="sample-cost-")
    try:
        for round_index in range(args.runs + 1):
            for way, argv_of in ways.items():
                session = os.path.join(work, f"{way}-{round_index}")
                elapsed = run(argv_of(session))
                if round_index == 0:
                    continue  # the warm-up round
                times[way].append(elapsed)
                if way == "samples_on":
                    with open(os.path.join(session, "report.json")) as f:
                        stacks = json.load(f)["session"]["native_stacks"]
                    stacks["program_ns"] = elapsed
                    native.append(stacks)
                shutil.rmtree(session, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "command": " ".join(["native_holder_app", "burn", str(args.threads), str(args.rounds)]),
        "sample_hz": args.sample_hz,
        "runs": args.runs,
        "ms": {way: spread([t / 1e6 for t in values]) for way, values in times.items()},
        "ratio_to_plain": {
            way: spread([t / p for t, p in zip(times[way], times["plain"])])
            for way in ("samples_off", "samples_on")
        },
        "samples_on_vs_off": spread(
            [a / b for a, b in zip(times["samples_on"], times["samples_off"])]),
        "native": {
            "samples": spread([n["samples"] for n in native]),
            "record_bytes_per_s": spread(
                [n["record_bytes"] / (n["program_ns"] / 1e9) for n in native]),
            "bytes_per_record": spread(
                [n["record_bytes"] / max(1, n["samples"] + n["wakers"]) for n in native]),
            "unwind_us_per_copy": spread(
                [n["unwind_ns"] / 1e3 / max(1, n["unwound"]) for n in native]),
            "cut_short_stacks": spread([n["distinct_stacks_cut_short"] for n in native]),
            "truncated_stacks": spread([n["distinct_stacks_truncated"] for n in native]),
            "deepest_frames": spread([n["deepest_frames"] for n in native]),
        },
    }
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"written: {args.json}")

    def row(label, s, unit="", digits=3):
        return (f"  {label:<28} {s['median']:.{digits}f}{unit} "
                f"[{s['min']:.{digits}f}-{s['max']:.{digits}f}]")

    print(f"{result['command']}, {args.runs} interleaved rounds, samples at {args.sample_hz} Hz, "
          f"{result['cpus']} CPUs, {result['date']}")
    for way in ways:
        print(row(f"{way} ms", result["ms"][way], digits=1))
    print(row("samples off / plain", result["ratio_to_plain"]["samples_off"], "x"))
    print(row("samples on / plain", result["ratio_to_plain"]["samples_on"], "x"))
    print(row("samples on / samples off", result["samples_on_vs_off"], "x"))
    n = result["native"]
    print(row("native samples per run", n["samples"], digits=0))
    print(row("native record bytes/s", n["record_bytes_per_s"], digits=0))
    print(row("bytes per record", n["bytes_per_record"], digits=0))
    print(row("unwind us per copy", n["unwind_us_per_copy"], digits=1))
    print(row("distinct stacks cut short", n["cut_short_stacks"], digits=0))
    print(row("  of them by the copy's size", n["truncated_stacks"], digits=0))
    print(row("deepest stack, frames", n["deepest_frames"], digits=0))


if __name__ == "__main__":
    main()
