#!/usr/bin/env python3
"""What gprof-run's kernel recorder costs a program that switches threads all the time (issue 4).

usage: scripts/bench/kernel_cost.py BUILD_DIR [--baseline OTHER_BUILD] [--runs N] [--rounds N]
                                    [--pin-cpus A,B] [--cpu-latency-us US]
                                    [--stats-seconds S] [--kinds futex,pipe,convoy,faults,tcp,bulk]
                                    [--count-under 0,20] [--long-seconds S]
                                    [--long-kinds futex,pipe] [--json FILE]

BUILD_DIR holds a built bin/gprof-run and tests/apps/pingpong; this script builds nothing. Run as
root: gprof-run loads BPF, and the second part turns on kernel.bpf_stats_enabled. With --baseline,
OTHER_BUILD's gprof-run (its bin/ and lib/gprof-run/) is measured too, in the same interleaved
rounds (plain, baseline, this build), and its BPF run time in turn with this build's: a change's
before and after, side by side in one run. The pingpong of BUILD_DIR is the one timed.

1. Slowdown. `pingpong futex ROUNDS` and `pingpong pipe ROUNDS` (two threads handing a token back
   and forth: a wakeup and a context switch per hand-over), and `pingpong convoy ROUNDS` (64
   threads taking one pthread mutex), and `pingpong faults ROUNDS` (fresh pages touched: a minor
   page fault each, which the recorder times and counts per thread), and when asked `pingpong tcp
   ROUNDS` (a byte over loopback TCP and back) and `pingpong bulk ROUNDS` (16 KiB writes streamed
   over loopback TCP: every read and write of a TCP socket is recorded) run alternately without and with
   `gprof-run --cuda=off` (the kernel recorder alone), each pair back to back (A B A B ...), RUNS
   times, after one pair of each that is not counted. With --count-under US,US... (default 0,20)
   each round runs plain, then recorded with each `--count-under` in turn (0: every wait recorded,
   as before issue 22; 20: waits under 20 us only counted), so the settings are compared in one
   interleaved run. pingpong times its own rounds, so
   gprof-run's start and its report are not counted. Printed: the median and range of ns per round
   each way, and the median and range of the pairwise ratios recorded/plain; the events recorded
   per round (off-CPU intervals, futex calls and page faults, from report.json) and the slowdown per recorded
   event.
2. BPF run time. With kernel.bpf_stats_enabled=1 (restored afterwards), a long recorded pingpong
   runs in the background; gprof-run's programs (the prog ids in its /proc/PID/fdinfo) are read
   twice with `bpftool prog show --json`, STATS_SECONDS apart, while it runs (then it is
   killed). Printed: for each program, the runs per second and the ns per run over that window
   (--stats-windows N: N windows per build, the builds alternating; the median and range of the
   windows). The programs run for every event of the whole machine (they filter by process tree inside), so other load counts
   too; the stats themselves add two clock reads per run. Over the same window, gprof-run's own
   CPU time (user + system, /proc/PID/stat: draining the ring buffer, compressing and writing
   kernel.gpr) is printed as ms per second.
3. A long run (--long-seconds S, default 60; 0 skips it): for each --long-kinds program and each
   --count-under, one recorded pingpong of about S seconds (rounds from part 1's recorded speed).
   Printed: records written to kernel.gpr per second of the run, kernel.gpr and trace bytes per
   second, and the trace's size; with gprof-run's wall time and peak RSS (its collector).

Everything also goes to --json FILE (default: kernel_cost.json in the results folder of
scripts/results_dir.py: $GPROF_RESULTS_DIR/<today>/, default ~/.cache/gprof-run/results/<today>/).
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

# The results folder outside the source tree (scripts/results_dir.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402

KINDS = ("futex", "pipe", "convoy", "faults")
# Loopback TCP (issue 37: the socket recording's cost), run when asked: a 1-byte ping-pong and a
# stream of 16 KiB writes.
TCP_KINDS = ("tcp", "bulk")
# A convoy's acquisition or a page fault takes a fraction of a hand-over: more of them for a run of
# similar length.
ROUNDS_SCALE = {"futex": 1, "pipe": 1, "convoy": 20, "faults": 8, "tcp": 1, "bulk": 1}
RUN_TIMEOUT_S = 300
LINE = re.compile(r"^pingpong kind=\w+ rounds=\d+ elapsed_ns=(\d+) ns_per_round=([\d.]+)", re.M)
STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
# Where each build's figures go in the results (the baseline's beside this build's).
SETTINGS_KEY = {"build": "by_count_under", "baseline": "baseline_by_count_under"}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--baseline", help="another build to compare with, in the same rounds")
    parser.add_argument("--cpu-latency-us", type=int,
                        help="hold this CPU wake-up latency limit (/dev/cpu_dma_latency) while"
                             " measuring: 0 keeps idle CPUs polling instead of halting, so a"
                             " hand-over's wakeup does not wait for the hypervisor")
    parser.add_argument("--pin-cpus", metavar="A,B",
                        help="run pingpong's two threads on CPUs A and B (PINGPONG_CPUS), plain"
                             " and recorded alike: every hand-over crosses the same two CPUs")
    parser.add_argument("--runs", type=int, default=15, help="pairs per program (default 15)")
    parser.add_argument("--rounds", type=int, default=50_000, help="per run (default 50000)")
    parser.add_argument("--stats-seconds", type=float, default=2.0,
                        help="window over which BPF run time is read (default 2)")
    parser.add_argument("--stats-windows", type=int, default=1,
                        help="BPF run-time windows per program and build, the builds alternating"
                             " (default 1)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="programs to run, comma-separated (default all: %(default)s)")
    parser.add_argument("--count-under", default="0,20",
                        help="gprof-run --count-under settings compared, microseconds "
                             "(default %(default)s)")
    parser.add_argument("--long-seconds", type=float, default=60.0,
                        help="length of part 3's runs (default 60; 0: skip)")
    parser.add_argument("--long-kinds", default="futex,pipe", help="part 3's programs")
    parser.add_argument("--json", default=None, help="result file")
    args = parser.parse_args()
    if args.json is None:
        args.json = os.path.join(results_dir.folder(), "kernel_cost.json")
    args.count_under = [int(us) for us in args.count_under.split(",")]
    args.long_kinds = args.long_kinds.split(",") if args.long_kinds else []
    args.kinds = args.kinds.split(",")
    unknown = [kind for kind in args.kinds if kind not in KINDS + TCP_KINDS]
    if unknown or not args.kinds:
        parser.error(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(KINDS + TCP_KINDS)}")
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
    """Off-CPU intervals, futex calls and page faults (recorded or counted: short waits under
    --count-under too) gprof-run saw, and the events it lost."""
    with open(os.path.join(session_dir, "report.json")) as file:
        session = json.load(file)["session"]
    counts = session["counts"]
    lost = sum(entry.get("count", 0) for entry in session["lost"])
    seen = sum(counts.get(kind, 0) for kind in ("off_cpu_intervals", "futex_calls",
                                                 "slow_page_faults", "quick_page_faults",
                                                 "short_off_cpu_intervals", "short_futex_calls"))
    return seen, lost


def recorded_argv(gprof_run, session_dir, count_under):
    return [gprof_run, "--cuda=off", "-q", f"--count-under={count_under}", "-o", session_dir, "--"]


def measure_slowdown(args, builds, pingpong, scratch):
    """builds: {label: gprof-run path}, each recorded in every round after the plain run."""
    settings = [(label, us) for label in builds for us in args.count_under]
    for kind in args.kinds:  # one round of each, not counted: the first runs pay for cold caches
        rounds = str(args.rounds * ROUNDS_SCALE[kind])
        run([pingpong, kind, rounds])
        for label, us in settings:
            run(recorded_argv(builds[label], os.path.join(scratch, f"warm-{kind}-{label}-{us}"),
                              us) + [pingpong, kind, rounds])
    samples = {kind: {"plain": [], "recorded": {s: [] for s in settings},
                      "events": {s: [] for s in settings},
                      "lost": {s: 0 for s in settings}} for kind in args.kinds}
    for i in range(args.runs):
        for kind in args.kinds:
            sample = samples[kind]
            rounds = args.rounds * ROUNDS_SCALE[kind]
            sample["plain"].append(run([pingpong, kind, str(rounds)]))
            for label, us in settings:
                session_dir = os.path.join(scratch, f"{kind}-{i}-{label}-{us}")
                argv = recorded_argv(builds[label], session_dir, us) + [pingpong, kind, str(rounds)]
                sample["recorded"][label, us].append(run(argv))
                events, lost = recorded_events(session_dir)
                sample["events"][label, us].append(events / rounds)
                sample["lost"][label, us] += lost
                shutil.rmtree(session_dir)
        print(f"  round {i + 1}/{args.runs}: " + ", ".join(
            f"{kind} {samples[kind]['plain'][-1]:.0f} / " +
            " / ".join(f"{samples[kind]['recorded'][s][-1]:.0f}" for s in settings) +
            " ns" for kind in args.kinds), flush=True)

    results = {}
    for kind in args.kinds:
        sample = samples[kind]
        plain = summary(sample["plain"])
        results[kind] = {"plain_ns_per_round": plain}
        for label in builds:
            by_setting = {}
            for us in args.count_under:
                recorded = sample["recorded"][label, us]
                ratios = [r / p for p, r in zip(sample["plain"], recorded)]
                recorded = summary(recorded)
                events = summary(sample["events"][label, us])
                by_setting[str(us)] = {
                    "recorded_ns_per_round": recorded,
                    "ratio_recorded_to_plain": summary(ratios),
                    "recorded_events_per_round": events,
                    "slowdown_ns_per_event": (recorded["median"] - plain["median"]) /
                    events["median"] if events["median"] else None,
                    "lost_events": sample["lost"][label, us],
                }
            results[kind][SETTINGS_KEY[label]] = by_setting
        if "baseline" in builds:  # the same round's runs of the two builds, paired
            for us in args.count_under:
                base = sample["recorded"]["baseline", us]
                build = sample["recorded"]["build", us]
                results[kind]["by_count_under"][str(us)]["ratio_to_baseline"] = summary(
                    [b / a for a, b in zip(base, build)])
    return results


def kernel_records(session_dir):
    """Records in kernel.gpr, from its chunk headers (inject/format/session_format.h: FileHeader,
    whose header_size is at offset 12, then chunks: a 32-byte ChunkHeader with stored_size at 8 and
    record_count at 16, and stored_size bytes)."""
    with open(os.path.join(session_dir, "kernel.gpr"), "rb") as file:
        data = file.read()
    (header_size,) = struct.unpack_from("<I", data, 12)
    offset, records = header_size, 0
    while offset + 32 <= len(data):
        stored, _, count = struct.unpack_from("<III", data, offset + 8)
        records += count
        offset += 32 + stored
    return records


def run_with_peak(argv, timeout_s):
    """Runs argv to its end (killed past timeout_s): its CompletedProcess, with the peak RSS in KiB
    of it and the descendants it waited for (its own rusage from os.wait4: gprof-run, which
    collects in its own process once the command has ended)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (subprocess.CompletedProcess(argv, proc.returncode, out.read().decode(errors="replace"),
                                            err.read().decode(errors="replace")), usage.ru_maxrss)


