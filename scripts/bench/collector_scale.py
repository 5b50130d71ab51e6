#!/usr/bin/env python3
"""How fast the collector turns a session into its trace and reports, and how much memory it takes,
as the session grows (issue 6, part 4).

usage: scripts/bench/collector_scale.py BUILD_DIR [--sizes 1000000,10000000,50000000] [--runs 3]
                                        [--baseline OTHER_BUILD_DIR] [--threads 8]
                                        [--timeout-s 600] [--max-rss-gib G]
                                        [--perf-size N] [--tmp DIR] [--json FILE]
                                        [--memory-limit-mib M] [--collector-memory SIZE]

BUILD_DIR holds a built bin/gprof-run and bin/bench_session_gen (`cmake --build BUILD_DIR --target
gprof-run bench_session_gen`); this script builds nothing.

For each size, bench_session_gen writes a synthetic session of that many records under --tmp (CUDA
calls in inject-<pid>.gpr; futex calls, off-CPU intervals with wakers and kernel stacks in
kernel.gpr; see scripts/bench/session_gen.cc), then `BUILD_DIR/bin/gprof-run report DIR` runs on it
RUNS times, pinned to CPU 0 (`taskset -c 0`), under GNU time (`/usr/bin/time -f '%e %M'`: wall
seconds and peak RSS). Without GNU time, the wall clock is measured here and peak RSS is the
ru_maxrss of the run's own rusage (os.wait4, i.e. RUSAGE_CHILDREN for that one child). The outputs
are removed before each run, so each run's trace.perfetto-trace, report.txt and report.json are its
own; a run that writes no trace is reported as such, and what it did write is measured. The session
directory is removed afterwards.

A run is stopped (SIGKILL) when it passes --timeout-s (default 600) or when its resident memory,
sampled every 0.1 s, passes --max-rss-gib (default: half of MemAvailable at the start): that
outcome is the size's result, and its remaining runs are skipped.

With --baseline, every run of BUILD_DIR's gprof-run is paired with a run of OTHER_BUILD_DIR's on
the same session, in alternating order (A B, B A, A B, ...), so that both see the same machine
load; each size then also reports the baseline's figures and the ratios BUILD_DIR / baseline of
wall time (median and min-max of the per-pair ratios), peak RSS and trace bytes. The session is
generated once, by BUILD_DIR's bench_session_gen.

Printed per size: records, wall seconds (median, min-max), records per second, CPU seconds (user +
system, from the run's rusage; on a busy machine wall time also counts others' use of CPU 0) and
records per CPU second, peak RSS (MiB and
bytes per record), trace bytes and bytes per record, report.json bytes; then how peak memory grows
from the smallest size to the largest. With --perf-size N (default 10000000 when it is one of the
sizes; 0: never), one more run of that size, not counted, under `perf record --call-graph dwarf`,
gives the share of each collector phase (inclusive samples) and the hottest functions (self).

Peak anonymous RSS (RssAnon of the run's processes, sampled every 0.1 s) is printed beside peak
RSS: the collector's own memory, without the page cache of the files it maps, which the kernel can
drop. With --memory-limit-mib M (root), every run is in a memory cgroup of M MiB (cgroup v2, else
v1's memory controller), as in a container: a run the OOM killer stops is reported as such, and
the cgroup's peak charge (its memory and page cache) is printed. --collector-memory SIZE is passed
to BUILD_DIR's gprof-run only (a baseline from before the option would refuse it).

Everything also goes to --json FILE (default collector_scale.json in the results folder of
scripts/results_dir.py: $GPROF_RESULTS_DIR/<today>/, default ~/.cache/gprof-run/results/<today>/)
and the printed text to the same path with .txt.
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
import subprocess
import sys
import tempfile
import time

# The results folder outside the source tree (scripts/results_dir.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTPUTS = ("trace.perfetto-trace", "report.txt", "report.json")
POLL_S = 0.1
# The collector's phases (collector/collect.cc: Collect), as perf names their functions.
PHASES = (
    ("read session (decode, sort, index)", r"gprof::collector::ReadSession\b"),
    ("analysis (the whole pipeline)", r"gprof::collector::Analyze\b"),
    ("analysis: the waits (stalls, causes, GPU gaps)", r"gprof::collector::DiagnoseWaits\b"),
    ("analysis: the slow calls", r"gprof::collector::ExplainSlowCalls\b"),
    ("text report", r"gprof::collector::RenderTextReport\b"),
    ("Perfetto trace", r"gprof::collector::WritePerfettoTrace\b"),
    # WriteJsonReport makes the report's pieces and writes them (its text included);
    # RenderJsonReport made the whole tree before builds that stream it.
    ("report.json model (and text, where streamed)",
     r"gprof::collector::(RenderJsonReport|WriteJsonReport)\b"),
    ("report.json text (json dump)", r"nlohmann::.*basic_json<.*>::dump$"),
)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--sizes", default="1000000,10000000,50000000",
                        help="records per session, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per size (default 3)")
    parser.add_argument("--baseline", default=None,
                        help="another build dir whose gprof-run runs interleaved with BUILD_DIR's")
    parser.add_argument("--threads", type=int, default=8, help="threads of the synthetic process")
    parser.add_argument("--timeout-s", type=float, default=600, help="per run (default 600)")
    parser.add_argument("--max-rss-gib", type=float, default=None,
                        help="stop a run whose RSS passes this (default: MemAvailable / 2)")
    parser.add_argument("--perf-size", type=int, default=None,
                        help="profile one extra run of this size with perf (0: none)")
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="where sessions are written")
    parser.add_argument("--json", default=None, help="result file")
    parser.add_argument("--memory-limit-mib", type=int, default=None,
                        help="run each gprof-run in a memory cgroup of this many MiB (root)")
    parser.add_argument("--collector-memory", default=None,
                        help="pass --collector-memory SIZE to BUILD_DIR's gprof-run")
    args = parser.parse_args()
    args.sizes = [int(size.replace("_", "")) for size in args.sizes.split(",") if size]
    if args.perf_size is None:
        args.perf_size = 10_000_000 if 10_000_000 in args.sizes else 0
    if args.json is None:
        args.json = os.path.join(results_dir.folder(), "collector_scale.json")
    return args


def meminfo():
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            values[key] = int(rest.split()[0]) * 1024
    return values


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def gnu_time():
    path = "/usr/bin/time"
    if not os.access(path, os.X_OK):
        return None
    probe = subprocess.run([path, "--version"], capture_output=True, text=True)
    return path if "GNU" in probe.stdout + probe.stderr else None


def git_head():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tree_memory_bytes(root_pid):
    """Resident and anonymous (RssAnon: what the kernel cannot drop without swap) bytes of
    root_pid and its descendants, from /proc (0 when they are gone)."""
    rss, anon, pending = 0, 0, [root_pid]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    pending.extend(int(child) for child in f.read().split())
        except (OSError, ValueError):
            continue
    return rss, anon


class MemoryCgroup:
    """A memory cgroup of `limit` bytes that runs are started in (v2 where its memory controller
    can be enabled, else v1), removed at the end."""

    def __init__(self, limit):
        self.limit = limit
        name = f"gprof-collector-scale-{os.getpid()}"
        v2_roots = [root for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
                    if os.path.exists(os.path.join(root, "cgroup.controllers"))]
        self.path = None
        for root in v2_roots:
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "memory" not in f.read().split():
                    continue
            try:
                with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
                self.path, self.version = os.path.join(root, name), 2
                break
            except OSError:
                continue
        if self.path is None:
            self.path, self.version = os.path.join("/sys/fs/cgroup/memory", name), 1
        try:
            os.makedirs(self.path, exist_ok=True)
            limit_file = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
            with open(os.path.join(self.path, limit_file), "w") as f:
                f.write(str(limit))
        except OSError as error:
            sys.exit(f"cannot make a memory cgroup at {self.path} (root is needed): {error}")

    def _read(self, name):
        try:
            with open(os.path.join(self.path, name)) as f:
                return f.read()
        except OSError:
            return ""

    def reset_peak(self):
        if self.version == 1:
            with open(os.path.join(self.path, "memory.max_usage_in_bytes"), "w") as f:
                f.write("0")

    def peak(self):
        """Peak charge since reset_peak (v2: since the cgroup was made, when memory.peak exists)."""
        text = self._read("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")
        return int(text) if text.strip().isdigit() else None

    def oom_kills(self):
        text = self._read("memory.events" if self.version == 2 else "memory.oom_control")
        match = re.search(r"oom_kill (\d+)", text)
        return int(match.group(1)) if match else 0

    def enter(self):
        """For preexec_fn: moves the calling (child) process into the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def leaf_pid(root_pid):
    """The deepest descendant of root_pid (gprof-run under taskset and time), or root_pid."""
    pid = root_pid
    while True:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[0])


