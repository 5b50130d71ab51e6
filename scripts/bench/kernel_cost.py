#!/usr/bin/env python3
"""What gprof-run's kernel recorder costs a program that switches threads all the time (issue 4).

usage: scripts/bench/kernel_cost.py BUILD_DIR [--runs N] [--rounds N] [--stats-seconds S]
                                    [--kinds futex,pipe,convoy,faults] [--json FILE]

BUILD_DIR holds a built bin/gprof-run and tests/apps/pingpong; this script builds nothing. Run as
root: gprof-run loads BPF, and the second part turns on kernel.bpf_stats_enabled.

1. Slowdown. `pingpong futex ROUNDS` and `pingpong pipe ROUNDS` (two threads handing a token back
   and forth: a wakeup and a context switch per hand-over), and `pingpong convoy ROUNDS` (64
   threads taking one pthread mutex), and `pingpong faults ROUNDS` (fresh pages touched: a minor
   page fault each, which the recorder times and counts per thread) run alternately without and with
   `gprof-run --cuda=off` (the kernel recorder alone), each pair back to back (A B A B ...), RUNS
   times, after one pair of each that is not counted. pingpong times its own rounds, so
   gprof-run's start and its report are not counted. Printed: the median and range of ns per round
   each way, and the median and range of the pairwise ratios recorded/plain; the events recorded
   per round (off-CPU intervals, futex calls and page faults, from report.json) and the slowdown per recorded
   event.
2. BPF run time. With kernel.bpf_stats_enabled=1 (restored afterwards), a long recorded pingpong
   runs in the background; gprof-run's programs (the prog ids in its /proc/PID/fdinfo) are read
   twice with `bpftool prog show --json`, STATS_SECONDS apart, while it runs. Printed: for each
   program, the runs per second and the ns per run over that window. The programs run for every
   event of the whole machine (they filter by process tree inside), so other load counts too; the
   stats themselves add two clock reads per run. Over the same window, gprof-run's own CPU time
   (user + system, /proc/PID/stat: draining the ring buffer, compressing and writing kernel.gpr)
   is printed as ms per second.

Everything also goes to --json FILE (default: kernel_cost.json in the current directory).
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
import time

KINDS = ("futex", "pipe", "convoy", "faults")
# A convoy's acquisition or a page fault takes a fraction of a hand-over: more of them for a run of
# similar length.
ROUNDS_SCALE = {"futex": 1, "pipe": 1, "convoy": 20, "faults": 8}
RUN_TIMEOUT_S = 300
LINE = re.compile(r"^pingpong kind=\w+ rounds=\d+ elapsed_ns=(\d+) ns_per_round=([\d.]+)", re.M)
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--runs", type=int, default=15, help="pairs per program (default 15)")
    parser.add_argument("--rounds", type=int, default=50_000, help="per run (default 50000)")
    parser.add_argument("--stats-seconds", type=float, default=2.0,
                        help="window over which BPF run time is read (default 2)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="programs to run, comma-separated (default all: %(default)s)")
    parser.add_argument("--json", default="kernel_cost.json", help="result file")
    args = parser.parse_args()
    args.kinds = args.kinds.split(",")
    unknown = [kind for kind in args.kinds if kind not in KINDS]
    if unknown or not args.kinds:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS)}")
    return args


def summary(values):
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else ordered * 3
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1],
            "q1": quartiles[0], "q3": quartiles[2], "values": values}


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        sys.exit(f"kernel_cost: {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    match = LINE.search(done.stdout)
    if not match:
        sys.exit(f"kernel_cost: no pingpong line in the output of {' '.join(argv)}")
    return float(match.group(2))


def recorded_events(session_dir):
    """Off-CPU intervals, futex calls and page faults (recorded or counted) gprof-run saw, and the
    events it lost."""
    with open(os.path.join(session_dir, "report.json")) as file:
        session = json.load(file)["session"]
    counts = session["counts"]
    lost = sum(entry.get("count", 0) for entry in session["lost"])
    seen = sum(counts.get(kind, 0) for kind in ("off_cpu_intervals", "futex_calls",
                                                 "slow_page_faults", "quick_page_faults"))
    return seen, lost


def measure_slowdown(args, gprof_run, pingpong, scratch):
    for kind in args.kinds:  # one pair of each, not counted: the first runs pay for cold caches
        run([pingpong, kind, str(args.rounds * ROUNDS_SCALE[kind])])
        run([gprof_run, "--cuda=off", "-q", "-o", os.path.join(scratch, f"warm-{kind}"), "--",
             pingpong, kind, str(args.rounds * ROUNDS_SCALE[kind])])
    samples = {kind: {"plain": [], "recorded": [], "events": [], "lost": 0} for kind in args.kinds}
    for i in range(args.runs):
        for kind in args.kinds:
            sample = samples[kind]
            sample["plain"].append(run([pingpong, kind, str(args.rounds * ROUNDS_SCALE[kind])]))
            session_dir = os.path.join(scratch, f"{kind}-{i}")
            sample["recorded"].append(run([gprof_run, "--cuda=off", "-q", "-o", session_dir, "--",
                                           pingpong, kind, str(args.rounds * ROUNDS_SCALE[kind])]))
            events, lost = recorded_events(session_dir)
            sample["events"].append(events / (args.rounds * ROUNDS_SCALE[kind]))
            sample["lost"] += lost
            shutil.rmtree(session_dir)
        print(f"  pair {i + 1}/{args.runs}: " + ", ".join(
            f"{kind} {samples[kind]['plain'][-1]:.0f} / {samples[kind]['recorded'][-1]:.0f} ns"
            for kind in args.kinds), flush=True)

    results = {}
    for kind in args.kinds:
        sample = samples[kind]
        ratios = [r / p for p, r in zip(sample["plain"], sample["recorded"])]
        plain, recorded = summary(sample["plain"]), summary(sample["recorded"])
        events = summary(sample["events"])
        results[kind] = {
            "plain_ns_per_round": plain,
            "recorded_ns_per_round": recorded,
            "ratio_recorded_to_plain": summary(ratios),
            "recorded_events_per_round": events,
            "slowdown_ns_per_event": (recorded["median"] - plain["median"]) / events["median"],
            "lost_events": sample["lost"],
        }
    return results


def prog_ids(pid):
    """The BPF programs process `pid` holds, from the prog_id lines of its fds' fdinfo."""
    ids = set()
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, fd)) as file:
                text = file.read()
        except OSError:  # closed meanwhile
            continue
        if "prog_type:" in text:
            ids.update(int(m) for m in re.findall(r"^prog_id:\s*(\d+)", text, re.M))
    return ids