def measure_long(args, gprof_run, pingpong, scratch, slowdown):
    results = {}
    for kind in args.long_kinds:
        results[kind] = {}
        for us in args.count_under:
            speed = slowdown[kind]["by_count_under"][str(us)]["recorded_ns_per_round"]["median"] \
                if kind in slowdown else 20_000
            rounds = int(args.long_seconds * 1e9 / speed)
            session_dir = os.path.join(scratch, f"long-{kind}-{us}")
            started = time.monotonic()
            done, peak_kib = run_with_peak(recorded_argv(gprof_run, session_dir, us) +
                                           [pingpong, kind, str(rounds)],
                                           timeout_s=args.long_seconds * 20)
            wall_s = time.monotonic() - started
            match = LINE.search(done.stdout)
            if done.returncode != 0 or not match:
                sys.exit(f"kernel_cost: long {kind} run exited {done.returncode}:\n{done.stderr}")
            run_s = int(match.group(1)) / 1e9
            kernel_bytes = os.path.getsize(os.path.join(session_dir, "kernel.gpr"))
            trace_bytes = os.path.getsize(os.path.join(session_dir, "trace.perfetto-trace"))
            records = kernel_records(session_dir)
            seen, lost = recorded_events(session_dir)
            results[kind][str(us)] = {
                "rounds": rounds, "run_s": run_s, "gprof_run_wall_s": wall_s,
                "kernel_records": records, "kernel_records_per_s": records / run_s,
                "kernel_gpr_bytes": kernel_bytes, "kernel_gpr_bytes_per_s": kernel_bytes / run_s,
                "trace_bytes": trace_bytes, "trace_bytes_per_s": trace_bytes / run_s,
                "events_seen": seen, "lost_events": lost, "gprof_run_peak_rss_kib": peak_kib,
            }
            print(f"  long {kind} --count-under={us}: {run_s:.1f} s, {records / run_s:,.0f}"
                  f" records/s, trace {trace_bytes / run_s / 1e6:.2f} MB/s"
                  f" ({trace_bytes / 1e6:.1f} MB), gprof-run {wall_s:.0f} s in all, peak RSS"
                  f" {peak_kib / 1024:.0f} MiB", flush=True)
            shutil.rmtree(session_dir)
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