def measured_run(command, time_path, timeout_s, rss_cap, cgroup=None):
    """Runs `command` pinned to CPU 0 (in `cgroup` when given); returns wall, peak RSS and how it
    ended."""
    fd, time_file = tempfile.mkstemp(prefix="collector-scale-time-")
    os.close(fd)
    err_fd, err_file = tempfile.mkstemp(prefix="collector-scale-err-")
    wrapped = ["taskset", "-c", "0"]
    if time_path:
        wrapped += [time_path, "-f", "%e %M", "-o", time_file]
    wrapped += command
    load = loadavg()
    if cgroup:
        cgroup.reset_peak()
        kills_before = cgroup.oom_kills()
    start = time.monotonic()
    proc = subprocess.Popen(wrapped, stdout=subprocess.DEVNULL, stderr=err_fd,
                            preexec_fn=cgroup.enter if cgroup else None)
    os.close(err_fd)
    outcome, sampled_peak, anon_peak, status, usage = "ok", 0, 0, None, None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        elapsed = time.monotonic() - start
        rss, anon = tree_memory_bytes(proc.pid)
        sampled_peak = max(sampled_peak, rss)
        anon_peak = max(anon_peak, anon)
        if outcome == "ok" and (elapsed > timeout_s or rss > rss_cap):
            outcome = (f"stopped after {elapsed:.0f} s: over the {timeout_s:.0f} s limit"
                       if elapsed > timeout_s else
                       f"stopped after {elapsed:.0f} s: RSS {rss / 2**30:.1f} GiB passed the "
                       f"{rss_cap / 2**30:.1f} GiB cap")
            os.kill(leaf_pid(proc.pid), signal.SIGKILL)
        time.sleep(POLL_S)
    outer_wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall, peak_kib = outer_wall, usage.ru_maxrss
    measured_by = "os.wait4 rusage (no GNU time)"
    if time_path:
        with open(time_file) as f:
            lines = [line for line in f.read().splitlines() if re.match(r"^[\d.]+ \d+$", line)]
        if lines:
            wall_text, rss_text = lines[-1].split()
            wall, peak_kib = float(wall_text), int(rss_text)
            measured_by = "GNU time %e %M"
    with open(err_file, errors="replace") as f:
        stderr_tail = f.read()[-2000:]
    os.unlink(time_file)
    os.unlink(err_file)
    cgroup_peak = cgroup.peak() if cgroup else None
    if cgroup and outcome == "ok" and cgroup.oom_kills() > kills_before:
        outcome = f"killed by the OOM killer in a {cgroup.limit >> 20} MiB cgroup"
    if outcome == "ok" and proc.returncode != 0:
        outcome = f"exit status {proc.returncode}"
    # CPU seconds (user + system) of the run's process tree, from its rusage: on a shared machine
    # the wall clock also counts the time other work held the CPU, this does not.
    cpu = usage.ru_utime + usage.ru_stime
    return {"outcome": outcome, "exit_status": proc.returncode, "wall_s": wall, "cpu_s": cpu,
            "outer_wall_s": round(outer_wall, 3), "peak_rss_bytes": peak_kib * 1024,
            "sampled_peak_rss_bytes": sampled_peak, "sampled_peak_anon_bytes": anon_peak,
            "cgroup_peak_bytes": cgroup_peak, "measured_by": measured_by,
            "loadavg_before": load, "stderr_tail": stderr_tail if outcome != "ok" else ""}


