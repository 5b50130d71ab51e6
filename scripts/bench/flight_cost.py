#!/usr/bin/env python3
"""What the flight recorder costs (--flight-recorder, issue 39 item 6).

usage: scripts/bench/flight_cost.py BUILD_DIR [--seconds N] [--keep SEC] [--rounds N]
                                    [--calls N] [--switches N] [--json FILE]

BUILD_DIR holds a built bin/gprof-run, tests/apps/flight_app, tests/apps/capture_app and
tests/apps/pingpong; this script builds nothing. Run as root (the kernel recorder loads BPF).

1. Over time: `flight_app --period-us 0` (a worker launching and synchronizing fake kernels back to
   back, and a thread allocating every 100 ms) for --seconds under `gprof-run --flight-recorder
   KEEP`, and then the same under a normal recording. Every second: the resident memory of
   gprof-run and of the program (VmRSS), and the session directory's disk use (allocated blocks)
   and length (st_size). Under the flight recorder disk use should stay flat after KEEP seconds;
   under a normal recording it grows with time.
2. Per call, interleaved rounds: `capture_app --bench-calls CALLS` (cudaStreamQuery in a row) and
   `pingpong futex SWITCHES`, plain, recorded, and recorded under `--flight-recorder KEEP`;
   medians and the spread of the pairwise ratios to plain.

Everything also goes to --json FILE (default: flight_cost.json in the results folder of
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
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def disk(directory):
    used = length = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            used += st.st_blocks * 512
            length += st.st_size
    return used, length


def over_time(gprof, app, seconds, keep, work, flight):
    session = os.path.join(work, "flight" if flight else "normal")
    argv = [gprof, "-q", "-o", session]
    if flight:
        argv += ["--flight-recorder", str(keep)]
    argv += ["--", app, "--calm-s", str(seconds), "--period-us", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = []
    start = time.monotonic()
    while proc.poll() is None:
        time.sleep(1)
        targets = children(proc.pid)
        used, length = disk(session)
        samples.append({"t_s": round(time.monotonic() - start, 1),
                        "gprof_rss_kib": rss_kib(proc.pid),
                        "target_rss_kib": sum(rss_kib(p) for p in targets),
                        "disk_used_bytes": used, "disk_length_bytes": length})
    proc.wait()
    return samples


def summary(samples, keep):
    """Medians of the samples after the first `keep` seconds, and the growth over that part."""
    alive = [s for s in samples if s["gprof_rss_kib"] > 0 and s["target_rss_kib"] > 0] or samples
    later = [s for s in alive if s["t_s"] > keep + 2] or alive
    out = {}
    for key in ("gprof_rss_kib", "target_rss_kib", "disk_used_bytes", "disk_length_bytes"):
        values = [s[key] for s in later]
        out[key] = {"first": values[0], "last": values[-1], "max": max(values),
                    "median": statistics.median(values)}
    return out


def timed(argv, per):
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    match = re.search(r"elapsed_ns=(\d+)", out)
    if not match:
        raise SystemExit(f"no timing in the output of {argv}: {out!r}")
    return int(match.group(1)) / per


def per_call(gprof, build, args, work):
    calls = [os.path.join(build, "tests", "apps", "capture_app"), "--bench-calls", str(args.calls)]
    switches = [os.path.join(build, "tests", "apps", "pingpong"), "futex", str(args.switches)]
    count = [0]

    def session():
        count[0] += 1
        return ["-q", "-o", os.path.join(work, f"c{count[0]}")]

    flight = ["--flight-recorder", str(args.keep)]
    kinds = {
        "calls": (calls, args.calls, {
            "plain": lambda: [],
            "recorded": lambda: [gprof, *session(), "--no-kernel", "--"],
            "flight": lambda: [gprof, *session(), "--no-kernel", *flight, "--"],
        }),
        "switches": (switches, args.switches, {
            "plain": lambda: [],
            "recorded": lambda: [gprof, *session(), "--cuda=off", "--"],
            "flight": lambda: [gprof, *session(), "--cuda=off", *flight, "--"],
        }),
    }
    results = {}
    for kind, (argv, per, ways) in kinds.items():
        times = {way: [] for way in ways}
        for round_number in range(args.rounds + 1):  # the first round warms up
            for way, prefix in ways.items():
                ns = timed(prefix() + argv, per)
                if round_number > 0:
                    times[way].append(ns)
        results[kind] = {}
        for way, values in times.items():
            ratios = [v / p for v, p in zip(values, times["plain"])]
            vs_recorded = [v / r for v, r in zip(values, times["recorded"])]
            results[kind][way] = {"ns": values, "median_ns": statistics.median(values),
                                  "median_ratio": statistics.median(ratios),
                                  "ratio_range": [min(ratios), max(ratios)],
                                  "median_ratio_to_recorded": statistics.median(vs_recorded)}
            print(f"{kind:9} {way:9} {statistics.median(values):10.1f} ns  "
                  f"x{statistics.median(ratios):.3f} of plain ({min(ratios):.3f}-{max(ratios):.3f}),"
                  f" x{statistics.median(vs_recorded):.3f} of recorded")
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--keep", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300000)
    parser.add_argument("--switches", type=int, default=100000)
    parser.add_argument("--json")
    args = parser.parse_args()
    gprof = os.path.join(args.build_dir, "bin", "gprof-run")
    app = os.path.join(args.build_dir, "tests", "apps", "flight_app")
    results = {"keep_s": args.keep, "seconds": args.seconds}
    with tempfile.TemporaryDirectory() as work:
        for name, flight in (("flight", True), ("normal", False)):
            samples = over_time(gprof, app, args.seconds, args.keep, work, flight)
            results[name] = {"samples": samples, "summary": summary(samples, args.keep)}
            s = results[name]["summary"]
            print(f"{name:7} after {args.keep + 2} s: disk used {s['disk_used_bytes']['first'] / 2**20:.1f}"
                  f" -> {s['disk_used_bytes']['last'] / 2**20:.1f} MiB (max {s['disk_used_bytes']['max'] / 2**20:.1f}),"
                  f" length {s['disk_length_bytes']['last'] / 2**20:.1f} MiB;"
                  f" gprof-run RSS {s['gprof_rss_kib']['first'] / 1024:.1f} -> {s['gprof_rss_kib']['last'] / 1024:.1f} MiB;"
                  f" target RSS {s['target_rss_kib']['first'] / 1024:.1f} -> {s['target_rss_kib']['last'] / 1024:.1f} MiB")
        results["per_call"] = per_call(gprof, args.build_dir, args, work)
    path = args.json or os.path.join(results_dir.folder(), "flight_cost.json")
    with open(path, "w") as out:
        json.dump(results, out, indent=1)
    print(f"written: {path}")


if __name__ == "__main__":
    main()
