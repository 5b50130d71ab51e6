#!/usr/bin/env python3
"""What a CUDA call costs when gprof-run -p records it by uprobes on libcuda, against the injected
library's interposition (issue 38, item 2).

usage: scripts/bench/uprobe_cost.py BUILD_DIR [--runs N] [--calls C] [--json FILE]

BUILD_DIR holds a built bin/gprof-run, tests/apps/attach_app and the fake CUDA runtime with its
libcuda.so.1; this script builds nothing. Run as root: gprof-run loads BPF.

`attach_app calls C` times C cudaStreamQuery calls on an idle stream of the fake runtime (one
cuStreamQuery of its libcuda.so.1 each; the program's own clock, so gprof-run's start and report
are not counted) once a line comes on its stdin. RUNS rounds (default 7) after one round not
counted, each round three ways back to back:
  plain      the program alone;
  preload    under `gprof-run --cuda=preload -- attach_app calls C`: the injected library
             interposes the runtime (the kernel recorder on too, as by default);
  uprobes    the program started alone, then `gprof-run -p PID` attached (kernel recorder, uprobe and
             uretprobe on every cu* entry point of libcuda.so.1), the calls timed once gprof-run
             says it records.
Printed: each way's median ns per call and range, the pairwise ratios to plain of the same round
(median, min-max), and the extra ns per call each way adds (median of the pairwise differences).

Everything also goes to --json FILE (default: uprobe_cost.json in the results folder of
scripts/results_dir.py).
"""
import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402

LINE = re.compile(r"calls n=\d+ ns_per_call=([0-9.]+)")
TIMEOUT_S = 300


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200000)
    parser.add_argument("--json")
    return parser.parse_args()


def figure(text):
    match = LINE.search(text)
    if not match:
        sys.exit(f"uprobe_cost: no figure in the program's output: {text!r}")
    return float(match.group(1))


def plain(app, calls):
    out = subprocess.run([app, "calls", str(calls)], input="go\n", capture_output=True,
                         text=True, timeout=TIMEOUT_S, check=True)
    return figure(out.stdout)


def preload(gprof, app, calls, workdir):
    out = subprocess.run([gprof, "--cuda=preload", "-q", "-o", tempfile.mkdtemp(dir=workdir), "--",
                          app, "calls", str(calls)], input="go\n", capture_output=True, text=True,
                         timeout=TIMEOUT_S, check=True)
    return figure(out.stdout)


def uprobes(gprof, app, calls, workdir):
    target = subprocess.Popen([app, "calls", str(calls)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    profiler = subprocess.Popen([gprof, "-p", str(target.pid), "-q", "-o",
                                 tempfile.mkdtemp(dir=workdir)],
                                stderr=subprocess.PIPE, text=True)
    # Its line "recording N running process ..." comes once every probe is attached.
    for line in profiler.stderr:
        if "recording" in line:
            break
    else:
        sys.exit("uprobe_cost: gprof-run -p ended before recording")
    target.stdin.write("go\n")
    target.stdin.flush()
    result = figure(target.stdout.readline())
    profiler.send_signal(signal.SIGINT)
    profiler.communicate(timeout=TIMEOUT_S)
    target.stdin.close()
    target.wait(timeout=TIMEOUT_S)
    if profiler.returncode != 0:
        sys.exit(f"uprobe_cost: gprof-run -p exited {profiler.returncode}")
    return result


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    args = parse_args()
    gprof = os.path.join(args.build_dir, "bin", "gprof-run")
    app = os.path.join(args.build_dir, "tests", "apps", "attach_app")
    ways = {"plain": [], "preload": [], "uprobes": []}
    with tempfile.TemporaryDirectory(prefix="uprobe_cost.") as workdir:
        for round_number in range(args.runs + 1):
            figures = {"plain": plain(app, args.calls),
                       "preload": preload(gprof, app, args.calls, workdir),
                       "uprobes": uprobes(gprof, app, args.calls, workdir)}
            if round_number == 0:
                continue  # warm-up
            for way, value in figures.items():
                ways[way].append(value)
    result = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
              "cpus": os.cpu_count(), "runs": args.runs, "calls": args.calls,
              "ns_per_call": {way: spread(values) for way, values in ways.items()},
              "ratio_to_plain": {}, "extra_ns_per_call": {}}
    print(f"{args.runs} rounds of {args.calls} cudaStreamQuery calls (fake runtime), ns per call:")
    for way, values in ways.items():
        s = spread(values)
        print(f"  {way:8} {s['median']:9.1f}  ({s['min']:.1f}-{s['max']:.1f})")
    for way in ("preload", "uprobes"):
        ratios = [a / b for a, b in zip(ways[way], ways["plain"])]
        extra = [a - b for a, b in zip(ways[way], ways["plain"])]
        result["ratio_to_plain"][way] = spread(ratios)
        result["extra_ns_per_call"][way] = spread(extra)
        r, e = spread(ratios), spread(extra)
        print(f"  {way} / plain: {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}), "
              f"+{e['median']:.0f} ns per call ({e['min']:.0f} to {e['max']:.0f})")
    uprobe_vs_preload = [a / b for a, b in zip(ways["uprobes"], ways["preload"])]
    result["uprobes_to_preload"] = spread(uprobe_vs_preload)
    u = spread(uprobe_vs_preload)
    print(f"  uprobes / preload: {u['median']:.2f}x ({u['min']:.2f}-{u['max']:.2f})")
    path = args.json or os.path.join(results_dir.folder(), "uprobe_cost.json")
    with open(path, "w") as out:
        json.dump(result, out, indent=2)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