def generate(build_dir, directory, size, threads):
    command = [os.path.join(build_dir, "bin", "bench_session_gen"), directory, str(size),
               "--threads", str(threads)]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"bench_session_gen failed ({result.returncode}): {result.stderr.strip()}")
    counts = dict(re.findall(r"(\w+)=([\d.]+)", result.stdout))
    counts = {key: float(value) if "." in value else int(value) for key, value in counts.items()}
    files = {name: os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)}
    return {"seconds": round(elapsed, 3), "counts": counts, "files": files,
            "input_bytes": sum(files.values())}


def symbol_name(text):
    """A perf report symbol column without the IPC columns that follow it ("-  -")."""
    return re.sub(r"\s+-\s+-$", "", text.strip()).strip()


def profile(build_dir, directory, size):
    """One uncounted run under perf: each phase's share of the samples, and the hottest functions."""
    if shutil.which("perf") is None:
        return {"note": "perf not found"}
    data = tempfile.mktemp(prefix="collector-scale-perf-")
    for name in OUTPUTS:
        if os.path.exists(os.path.join(directory, name)):
            os.unlink(os.path.join(directory, name))
    command = ["taskset", "-c", "0", "perf", "record", "-q", "-F", "199", "--call-graph",
               "dwarf,16384", "-o", data, "--", os.path.join(build_dir, "bin", "gprof-run"),
               "report", directory]
    recorded = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if recorded.returncode != 0 or not os.path.exists(data):
        return {"note": "perf record failed: " + recorded.stderr[-500:]}
    report_base = ["perf", "report", "-i", data, "--stdio", "--no-inline", "--sort", "symbol",
                   "-g", "none"]
    children = subprocess.run(report_base + ["--children", "--percent-limit", "0.1"],
                              capture_output=True, text=True).stdout
    self_only = subprocess.run(report_base + ["--no-children", "--percent-limit", "1"],
                               capture_output=True, text=True).stdout
    os.unlink(data)
    samples = re.search(r"# Samples: (\S+)", children)
    inclusive = {}
    for line in children.splitlines():
        match = re.match(r"^\s+([\d.]+)%\s+([\d.]+)%\s+\[[.k]\]\s+(.*?)\s*$", line)
        if match:
            inclusive.setdefault(symbol_name(match.group(3)), float(match.group(1)))
    phases = []
    for label, function in PHASES:
        share = next((value for name, value in inclusive.items() if re.match(function, name)),
                     0.0)
        phases.append({"phase": label, "function": function, "inclusive_percent": share})
    hottest = []
    for line in self_only.splitlines():
        match = re.match(r"^\s+([\d.]+)%\s+\[([.k])\]\s+(.*?)\s*$", line)
        if match:
            hottest.append({"self_percent": float(match.group(1)),
                            "kernel": match.group(2) == "k",
                            "symbol": symbol_name(match.group(3))[:160]})
    return {"size": size, "samples": samples.group(1) if samples else None,
            "command": " ".join(command), "phases": phases, "hottest_self": hottest[:15]}