def kill_tree(pid):
    """Kills process `pid` and its descendants (gprof-run may put its command in a process group
    of its own), children first found, then all at once, parent first."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            for task in os.listdir(f"/proc/{pids[i]}/task"):
                with open(f"/proc/{pids[i]}/task/{task}/children") as file:
                    pids.extend(int(child) for child in file.read().split())
        except OSError:  # gone meanwhile
            pass
        i += 1
    for each in pids:
        try:
            os.kill(each, signal.SIGKILL)
        except ProcessLookupError:
            pass


def measure_bpf(args, gprof_run, pingpong, scratch, recorded_ns_per_round):
    results = {}
    for kind in args.kinds:
        # Long enough for gprof-run to start and the window to pass at the fastest recorded speed
        # seen, with room to spare; ended once the window is read (a hand-over's speed changes
        # tenfold on a machine whose idle CPUs sleep deeply).
        rounds = int(2 * (args.stats_seconds + 4) * 1e9 / recorded_ns_per_round[kind])
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
                sys.exit("kernel_cost: the recorded pingpong ended inside the stats window:\n" +
                         recorder.communicate()[1])
        finally:
            if recorder.poll() is None:
                kill_tree(recorder.pid)
            recorder.communicate()
        shutil.rmtree(session_dir, ignore_errors=True)
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


def print_results(slowdown, bpf, long_runs):
    print("\nslowdown (ns per round: median [min-max]; ratio: median of pairwise recorded/plain)")
    for kind, result in slowdown.items():
        plain = result["plain_ns_per_round"]
        print(f"  {kind:5}  plain {plain['median']:8.0f} [{plain['min']:.0f}-{plain['max']:.0f}]")
        settings = [(label, us, setting) for label, key in SETTINGS_KEY.items()
                    for us, setting in result.get(key, {}).items()]
        for label, us, setting in settings:
            rec, ratio = setting["recorded_ns_per_round"], setting["ratio_recorded_to_plain"]
            events = setting["recorded_events_per_round"]
            per_event = setting["slowdown_ns_per_event"]
            versus = ""
            if "ratio_to_baseline" in setting:
                ratios = setting["ratio_to_baseline"]
                versus = (f"  build/baseline {ratios['median']:.2f} [{ratios['min']:.2f}-"
                          f"{ratios['max']:.2f}, IQR {ratios['q1']:.2f}-{ratios['q3']:.2f}]")
            print(f"  {label:>8} --count-under={us:<3} recorded {rec['median']:8.0f}"
                  f" [{rec['min']:.0f}-{rec['max']:.0f}]  ratio {ratio['median']:.2f}"
                  f" [{ratio['min']:.2f}-{ratio['max']:.2f}, IQR {ratio['q1']:.2f}-{ratio['q3']:.2f}]"
                  f"  {events['median']:.2f} events seen per round"
                  + (f", {per_event:.0f} ns per event" if per_event is not None else "")
                  + f", {setting['lost_events']} lost" + versus)
    if long_runs:
        print("\nlong runs (records written to kernel.gpr, and bytes, per second of the run)")
        for kind, settings in long_runs.items():
            for us, r in settings.items():
                print(f"  {kind:5} --count-under={us:<3} {r['run_s']:.1f} s:"
                      f" {r['kernel_records_per_s']:10,.0f} records/s,"
                      f" kernel.gpr {r['kernel_gpr_bytes_per_s'] / 1e3:9.1f} kB/s,"
                      f" trace {r['trace_bytes_per_s'] / 1e3:9.1f} kB/s"
                      f" ({r['trace_bytes'] / 1e6:.1f} MB; gprof-run {r['gprof_run_wall_s']:.0f} s,"
                      f" peak RSS {r['gprof_run_peak_rss_kib'] / 1024:.0f} MiB)")
    print("\nBPF run time (kernel.bpf_stats_enabled=1, during a recorded pingpong; ns/run: median"
          " [min-max] over the windows)")
    for label, by_kind in bpf.items():
        for kind, windows in by_kind.items():
            print(f"  {label} {kind}: " + ", ".join(
                f"{w['run_time_ns_per_s'] / 1e6:.1f}" for w in windows) + " ms of BPF per second,"
                  f" gprof-run " + ", ".join(f"{w['recorder_cpu_ns_per_s'] / 1e6:.0f}"
                                              for w in windows) + " ms of CPU per second")
            for name, ns in program_ns(windows).items():
                runs_per_s = statistics.median(
                    p["runs_per_s"] for w in windows for p in w["programs"] if p["name"] == name)
                print(f"    {name:24} {runs_per_s:10.0f} runs/s {statistics.median(ns):8.0f}"
                      f" [{min(ns):.0f}-{max(ns):.0f}] ns/run")


def program_ns(windows):
    """ns per run of each program that ran, by name, one value per window."""
    ns = {}
    for window in windows:
        for prog in window["programs"]:
            if prog["runs"]:
                ns.setdefault(prog["name"], []).append(prog["ns_per_run"])
    return ns


def main():
    args = parse_args()
    gprof_run = os.path.join(args.build_dir, "bin", "gprof-run")
    pingpong = os.path.join(args.build_dir, "tests", "apps", "pingpong")
    builds = {"build": gprof_run}
    if args.baseline:  # first in every round: a slower one never follows the other's warm caches
        builds = {"baseline": os.path.join(args.baseline, "bin", "gprof-run"), "build": gprof_run}
    for path in list(builds.values()) + [pingpong]:
        if not os.access(path, os.X_OK):
            sys.exit(f"kernel_cost: {path} is missing: build gprof-run and pingpong first")
    if os.geteuid() != 0 or shutil.which("bpftool") is None:
        sys.exit("kernel_cost: run as root, with bpftool installed")

    if args.pin_cpus:  # inherited by pingpong, and through gprof-run by the recorded one
        os.environ["PINGPONG_CPUS"] = args.pin_cpus
    load_before = os.getloadavg()
    latency_request = None  # the limit holds while the file is open
    if args.cpu_latency_us is not None:
        latency_request = open("/dev/cpu_dma_latency", "wb", buffering=0)
        latency_request.write(struct.pack("<i", args.cpu_latency_us))
    with tempfile.TemporaryDirectory(prefix="kernel_cost-") as scratch:
        print(f"slowdown: {args.runs} pairs x {len(args.kinds)} programs, {args.rounds} rounds each")
        slowdown = measure_slowdown(args, builds, pingpong, scratch)
        with open(STATS_SYSCTL) as file:
            stats_was = file.read().strip()
        try:
            with open(STATS_SYSCTL, "w") as file:
                file.write("1")
            default = str(args.count_under[-1])
            recorded = {k: v["by_count_under"][default]["recorded_ns_per_round"]["min"]
                        for k, v in slowdown.items()}
            bpf = {label: {kind: [] for kind in args.kinds} for label in builds}
            for _ in range(args.stats_windows):
                for label, path in builds.items():
                    for kind, window in measure_bpf(args, path, pingpong, scratch,
                                                    recorded).items():
                        bpf[label][kind].append(window)
        finally:
            with open(STATS_SYSCTL, "w") as file:
                file.write(stats_was)
        long_runs = {}
        if args.long_seconds > 0 and args.long_kinds:
            print(f"long runs: {args.long_seconds:.0f} s each")
            long_runs = measure_long(args, gprof_run, pingpong, scratch, slowdown)

    print_results(slowdown, bpf, long_runs)
    result = {
        "benchmark": "kernel_cost",
        "command": sys.argv,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"kernel": platform.release(), "cpus": len(os.sched_getaffinity(0)),
                    "load_before": load_before, "load_after": os.getloadavg()},
        "gprof_run": os.path.abspath(gprof_run),
        "baseline_gprof_run": os.path.abspath(builds["baseline"]) if args.baseline else None,
        "runs": args.runs,
        "rounds": args.rounds,
        "count_under_us": args.count_under,
        "cpu_latency_us": args.cpu_latency_us,
        "pin_cpus": args.pin_cpus,
        "slowdown": slowdown,
        "bpf": bpf,
        "long_runs": long_runs,
    }
    with open(args.json, "w") as file:
        json.dump(result, file, indent=1)
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
