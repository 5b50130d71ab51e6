#!/usr/bin/env python3
"""Compares the kernels gprof-run recorded (report.json's "gpu" section) with those torch.profiler
recorded of the same loop (train_small.py --profiler torch --out FILE): per kernel name, the count
must be equal and the total time within 2%, or within 2 us a launch for short kernels. The two
cannot share CUPTI in one process, so these are two runs of the same program, and a kernel of a
few microseconds varies by more than 2% between runs. torch.profiler's user annotations on the GPU
lane ("Optimizer.step#SGD.step") are not kernels and are left out. Also checks that every kernel
launch gprof-run recorded has its kernel. Prints the comparison; exits 1 when it fails.

Usage: compare_kernels.py GPROF_REPORT_JSON TORCH_KERNELS_JSON"""
import json
import re
import sys


def main(report_path, torch_path):
    gpu = json.load(open(report_path))["gpu"]
    ours = {k["name"]: k for k in gpu["kernels"]}
    annotation = re.compile(r"^[\w.]+#[\w.]+$")  # "Optimizer.step#SGD.step", not "{lambda()#1}"
    theirs = {n: k for n, k in json.load(open(torch_path)).items() if not annotation.match(n)}
    failures = []
    print(f"launch calls {gpu['launch_calls']}, with their kernel {gpu['launch_calls_with_kernel']}")
    if gpu["launch_calls"] != gpu["launch_calls_with_kernel"]:
        failures.append("some kernel launches have no kernel")
    total_ours = sum(k["total_ns"] for k in ours.values())
    total_theirs = sum(k["total_ns"] for k in theirs.values())
    print(f"kernels: gprof-run {sum(k['count'] for k in ours.values())} "
          f"({total_ours / 1e6:.2f} ms), torch.profiler {sum(k['count'] for k in theirs.values())} "
          f"({total_theirs / 1e6:.2f} ms)")
    for name in sorted(set(ours) | set(theirs), key=lambda n: -theirs.get(n, {}).get("total_ns", 0)):
        a, b = ours.get(name), theirs.get(name)
        if a is None or b is None:
            failures.append(f"only in {'torch.profiler' if a is None else 'gprof-run'}: {name[:100]}")
            continue
        ratio = a["total_ns"] / b["total_ns"] if b["total_ns"] else 1.0
        close = abs(ratio - 1) <= 0.02 or abs(a["total_ns"] - b["total_ns"]) <= 2000 * b["count"]
        ok = a["count"] == b["count"] and close
        print(f"  {'ok ' if ok else 'BAD'} {a['count']:6d} vs {b['count']:6d}  "
              f"{a['total_ns'] / 1e6:9.3f} vs {b['total_ns'] / 1e6:9.3f} ms  {name[:90]}")
        if not ok:
            failures.append(f"{name[:100]}: {a['count']} vs {b['count']}, time ratio {ratio:.4f}")
    for failure in failures:
        print("FAIL:", failure)
    print("compare:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