def summary(values):
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1]}


def mib(value):
    return value / 2**20


def run_once(build, directory, time_path, timeout_s, rss_cap, extra=(), cgroup=None):
    """One measured `gprof-run report` of `directory` by `build`'s binary, its outputs' sizes added."""
    for name in OUTPUTS:
        if os.path.exists(os.path.join(directory, name)):
            os.unlink(os.path.join(directory, name))
    measured = measured_run([os.path.join(build, "bin", "gprof-run"), "report", directory,
                             *extra], time_path, timeout_s, rss_cap, cgroup)
    measured["outputs"] = {name: os.path.getsize(os.path.join(directory, name))
                           for name in OUTPUTS if os.path.exists(os.path.join(directory, name))}
    return measured


def summarize(runs, records, gen):
    """One build's figures at one size: medians and spread of its successful runs."""
    ok_runs = [run for run in runs if run["outcome"] == "ok"]
    if not ok_runs:
        return {"outcome": runs[0]["outcome"], "wall_s_at_stop": runs[0]["wall_s"],
                "peak_rss_bytes_at_stop": runs[0]["peak_rss_bytes"]}
    walls = summary([run["wall_s"] for run in ok_runs])
    cpus = summary([run["cpu_s"] for run in ok_runs])
    rss = summary([run["peak_rss_bytes"] for run in ok_runs])
    anon = summary([run["sampled_peak_anon_bytes"] for run in ok_runs])
    outputs = ok_runs[-1]["outputs"]
    trace_bytes = outputs.get("trace.perfetto-trace")
    result = {
        "outcome": "ok",
        "wall_s": walls,
        "records_per_s": records / walls["median"],
        "cpu_s": cpus,
        "records_per_cpu_s": records / cpus["median"],
        "peak_rss_bytes": rss,
        "peak_rss_bytes_per_record": rss["median"] / records,
        "sampled_peak_anon_bytes": anon,
        "trace_bytes": trace_bytes,
        "trace_bytes_per_record": trace_bytes / records if trace_bytes else None,
        "report_json_bytes": outputs.get("report.json"),
        "report_txt_bytes": outputs.get("report.txt"),
        "input_bytes_per_record": gen["input_bytes"] / records,
    }
    missing = [name for name in OUTPUTS if name not in outputs]
    if missing:
        result["missing_outputs"] = missing
    return result


