#!/usr/bin/env python3
"""What profiling costs a GPU program (issue 6): the workloads of gpu_workload.py run without a
profiler and under each profiler, configurations interleaved (A B C A B C ...), ROUNDS times, after
one uncounted warm-up run. Each workload times itself from inside, so a profiler's start-up and
post-processing do not count. Printed per workload and configuration: the median time per unit
with its min-max, and the median of the per-round ratios to the unprofiled run of the same round,
with their min-max.

usage: gpu_overhead.py [--rounds N] [--configs plain,gprof_cuda,gprof_preload,gprof_full,torch_profiler,nsys]
                       [--gprof PATH] [--nsys PATH] [--workload-args "..."] [--json FILE]
                       [--cpus 0-7] [--nsys-postprocess]

Configurations:
  plain           python3 gpu_workload.py
  gprof_cuda      gprof-run --no-kernel: every CUDA runtime and driver call and the GPU timeline
  gprof_preload   gprof-run --no-kernel --cuda preload: runtime calls by interposition only, no
                  CUPTI (no GPU timeline): what CUPTI's callbacks cost, by difference
  gprof_full      gprof-run: the same plus the kernel recorder (needs root)
  gprof_full_nopy the same without Python stacks (--python-stacks=off): what they cost, by
                  difference
  gprof_cuda@SOURCE, gprof_full@SOURCE
                  the same, with API calls taken from SOURCE (GPROF_CUPTI_API_RECORDS: callbacks,
                  activity, runtime-callbacks, interposed, interposed-correlated, gpu-only; see
                  inject/cupti_tracer.h): what each part of the capture costs
  torch_profiler  gpu_workload.py --torch-profiler (CPU and CUDA activities)
  nsys            nsys profile -t cuda,osrt (ended once the workloads have printed their
                  times: its post-processing costs the program nothing and takes minutes)
Results go to --json (default gpu_overhead.json in the results folder of
scripts/results_dir.py: $GPROF_RESULTS_DIR/<today>/, default ~/.cache/gprof-run/results/<today>/)
as they come, so a run cut short keeps what it measured. --cpus pins every run to those CPUs
(taskset), the same for all configurations.
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
import threading
import time

# The results folder outside the source tree (scripts/results_dir.py).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import results_dir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "gpu_workload.py")


def command(config, args, scratch, run_index):
    workload = [sys.executable, WORKLOAD] + args.workload_args.split()
    session = os.path.join(scratch, f"{config}-{run_index}")
    base, _, api_source = config.partition("@")
    if api_source:
        # gprof_cuda@SOURCE, gprof_full@SOURCE: where API calls are taken from
        # (GPROF_CUPTI_API_RECORDS, inject/cupti_tracer.h).
        cmd, session = command(base, args, scratch, run_index)
        return ["env", f"GPROF_CUPTI_API_RECORDS={api_source}"] + cmd, session
    if config == "plain":
        cmd = workload
    elif config == "gprof_cuda":
        cmd = [args.gprof, "-q", "--no-kernel", "-o", session, "--"] + workload
    elif config == "gprof_preload":
        cmd = [args.gprof, "-q", "--no-kernel", "--cuda", "preload", "-o", session, "--"] + workload
    elif config == "gprof_full":
        cmd = [args.gprof, "-q", "-o", session, "--"] + workload
    elif config == "gprof_full_nopy":
        cmd = [args.gprof, "-q", "--python-stacks=off", "-o", session, "--"] + workload
    elif config == "torch_profiler":
        cmd = workload + ["--torch-profiler"]
    elif config == "nsys":
        cmd = [args.nsys, "profile", "-t", "cuda,osrt", "--force-overwrite=true", "-o", session,
               "--"] + workload
    else:
        raise SystemExit(f"unknown configuration {config}")
    if args.cpus:
        cmd = ["taskset", "-c", args.cpus] + cmd
    return cmd, session


def expected_workloads(args):
    match = re.search(r"--only[= ](\S+)", args.workload_args)
    return len(match.group(1).split(",")) if match else 3


def run_until_results(cmd, args):
    """Runs CMD and ends its whole process group once every workload has printed its RESULT: for
    nsys, whose post-processing after the program (minutes on the GPU machine) is not part of what
    the program paid, and would use up the device time the other rounds need."""
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    timer = threading.Timer(args.timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    output, seen = "", 0
    try:
        for line in process.stdout:
            output += line
            seen += line.startswith("RESULT ")
            if seen == expected_workloads(args):
                os.killpg(process.pid, signal.SIGKILL)
                break
        process.wait()
    finally:
        timer.cancel()
    status = 0 if seen == expected_workloads(args) else process.returncode
    return output, status


def run_once(config, args, scratch, run_index):
    cmd, session = command(config, args, scratch, run_index)
    started = time.monotonic()
    if config == "nsys" and not args.nsys_postprocess:
        output, status = run_until_results(cmd, args)
    else:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            output, status = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as expired:
            output = (expired.stdout or b"").decode(errors="replace") if isinstance(
                expired.stdout, bytes) else (expired.stdout or "")
            status = "timeout"
    results = {m.group(1): float(m.group(2))
               for m in re.finditer(r"RESULT name=(\S+) per_unit_us=([0-9.]+)", output)}
    size = 0
    if os.path.isdir(session):
        for root, _, files in os.walk(session):
            size += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        shutil.rmtree(session, ignore_errors=True)
    for leftover in (session + ".nsys-rep", session + ".qdstrm", session + ".sqlite"):
        if os.path.exists(leftover):
            size += os.path.getsize(leftover)
            os.remove(leftover)
    return {"config": config, "status": status, "results": results,
            "wall_s": round(time.monotonic() - started, 2), "session_bytes": size,
            "tail": output[-600:] if not results else ""}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)} if values else None


def summarize(runs, configs):
    by_round = {}
    for run in runs:
        if run["round"] > 0:
            by_round.setdefault(run["round"], {})[run["config"]] = run["results"]
    workloads = sorted({w for run in runs for w in run["results"]})
    summary = {}
    for workload in workloads:
        summary[workload] = {}
        for config in configs:
            times = [r[config][workload] for r in by_round.values()
                     if config in r and workload in r[config]]
            ratios = [r[config][workload] / r["plain"][workload] for r in by_round.values()
                      if config in r and "plain" in r and workload in r[config]
                      and workload in r["plain"] and r["plain"][workload] > 0]
            summary[workload][config] = {"per_unit_us": spread(times), "ratio": spread(ratios)}
    return summary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--configs", default="plain,gprof_cuda,gprof_full,torch_profiler,nsys")
    parser.add_argument("--gprof", default=os.path.join(HERE, "../../build/bin/gprof-run"))
    parser.add_argument("--nsys", default="/opt/nvidia/nsight-compute/2025.3.1/host/"
                        "target-linux-x64/nsys")
    parser.add_argument("--workload-args", default="")
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--cpus", default="")
    parser.add_argument("--json", default=None)
    parser.add_argument("--nsys-postprocess", action="store_true",
                        help="let nsys finish writing its report (default: end it once the "
                        "workloads have printed their times; it does not change them)")
    args = parser.parse_args()
    if args.json is None:
        args.json = os.path.join(results_dir.folder(), "gpu_overhead.json")
    print(f"results: {args.json}", flush=True)
    configs = args.configs.split(",")
    if "plain" not in configs:
        configs.insert(0, "plain")
    scratch = tempfile.mkdtemp(prefix="gpu-overhead-")
    record = {"benchmark": "gpu_overhead", "command": sys.argv,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"node": platform.node(), "kernel": platform.release(),
                          "cpus": os.cpu_count()},
              "rounds": args.rounds, "configs": configs, "runs": []}
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True)
        record["machine"]["gpu"] = gpu.stdout.strip()
    except OSError:
        pass
    for round_index in range(args.rounds + 1):
        # Round 0 warms the page cache, the driver and the GPU's clocks with one unprofiled run;
        # it is not counted.
        for config in configs if round_index > 0 else configs[:1]:
            run = run_once(config, args, scratch, round_index)
            run["round"] = round_index
            record["runs"].append(run)
            print(f"round {round_index} {config}: {run['results']} status={run['status']} "
                  f"wall={run['wall_s']}s{' ' + run['tail'] if run['tail'] else ''}", flush=True)
            record["summary"] = summarize(record["runs"], configs)
            with open(args.json, "w") as out:
                json.dump(record, out, indent=1)
    print("\nmedian time per unit [min-max]; ratio to no profiler: median of per-round ratios "
          "[min-max]")
    for workload, by_config in record["summary"].items():
        print(workload)
        for config, figures in by_config.items():
            t, r = figures["per_unit_us"], figures["ratio"]
            if t is None:
                print(f"  {config:15s} no result")
                continue
            line = f"  {config:15s} {t['median']:10.2f} us [{t['min']:.2f}-{t['max']:.2f}]"
            if r is not None and config != "plain":
                line += f"  ratio {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}] n={r['n']}"
            print(line)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