def read_programs(ids):
    shown = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"], check=True,
                                      capture_output=True, text=True).stdout)
    return {prog["id"]: prog for prog in shown if prog["id"] in ids}


def process_cpu_s(pid):
    """User + system CPU seconds of process `pid` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_bpf(args, gprof_run, pingpong, scratch, recorded_ns_per_round):
    results = {}
    for kind in args.kinds:
        # Long enough for gprof-run to start and the window to pass, with room to spare.
        rounds = int((args.stats_seconds + 4) * 1e9 / recorded_ns_per_round[kind])
        session_dir = os.path.join(scratch, f"stats-{kind}")
        recorder = subprocess.Popen([gprof_run, "--cuda=off", "-q", "-o", session_dir, "--",
                                     pingpong, kind, str(rounds)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            ids = set()
            while not ids and time.monotonic() < deadline and recorder.poll() is None:
                time.sleep(0.05)
                ids = prog_ids(recorder.pid)
            if not ids:
                sys.exit(f"kernel_cost: gprof-run (pid {recorder.pid}) loaded no BPF program")
            time.sleep(1.0)  # past the program's start
            ids = prog_ids(recorder.pid)  # all of them: the first look may come mid-load
            before, start = read_programs(ids), time.monotonic()
            cpu_before = process_cpu_s(recorder.pid)
            time.sleep(args.stats_seconds)
            cpu_after = process_cpu_s(recorder.pid)
            after, window_s = read_programs(ids), time.monotonic() - start
            if recorder.poll() is not None:
                sys.exit("kernel_cost: the recorded pingpong ended inside the stats window")
            out, err = recorder.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.wait()
        if recorder.returncode != 0:
            sys.exit(f"kernel_cost: recorded pingpong exited {recorder.returncode}:\n{err}")
        shutil.rmtree(session_dir)
        programs = []
        for prog_id, prog in sorted(after.items()):
            runs = prog.get("run_cnt", 0) - before.get(prog_id, {}).get("run_cnt", 0)
            run_ns = prog.get("run_time_ns", 0) - before.get(prog_id, {}).get("run_time_ns", 0)
            programs.append({"id": prog_id, "name": prog.get("name", ""), "type": prog["type"],
                             "runs": runs, "run_time_ns": run_ns,
                             "runs_per_s": runs / window_s,
                             "ns_per_run": run_ns / runs if runs else None})
        results[kind] = {"window_s": window_s, "rounds": rounds, "programs": programs,
                         "run_time_ns_per_s": sum(p["run_time_ns"] for p in programs) / window_s,
                         "recorder_cpu_ns_per_s": (cpu_after - cpu_before) * 1e9 / window_s}
    return results


def print_results(slowdown, bpf):
    print("\nslowdown (ns per round: median [min-max]; ratio: median of pairwise recorded/plain)")
    for kind, result in slowdown.items():
        plain, rec = result["plain_ns_per_round"], result["recorded_ns_per_round"]
        ratio, events = result["ratio_recorded_to_plain"], result["recorded_events_per_round"]
        print(f"  {kind:5}  plain {plain['median']:8.0f} [{plain['min']:.0f}-{plain['max']:.0f}]"
              f"  recorded {rec['median']:8.0f} [{rec['min']:.0f}-{rec['max']:.0f}]"
              f"  ratio {ratio['median']:.2f} [{ratio['min']:.2f}-{ratio['max']:.2f},"
              f" IQR {ratio['q1']:.2f}-{ratio['q3']:.2f}]")
        print(f"         {events['median']:.2f} events recorded per round,"
              f" {result['slowdown_ns_per_event']:.0f} ns slowdown per event,"
              f" {result['lost_events']} lost")
    print("\nBPF run time (kernel.bpf_stats_enabled=1, during a recorded pingpong)")
    for kind, result in bpf.items():
        print(f"  {kind}: {result['run_time_ns_per_s'] / 1e6:.1f} ms of BPF per second,"
              f" gprof-run {result['recorder_cpu_ns_per_s'] / 1e6:.0f} ms of CPU per second,"
              f" over {result['window_s']:.1f} s")
        for prog in result["programs"]:
            if prog["runs"]:
                print(f"    {prog['name']:24} {prog['runs_per_s']:10.0f} runs/s"
                      f" {prog['ns_per_run']:8.0f} ns/run")


def main():
    args = parse_args()
    gprof_run = os.path.join(args.build_dir, "bin", "gprof-run")
    pingpong = os.path.join(args.build_dir, "tests", "apps", "pingpong")
    for path in (gprof_run, pingpong):
        if not os.access(path, os.X_OK):
            sys.exit(f"kernel_cost: {path} is missing: build gprof-run and pingpong first")
    if os.geteuid() != 0 or shutil.which("bpftool") is None:
        sys.exit("kernel_cost: run as root, with bpftool installed")

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kernel_cost-") as scratch:
        print(f"slowdown: {args.runs} pairs x {len(args.kinds)} programs, {args.rounds} rounds each")
        slowdown = measure_slowdown(args, gprof_run, pingpong, scratch)
        with open(STATS_SYSCTL) as file:
            stats_was = file.read().strip()
        try:
            with open(STATS_SYSCTL, "w") as file:
                file.write("1")
            recorded = {k: v["recorded_ns_per_round"]["median"] for k, v in slowdown.items()}
            bpf = measure_bpf(args, gprof_run, pingpong, scratch, recorded)
        finally:
            with open(STATS_SYSCTL, "w") as file:
                file.write(stats_was)

    print_results(slowdown, bpf)
    result = {
        "benchmark": "kernel_cost",
        "command": sys.argv,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cpus": len(os.sched_getaffinity(0)),
                    "load_before": load_before, "load_after": os.getloadavg()},
        "gprof_run": os.path.abspath(gprof_run),
        "runs": args.runs,
        "rounds": args.rounds,
        "slowdown": slowdown,
        "bpf": bpf,
    }
    with open(args.json, "w") as file:
        json.dump(result, file, indent=1)
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
