#!/usr/bin/env python3
"""Checks a report.json of gpu_idle_programs.py MODE against what issue 18 requires; prints what it
found, one line per check, and exits 1 on a miss.

Every mode: the GPU idle time the causes explain is at most the GPUs' idle time (the sum over
gpu.devices), each GPU named by its UUID (CUPTI's device record), and each device's idle time in
gaps at most its idle time.
  decode-streams  as every mode (the report read "GPU idle 9.494 s in 5688 gaps" for 3 s before).
  lazy-matmul     a cause "... loading a CUDA module in|before ..." explains >= 50 ms of GPU idle, and no
                  "late to launch" cause explains a gap whose late thread mostly loaded a module;
                  with EAGER=1 in the environment (CUDA_MODULE_LOADING=EAGER) the first GEMM loads
                  all of cuBLAS's modules, and that gap too is named as loading.
  cpu-between     the gap before the copy: its late thread's text says >= 1.9 s "outside CUDA
                  calls", and its time in cudaMemcpyAsync is under 1 ms.
  graphs          launches captured > 0, none without a kernel, graph launches >= 20 and each ran
                  kernels.
  shared-gpu      one device for both processes (2 pids, a UUID).

Usage: check_gpu_idle_report.py MODE REPORT_JSON"""
import json
import os
import re
import sys


def main(mode, path):
    report = json.load(open(path))
    gpu, diagnosis = report["gpu"], report["diagnosis"]
    failures = []

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    devices = gpu["devices"]
    idle = sum(d["idle_ns"] for d in devices)
    explained = sum(c["gpu_idle_ns"] for c in diagnosis["causes"])
    for d in devices:
        print(f"      {d['name']}: idle {d['idle_ns'] / 1e6:.1f} ms of "
              f"{(d['last_ns'] - d['first_ns']) / 1e6:.1f} ms, uuid {d['uuid']}, pids {d['pids']}")
    for c in diagnosis["causes"][:5]:
        print(f"      cause: {c['identity']}: GPU idle {c['gpu_idle_ns'] / 1e6:.1f} ms")
    check(explained <= idle, f"causes explain {explained / 1e6:.1f} ms <= GPU idle {idle / 1e6:.1f} ms")
    check(all(d["uuid"] for d in devices), "every GPU named by its UUID")
    for d in diagnosis["devices"]:
        check(d["gap_idle_ns"] <= d["idle_ns"], f"{d['name']}: gaps {d['gap_idle_ns'] / 1e6:.1f} ms "
              f"<= idle {d['idle_ns'] / 1e6:.1f} ms")

    if mode == "lazy-matmul":
        loading = [c for c in diagnosis["causes"] if "loading a CUDA module" in c["identity"]]
        most = max((c["gpu_idle_ns"] for c in loading), default=0)
        if os.environ.get("EAGER") != "1":
            check(most >= 50_000_000, f"a module-loading cause explains {most / 1e6:.1f} ms >= 50 ms")
        else:
            # EAGER loads every module of a library when it is first used: the first GEMM then
            # loads all of cuBLAS's (seconds), still in the gap, still named as loading.
            print(f"      eager loading: a module-loading cause explains {most / 1e6:.1f} ms")
        late = [g for g in diagnosis["gaps"] if g["cause"] is not None
                and "late to launch" in diagnosis["causes"][g["cause"]]["identity"]
                and g["module_load_ns"] * 2 >= g["end_ns"] - g["start_ns"]]
        check(not late, f"no gap mostly in module loading is called late to launch ({len(late)})")
    elif mode == "cpu-between":
        gaps = [g for g in diagnosis["gaps"] if g["late_thread"]
                and (g["after_call"] or {}).get("api", "").startswith("cudaMemcpyAsync")]
        longest = max(gaps, key=lambda g: g["end_ns"] - g["start_ns"], default=None)
        check(longest is not None, "a gap ended by cudaMemcpyAsync")
        if longest is not None:
            text = longest["late_thread"]["text"]
            print(f"      late thread: {text}")
            m = re.search(r"\(([0-9.]+) (s|ms) outside CUDA calls", text)
            outside_s = float(m[1]) / (1 if m and m[2] == "s" else 1000) if m else 0
            check(outside_s >= 1.9, f"{outside_s:.3f} s said to be outside CUDA calls")
            check(longest["late_thread"]["call_ns"] < 1_000_000,
                  f"{longest['late_thread']['call_ns']} ns in the copy's call")
    elif mode == "graphs":
        missing = gpu["launch_calls"] - gpu["launch_calls_with_kernel"] - gpu["launch_calls_captured"]
        print(f"      launches {gpu['launch_calls']}, with kernel {gpu['launch_calls_with_kernel']}, "
              f"captured {gpu['launch_calls_captured']}, graph launches {gpu['graph_launches']} "
              f"ran {gpu['graph_kernels']} kernels")
        check(gpu["launch_calls_captured"] > 0, "captured launches counted")
        check(missing == 0, f"{missing} launches without a kernel")
        check(gpu["graph_launches"] >= 20, "20 graph launches")
        check(gpu["graph_kernels"] >= gpu["graph_launches"],
              "each graph launch's kernels attributed to it (by correlation id)")
    elif mode == "shared-gpu":
        check(len(devices) == 1 and len(devices[0]["pids"]) == 2,
              f"one GPU for both processes: {[(d['name'], d['pids']) for d in devices]}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
