#!/usr/bin/env python3
"""What a session costs outside its capture windows (--capture-range, issue 39).

usage: scripts/bench/capture_cost.py BUILD_DIR [--rounds N] [--calls N] [--switches N] [--faults N]
                                     [--json FILE] [--baseline OTHER_BUILD_DIR]
                                     [--only calls|switches|faults]

BUILD_DIR holds a built bin/gprof-run, tests/apps/capture_app and tests/apps/pingpong; this script
builds nothing. Run as root (the kernel recorder loads BPF). Each round runs, back to back and in
turn:

- CUDA calls: `capture_app --bench-calls CALLS` (cudaStreamQuery in a row on the fake runtime,
  timed by the program itself) plain; under `gprof-run --no-kernel` (every call recorded); and
  under `gprof-run --no-kernel --capture-range=manual` with no window ever opened (every call
  checked against the windows and dropped).
- Thread switches: `pingpong futex SWITCHES` plain; under `gprof-run --cuda=off` (the kernel
  recorder records every wait); and under `gprof-run --cuda=off --capture-range=manual` with no
  window (the BPF programs run and drop every event at their window check).
- Page faults: `pingpong faults FAULTS` (one thread, a minor fault per round: a workload of one
  BPF program that only starts intervals, and of no thread switch), the same three ways.

With --baseline, OTHER_BUILD_DIR's gprof-run (another commit's build) runs too, recorded and
outside a window, in the same rounds: a change's effect without the machine's drift between runs.

Printed: for each, the median ns per call (or per round trip) and the median of the pairwise ratios
to plain. Everything also goes to --json FILE (default: capture_cost.json in the results folder of
scripts/results_dir.py).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402


def timed(argv, pattern, per):
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    match = re.search(pattern, out)
    if not match:
        raise SystemExit(f"no timing in the output of {argv}: {out!r}")
    return int(match.group(1)) / per


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300000)
    parser.add_argument("--switches", type=int, default=100000)
    parser.add_argument("--json")
    parser.add_argument("--baseline")
    parser.add_argument("--faults", type=int, default=300000)
    parser.add_argument("--only", choices=["calls", "switches", "faults"])
    args = parser.parse_args()
    gprof = os.path.join(args.build_dir, "bin", "gprof-run")
    baseline = os.path.join(args.baseline, "bin", "gprof-run") if args.baseline else None
    app = os.path.join(args.build_dir, "tests", "apps", "capture_app")
    pingpong = os.path.join(args.build_dir, "tests", "apps", "pingpong")
    calls = [app, "--bench-calls", str(args.calls)]
    switches = [pingpong, "futex", str(args.switches)]
    faults = [pingpong, "faults", str(args.faults)]
    call_time = r"elapsed_ns=(\d+)"
    switch_time = r"elapsed_ns=(\d+)"
    with tempfile.TemporaryDirectory() as work:
        count = [0]

        def session():
            count[0] += 1
            return ["-q", "-o", os.path.join(work, f"s{count[0]}")]

        kinds = {
            "calls": (calls, call_time, args.calls, {
                "plain": lambda: [],
                "recorded": lambda: [gprof, *session(), "--no-kernel", "--"],
                "outside a window": lambda: [gprof, *session(), "--no-kernel",
                                             "--capture-range=manual", "--"],
            }),
            "switches": (switches, switch_time, args.switches, {
                "plain": lambda: [],
                "recorded": lambda: [gprof, *session(), "--cuda=off", "--"],
                "outside a window": lambda: [gprof, *session(), "--cuda=off",
                                             "--capture-range=manual", "--"],
            }),
            "faults": (faults, switch_time, args.faults, {
                "plain": lambda: [],
                "recorded": lambda: [gprof, *session(), "--cuda=off", "--"],
                "outside a window": lambda: [gprof, *session(), "--cuda=off",
                                             "--capture-range=manual", "--"],
            }),
        }
        if baseline:
            kinds["calls"][3]["baseline recorded"] = lambda: [baseline, *session(), "--no-kernel",
                                                              "--"]
            kinds["calls"][3]["baseline outside"] = lambda: [baseline, *session(), "--no-kernel",
                                                             "--capture-range=manual", "--"]
            kinds["switches"][3]["baseline recorded"] = lambda: [baseline, *session(),
                                                                 "--cuda=off", "--"]
            kinds["switches"][3]["baseline outside"] = lambda: [baseline, *session(), "--cuda=off",
                                                                "--capture-range=manual", "--"]
            kinds["faults"][3]["baseline recorded"] = kinds["switches"][3]["baseline recorded"]
            kinds["faults"][3]["baseline outside"] = kinds["switches"][3]["baseline outside"]
        if args.only:
            kinds = {args.only: kinds[args.only]}
        results = {}
        for kind, (argv, pattern, per, ways) in kinds.items():
            times = {way: [] for way in ways}
            for round_number in range(args.rounds + 1):  # the first round warms up
                for way, prefix in ways.items():
                    ns = timed(prefix() + argv, pattern, per)
                    if round_number > 0:
                        times[way].append(ns)
            plain = times["plain"]
            results[kind] = {}
            for way, values in times.items():
                ratios = [v / p for v, p in zip(values, plain)]
                results[kind][way] = {"ns": values, "median_ns": statistics.median(values),
                                      "median_ratio": statistics.median(ratios)}
                print(f"{kind:9} {way:17} {statistics.median(values):10.1f} ns  "
                      f"x{statistics.median(ratios):.3f} (ratios {min(ratios):.3f}-{max(ratios):.3f})")
    path = args.json or os.path.join(results_dir.folder(), "capture_cost.json")
    with open(path, "w") as out:
        json.dump(results, out, indent=1)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