def ratios(runs, baseline_runs):
    """BUILD_DIR / baseline, pair by pair (run i of each), over the pairs where both succeeded."""
    pairs = [(a, b) for a, b in zip(runs, baseline_runs)
             if a["outcome"] == "ok" and b["outcome"] == "ok"]
    if not pairs:
        return None

    def of(key):
        return summary([a[key] / b[key] for a, b in pairs])

    trace = [(a["outputs"].get("trace.perfetto-trace"), b["outputs"].get("trace.perfetto-trace"))
             for a, b in pairs]
    return {"pairs": len(pairs), "wall_s": of("wall_s"), "cpu_s": of("cpu_s"),
            "peak_rss_bytes": of("peak_rss_bytes"),
            "trace_bytes": trace[-1][0] / trace[-1][1] if all(trace[-1]) else None}


def main():
    args = parse_args()
    build_dir = os.path.abspath(args.build_dir)
    baseline_dir = os.path.abspath(args.baseline) if args.baseline else None
    for binary in ("gprof-run", "bench_session_gen"):
        if not os.access(os.path.join(build_dir, "bin", binary), os.X_OK):
            sys.exit(f"{build_dir}/bin/{binary} not found: build the gprof-run and "
                     "bench_session_gen targets first")
    if baseline_dir and not os.access(os.path.join(baseline_dir, "bin", "gprof-run"), os.X_OK):
        sys.exit(f"{baseline_dir}/bin/gprof-run not found")
    if shutil.which("taskset") is None:
        sys.exit("taskset not found (util-linux)")
    time_path = gnu_time()
    memory = meminfo()
    rss_cap = (args.max_rss_gib * 2**30 if args.max_rss_gib else memory["MemAvailable"] / 2)
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    result = {
        "benchmark": "collector_scale",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
        "git_head": git_head(),
        "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "kernel": platform.release(),
                    "mem_total_bytes": memory["MemTotal"],
                    "mem_available_bytes": memory["MemAvailable"]},
        "method": {"pinning": "taskset -c 0",
                   "timer": f"{time_path} -f '%e %M'" if time_path else "os.wait4 rusage",
                   "runs": args.runs, "threads": args.threads, "timeout_s": args.timeout_s,
                   "rss_cap_bytes": int(rss_cap),
                   "memory_limit_mib": args.memory_limit_mib,
                   "collector_memory": args.collector_memory},
        "sizes": [],
    }
    say(f"collector scale: {result['machine']['cpu']}, {os.cpu_count()} CPUs, "
        f"{mib(memory['MemTotal']) / 1024:.1f} GiB RAM ({mib(memory['MemAvailable']) / 1024:.1f} "
        f"available), kernel {platform.release()}, git {result['git_head'][:12]}")
    say(f"each run: taskset -c 0 {result['method']['timer']} {build_dir}/bin/gprof-run report DIR; "
        f"{args.runs} runs per size; stopped past {args.timeout_s:.0f} s or "
        f"{rss_cap / 2**30:.1f} GiB RSS")
    if baseline_dir:
        result["method"]["baseline_build_dir"] = baseline_dir
        say(f"baseline: {baseline_dir}/bin/gprof-run, one run paired with each run above, "
            "alternating which goes first")
    cgroup = MemoryCgroup(args.memory_limit_mib << 20) if args.memory_limit_mib else None
    if cgroup:
        say(f"every run in the memory cgroup {cgroup.path} (v{cgroup.version}), limited to "
            f"{args.memory_limit_mib} MiB")
    extra = ["--collector-memory", args.collector_memory] if args.collector_memory else []
    if extra:
        say(f"{build_dir}/bin/gprof-run runs with {' '.join(extra)}")
    if not time_path:
        say("note: GNU time not found at /usr/bin/time: wall clock measured here, peak RSS from "
            "os.wait4's rusage")

    for size in args.sizes:
        root = tempfile.mkdtemp(prefix=f"collector-scale-{size}-", dir=args.tmp)
        directory = os.path.join(root, "session")
        try:
            say()
            say(f"== {size:,} records: generating ...")
            gen = generate(build_dir, directory, size, args.threads)
            records = gen["counts"].get("records", size)
            say(f"   session: {records:,} records ({gen['counts'].get('cuda_calls', 0):,} CUDA "
                f"calls, {gen['counts'].get('futex_calls', 0):,} futex calls, "
                f"{gen['counts'].get('offcpu', 0):,} off-CPU intervals, "
                f"{gen['counts'].get('slow_calls', 0):,} calls over 1 ms), "
                f"{gen['input_bytes'] / 1e6:.1f} MB on disk, "
                f"{gen['counts'].get('session_seconds', 0):.1f} s of recorded time; "
                f"written in {gen['seconds']:.1f} s")
            entry = {"requested_records": size, "records": records, "generator": gen, "runs": []}
            builds = [("", build_dir, entry["runs"])]
            if baseline_dir:
                entry["baseline"] = {"build_dir": baseline_dir, "runs": []}
                builds.append(("baseline ", baseline_dir, entry["baseline"]["runs"]))
            stopped = False
            for run in range(args.runs):
                # A B, then B A: neither build always runs first.
                for label, build, runs in (builds if run % 2 == 0 else builds[::-1]):
                    measured = run_once(build, directory, time_path, args.timeout_s, rss_cap,
                                        extra if build == build_dir else (), cgroup)
                    runs.append(measured)
                    written = measured["outputs"]
                    status = "" if measured["outcome"] == "ok" else f"  ** {measured['outcome']}"
                    say(f"   {label}run {run + 1}: {measured['wall_s']:.2f} s "
                        f"({measured['cpu_s']:.2f} s CPU), peak RSS "
                        f"{mib(measured['peak_rss_bytes']):.0f} MiB (anonymous "
                        f"{mib(measured['sampled_peak_anon_bytes']):.0f} MiB"
                        + (f", cgroup peak {mib(measured['cgroup_peak_bytes']):.0f} MiB"
                           if measured["cgroup_peak_bytes"] else "") + "), trace "
                        f"{written.get('trace.perfetto-trace', 0):,} B, load "
                        f"{measured['loadavg_before'][0]:.2f}{status}")
                    if measured["outcome"] != "ok":
                        say(f"   remaining runs of this size skipped: {measured['outcome']}")
                        stopped = True
                        break
                if stopped:
                    break
            entry["result"] = summarize(entry["runs"], records, gen)
            ok_runs = [run for run in entry["runs"] if run["outcome"] == "ok"]
            if baseline_dir:
                entry["baseline"]["result"] = summarize(entry["baseline"]["runs"], records, gen)
                entry["ratio"] = ratios(entry["runs"], entry["baseline"]["runs"])
            for result_entry in [entry["result"]] + ([entry["baseline"]["result"]]
                                                     if baseline_dir else []):
                if result_entry.get("missing_outputs"):
                    say(f"   NOTE: gprof-run report did not write "
                        f"{', '.join(result_entry['missing_outputs'])}; measured what it wrote")
            if size == args.perf_size and ok_runs:
                say(f"   profiling one more run under perf ...")
                entry["profile"] = profile(build_dir, directory, size)
            result["sizes"].append(entry)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    if cgroup:
        cgroup.remove()

    say()
    say("records      build     wall s (median, min-max)   records/s   CPU s (median, min-max)"
        "   records/CPU s  peak RSS MiB  RSS B/rec  anon MiB  trace bytes     trace B/rec  report.json B")

    def table_row(records, label, r):
        if r["outcome"] != "ok":
            say(f"{records:>11,}  {label:<8}  {r['outcome']} (wall {r['wall_s_at_stop']:.0f} s, "
                f"peak RSS {mib(r['peak_rss_bytes_at_stop']):.0f} MiB)")
            return
        w, c = r["wall_s"], r["cpu_s"]
        say(f"{records:>11,}  {label:<8}  {w['median']:7.2f} ({w['min']:.2f}-{w['max']:.2f})"
            f"{'':>6}{r['records_per_s']:>11,.0f}  {c['median']:7.2f} ({c['min']:.2f}-{c['max']:.2f})"
            f"{'':>4}{r['records_per_cpu_s']:>13,.0f}  {mib(r['peak_rss_bytes']['median']):>12,.0f}"
            f"  {r['peak_rss_bytes_per_record']:>9.1f}"
            f"  {mib(r['sampled_peak_anon_bytes']['median']):>8,.0f}  {r['trace_bytes'] or 0:>14,}"
            f"  {r['trace_bytes_per_record'] or 0:>11.1f}  {r['report_json_bytes'] or 0:>13,}")

    for entry in result["sizes"]:
        table_row(entry["records"], "this", entry["result"])
        if "baseline" in entry:
            table_row(entry["records"], "baseline", entry["baseline"]["result"])
    if baseline_dir:
        say()
        say("this / baseline, per pair of runs (median, min-max):")
        for entry in result["sizes"]:
            ratio = entry.get("ratio")
            if not ratio:
                say(f"{entry['records']:>11,}  no pair where both runs succeeded")
                continue
            w, c, m = ratio["wall_s"], ratio["cpu_s"], ratio["peak_rss_bytes"]
            trace = f"{ratio['trace_bytes']:.3f}" if ratio["trace_bytes"] else "-"
            say(f"{entry['records']:>11,}  wall {w['median']:.3f} ({w['min']:.3f}-{w['max']:.3f}), "
                f"CPU {c['median']:.3f} ({c['min']:.3f}-{c['max']:.3f}), "
                f"peak RSS {m['median']:.3f} ({m['min']:.3f}-{m['max']:.3f}), trace bytes "
                f"{trace}; {ratio['pairs']} pairs")

    measured_sizes = [e for e in result["sizes"] if e["result"]["outcome"] == "ok"]
    if len(measured_sizes) >= 2:
        small, large = measured_sizes[0], measured_sizes[-1]
        rss_small = small["result"]["peak_rss_bytes"]["median"]
        rss_large = large["result"]["peak_rss_bytes"]["median"]
        slope = (rss_large - rss_small) / (large["records"] - small["records"])
        growth = {
            "from_records": small["records"], "to_records": large["records"],
            "records_ratio": large["records"] / small["records"],
            "peak_rss_ratio": rss_large / rss_small,
            "marginal_bytes_per_record": slope,
            "intercept_bytes": rss_small - slope * small["records"],
        }
        result["memory_growth"] = growth
        say()
        anon_small = small["result"]["sampled_peak_anon_bytes"]["median"]
        anon_large = large["result"]["sampled_peak_anon_bytes"]["median"]
        growth["peak_anon_ratio"] = anon_large / anon_small if anon_small else None
        # Bounded: the largest session's own memory (anonymous: what the kernel cannot drop, the
        # page cache of spill files aside) under 1.5x the smallest's.
        growth["bounded"] = bool(anon_small) and anon_large / anon_small < 1.5
        say()
        say(f"memory: peak RSS {mib(rss_small):,.0f} MiB at {small['records']:,} records -> "
            f"{mib(rss_large):,.0f} MiB at {large['records']:,} "
            f"({growth['peak_rss_ratio']:.1f}x for {growth['records_ratio']:.0f}x the records): "
            f"{slope:.0f} bytes per extra record; anonymous {mib(anon_small):,.0f} MiB -> "
            f"{mib(anon_large):,.0f} MiB: "
            + ("bounded" if growth["bounded"] else "it grows with the session, not bounded"))
    for entry in result["sizes"]:
        prof = entry.get("profile")
        if not prof or "phases" not in prof:
            continue
        say()
        say(f"where the time goes at {entry['records']:,} records (perf, {prof['samples']} "
            "samples, inclusive):")
        for phase in prof["phases"]:
            say(f"   {phase['inclusive_percent']:5.1f}%  {phase['phase']}")
        say("   hottest functions (self): " + "; ".join(
            f"{h['self_percent']:.1f}% {h['symbol'][:70]}" for h in prof["hottest_self"][:8]))

    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    text_path = os.path.splitext(args.json)[0] + ".txt"
    with open(text_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nwrote {args.json} and {text_path}")


if __name__ == "__main__":
    main()
