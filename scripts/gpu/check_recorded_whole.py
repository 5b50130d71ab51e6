#!/usr/bin/env python3
"""Checks that a session recorded its command whole, on the host's ids (issue 34's containers):
CUDA calls and GPU work recorded through CUPTI, nothing lost or stopped, every process named by a
host pid (not a namespace's 1), and no file left in a namespace's ids. Exits 1 on a miss.

Usage: check_recorded_whole.py REPORT_JSON [THREAD_NAME...]: each THREAD_NAME must be a thread of
the session (its Python name or its own)."""
import json
import sys


def main(path, names):
    session = json.load(open(path))["session"]
    failures = []
    counts = session["counts"]
    print(f"{counts['cuda_calls']} CUDA calls, {counts['gpu_activities']} GPU activities, "
          f"{counts['processes']} processes, {counts['threads']} threads")
    if counts["cuda_calls"] == 0 or counts["gpu_activities"] == 0:
        failures.append("no CUDA calls or no GPU activity")
    for entry in session["lost"]:
        print("lost:", entry)  # said, not silent; CUDA calls lost are a miss here
        if "CUDA call" in entry["what"]:
            failures.append(f"lost: {entry}")
    for stop in session["recording_stopped"]:
        failures.append(f"stopped: {stop['file']}: {stop['description']}")
    for message in session["messages"]:
        print("message:", message)
        if "its start not in the kernel's record" in message:
            failures.append(f"message: {message}")
    for process in session["processes"]:
        print(f"process {process['pid']} {process['exe']}: capture {process['capture']['mode']}")
        if 0 < process["pid"] < 50:
            failures.append(f"process {process['pid']}: a namespace's pid, not the host's")
    seen = {t["name"] for t in session["threads"]} | {t.get("python_name") for t in session["threads"]}
    for name in names:
        if name not in seen:
            failures.append(f"no thread named {name}")
    for failure in failures:
        print("FAIL:", failure)
    print("check:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
