#!/usr/bin/env python3
"""How fast `gprof-run merge` explains N sessions together, and its peak memory, against `gprof-run
report` explaining the same sessions one at a time (issue 37, item 6: the merge at the collector's
single-session rate or better, within its memory budget).

usage: scripts/bench/merge_scale.py BUILD_DIR [--counts 2,8,32] [--records 1000000] [--runs 3]
                                    [--collector-memory SIZE] [--tmp DIR] [--sessions DIR,DIR...]

BUILD_DIR holds bin/gprof-run and bin/bench_session_gen; nothing is built. bench_session_gen
writes one synthetic session of --records records (scripts/bench/session_gen.cc); it is copied N
times. For each N, RUNS rounds, each pinned to CPU 0 and under GNU time (`%e %M`): `gprof-run
merge -o OUT` over the N copies, and `gprof-run report` over each copy in turn (the same work
one session at a time), in alternating order. Printed per N: merge wall seconds (median, min-max),
records per second, peak RSS; the same for the N reports (their summed wall time, their largest
peak); and the ratio merge / reports of wall time per round (median, min-max) and of peak RSS.
The sessions and outputs are under --tmp (default: a new folder in $TMPDIR), removed at the end.

--sessions DIR,DIR...: recorded sessions (the ranks of a job: TCP transfers between them, ranks
that wait for each other) instead of a synthetic one, copied in turn until there are N, so that
the steps across sessions (matching messages, placing clocks, following chains into another
session) cost what they cost. Only the recording files and session.json are copied.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def timed(command):
    """(wall seconds, peak RSS KiB) of `command` pinned to CPU 0 under GNU time."""
    result = subprocess.run(["taskset", "-c", "0", "/usr/bin/time", "-f", "%e %M"] + command,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(command)}\n{result.stderr[-2000:]}")
    wall, rss = result.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss)


def clear_outputs(directory):
    for name in ("report.txt", "report.json", "report.html", "trace.perfetto-trace"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            os.unlink(path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--counts", default="2,8,32")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--collector-memory", default="")
    parser.add_argument("--tmp", default="")
    parser.add_argument("--sessions", default="")
    args = parser.parse_args()
    gprof = os.path.join(args.build, "bin", "gprof-run")
    generator = os.path.join(args.build, "bin", "bench_session_gen")
    work = args.tmp or tempfile.mkdtemp(prefix="gprof-merge-scale-")
    memory = ["--collector-memory", args.collector_memory] if args.collector_memory else []
    recorded = [d for d in args.sessions.split(",") if d]
    try:
        if recorded:
            sources = recorded
        else:
            sources = [os.path.join(work, "source")]
            subprocess.run([generator, sources[0], str(args.records)], check=True,
                           stdout=subprocess.DEVNULL)
        records_each = args.records if not recorded else None
        unit = "records" if records_each else "sessions"
        for count in [int(c) for c in args.counts.split(",")]:
            copies = []
            for i in range(count):
                copy = os.path.join(work, f"n{count}-r{i}")
                source = sources[i % len(sources)]
                shutil.copytree(source, copy, ignore=lambda d, names: [
                    n for n in names if not (n.endswith(".gpr") or n == "session.json")])
                copies.append(copy)
            merges, reports, ratios = [], [], []
            for run in range(args.runs):
                out = os.path.join(work, f"merged-{count}-{run}")

                def merge():
                    return timed([gprof, "merge", "-o", out] + memory + copies)

                def report_each():
                    wall, peak = 0.0, 0
                    for copy in copies:
                        clear_outputs(copy)
                        w, rss = timed([gprof, "report"] + memory + [copy])
                        wall += w
                        peak = max(peak, rss)
                    return wall, peak

                if run % 2 == 0:
                    m, r = merge(), report_each()
                else:
                    r, m = report_each(), merge()
                shutil.rmtree(out, ignore_errors=True)
                merges.append(m)
                reports.append(r)
                ratios.append(m[0] / r[0])
            mw = [m[0] for m in merges]
            rw = [r[0] for r in reports]
            if records_each is None:
                size = sum(os.path.getsize(os.path.join(c, n)) for c in copies
                           for n in os.listdir(c) if n.endswith(".gpr"))
                records = count  # no record count for recorded sessions: rates are per session
                print(f"{count} recorded sessions ({size / 2**20:.1f} MiB of recordings):")
            else:
                records = count * records_each
                print(f"{count} sessions of {records_each:,} records ({records:,} in all):")
            print(f"  merge   {statistics.median(mw):.2f} s ({min(mw):.2f}-{max(mw):.2f}), "
                  f"{records / statistics.median(mw):,.0f} {unit}/s, "
                  f"peak RSS {max(m[1] for m in merges) / 1024:.0f} MiB")
            print(f"  reports {statistics.median(rw):.2f} s ({min(rw):.2f}-{max(rw):.2f}) one at a "
                  f"time, {records / statistics.median(rw):,.0f} {unit}/s, largest peak RSS "
                  f"{max(r[1] for r in reports) / 1024:.0f} MiB")
            print(f"  merge / reports: wall {statistics.median(ratios):.2f}x "
                  f"({min(ratios):.2f}-{max(ratios):.2f}), peak RSS "
                  f"{max(m[1] for m in merges) / max(r[1] for r in reports):.2f}x")
            for copy in copies:
                shutil.rmtree(copy)
    finally:
        if not args.tmp:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
