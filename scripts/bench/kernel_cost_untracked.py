#!/usr/bin/env python3
"""What gprof-run's BPF programs cost the machine's other processes: their early exits.

usage: scripts/bench/kernel_cost_untracked.py [--windows N] [--seconds S] BUILD_DIR...

For each window and each build in turn: `gprof-run --cuda=off -- sleep` records a process that
does nothing, while `pingpong futex` (BUILD_DIR's first, unrecorded) hands over between two
threads; the programs' run counts and times are read with kernel.bpf_stats_enabled=1 (restored
afterwards) over S seconds. Printed: each program's ns per run, median over the windows, per
build. Run as root, with bpftool.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

import kernel_cost


def window(build, pingpong, seconds):
    with tempfile.TemporaryDirectory(prefix="kernel_cost_untracked-") as scratch:
        recorder = subprocess.Popen(
            [os.path.join(build, "bin", "gprof-run"), "--cuda=off", "-q", "-o",
             os.path.join(scratch, "session"), "--", "sleep", str(int(seconds + 5))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)  # loaded and attached
        load = subprocess.Popen([pingpong, "futex", "100000000"], stdout=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            ids = kernel_cost.prog_ids(recorder.pid)
            before = kernel_cost.read_programs(ids)
            time.sleep(seconds)
            after = kernel_cost.read_programs(ids)
        finally:
            load.kill()
            load.wait()
            recorder.wait()
    ns = {}
    for prog_id, prog in after.items():
        runs = prog.get("run_cnt", 0) - before.get(prog_id, {}).get("run_cnt", 0)
        run_ns = prog.get("run_time_ns", 0) - before.get(prog_id, {}).get("run_time_ns", 0)
        if runs > 1000:
            ns[prog["name"]] = run_ns / runs
    return ns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("builds", nargs="+")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    pingpong = os.path.join(args.builds[0], "tests", "apps", "pingpong")
    results = {build: {} for build in args.builds}
    with open(kernel_cost.STATS_SYSCTL) as file:
        stats_was = file.read().strip()
    try:
        with open(kernel_cost.STATS_SYSCTL, "w") as file:
            file.write("1")
        for _ in range(args.windows):
            for build in args.builds:
                for name, ns in window(build, pingpong, args.seconds).items():
                    results[build].setdefault(name, []).append(ns)
    finally:
        with open(kernel_cost.STATS_SYSCTL, "w") as file:
            file.write(stats_was)
    print(f"load {os.getloadavg()}; ns per run, median of {args.windows} windows: "
          + ", then ".join(args.builds))
    for name in sorted({name for build in results.values() for name in build}):
        print(f"  {name:26}" + "".join(
            f"{statistics.median(results[build][name]):8.0f}" if name in results[build]
            else "       -" for build in args.builds))


if __name__ == "__main__":
    main()
