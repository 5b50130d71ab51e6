#!/usr/bin/env python3
"""How fast a session grows on disk during a long run (issue 6, item 5): runs CMD under gprof-run,
samples the session directory's size every --every seconds while CMD runs, and prints the growth
rate (least-squares slope of size over time, after --skip seconds of start-up) in MiB per minute,
the final size, and how long gprof-run took after CMD ended (the collector's merge and report).

usage: session_growth.py [--gprof PATH] [--gprof-args "..."] [--every S] [--skip S]
                         [--json FILE] -- CMD [ARGS...]

--json FILE: default session_growth.json in the results folder of
scripts/results_dir.py: $GPROF_RESULTS_DIR/<today>/, default ~/.cache/gprof-run/results/<today>/.

e.g. on the GPU machine, the ResNet-50 loop for two minutes:
  session_growth.py --gprof .gpu/build/bin/gprof-run -- \\
      python3 scripts/bench/gpu_workload.py --only resnet50 --steps 1 --seconds 120
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

# The results folder outside the source tree (scripts/results_dir.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402


def directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass  # a file renamed or removed between listing and stat
    return total


def target_exited(session):
    """gprof-run writes its trace and reports only after CMD has exited; its files are the sign
    (sizes sampled after that would count the trace being written as growth)."""
    return any(os.path.exists(os.path.join(session, name))
               for name in ("trace.perfetto-trace", "report.txt", "report.json"))


def slope(points):
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_b = sum(b for _, b in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (b - mean_b) for t, b in points) / var if var else 0.0


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("--gprof", default="build/bin/gprof-run")
    parser.add_argument("--gprof-args", default="-q")
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--skip", type=float, default=10.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.json is None:
        args.json = os.path.join(results_dir.folder(), "session_growth.json")
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command to run (put it after --)")

    scratch = tempfile.mkdtemp(prefix="gprof-growth-")
    session = os.path.join(scratch, "session")
    full = [args.gprof, *shlex.split(args.gprof_args), "-o", session, "--", *cmd]
    print("running:", shlex.join(full), flush=True)
    start = time.monotonic()
    process = subprocess.Popen(full)
    samples, ended_at = [], None
    while process.poll() is None:
        now = time.monotonic() - start
        if ended_at is None and target_exited(session):
            ended_at = now
        if ended_at is None:
            samples.append((now, directory_bytes(session)))
        time.sleep(args.every)
    wall = time.monotonic() - start
    final = directory_bytes(session)
    steady = [(t, b) for t, b in samples if t >= args.skip]
    rate = slope(steady)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "command": full,
        "status": process.returncode,
        "wall_s": round(wall, 2),
        "samples": [[round(t, 2), b] for t, b in samples],
        "growth_mib_per_min": round(rate * 60 / 2**20, 3),
        "final_mib": round(final / 2**20, 3),
        # what the recorders wrote, without the trace and reports the collector adds at the end
        "recorded_mib": round(sum(os.path.getsize(os.path.join(session, name))
                                  for name in os.listdir(session) if name.endswith(".gpr"))
                              / 2**20, 3) if os.path.isdir(session) else 0,
        "files": sorted(os.listdir(session)) if os.path.isdir(session) else [],
    }
    with open(args.json, "w") as out:
        json.dump(result, out, indent=1)
    print(f"written: {args.json}")
    print(f"status {process.returncode}; session grew {result['growth_mib_per_min']} MiB/min "
          f"over {len(steady)} samples after {args.skip:g} s; final {result['final_mib']} MiB "
          f"({result['recorded_mib']} MiB recorded, the rest is the trace and reports); "
          f"wall {wall:.1f} s; session kept in {session}")
    return 0 if process.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
