#!/usr/bin/env python3
"""Checks gprof-run's report.json of dataloader_gpu_handoff.py against what it measured itself
(its stdout): a [handoff] cause of the consumer thread among the first three, its cost within 5%
of the waits the program measured in next(), GPU idle time explained by it, and its root in a
DataLoader worker at decode_sample. Prints what it found; exits 1 on a miss.

Usage: check_handoff_report.py REPORT_JSON PROGRAM_STDOUT"""
import json
import re
import sys


def main(report_path, facts_path):
    report = json.load(open(report_path))
    consumer, waits, producers = None, [], set()
    for line in open(facts_path):
        m = re.match(r"(thread|wait|work) tid=(\d+)(?: pid=\d+ role=(\w+))?(?: start_ns=(\d+) end_ns=(\d+))?", line)
        if not m:
            continue
        if m[1] == "thread" and m[3] == "consumer":
            consumer = int(m[2])
        elif m[1] == "wait":
            waits.append((int(m[4]), int(m[5])))
        elif m[1] == "work":
            producers.add(int(m[2]))
    failures = []
    measured = sum(end - start for start, end in waits)
    print(f"consumer {consumer}: {len(waits)} waits in next(), {measured / 1e6:.1f} ms measured; "
          f"producers {sorted(producers)}")
    diagnosis = report["diagnosis"]
    causes = diagnosis["causes"]
    found = None
    for index, cause in enumerate(causes):
        if cause["kind"] == "handoff" and any(t["tid"] == consumer for t in cause["threads"]):
            found = index
            break
    if found is None:
        failures.append("no handoff cause of the consumer")
    else:
        cause = causes[found]
        cost = 0
        for stall in cause["stalls"]:
            wait = diagnosis["stalls"][stall]["wait"]
            if any(wait["start_ns"] < end and start < wait["end_ns"] for start, end in waits):
                cost += wait["end_ns"] - wait["start_ns"]
        root = cause["root"] or {}
        print(f"cause {found + 1}: {cause['identity']}: cost {cost / 1e6:.1f} ms, GPU idle "
              f"{cause['gpu_idle_ns'] / 1e6:.1f} ms; root {root.get('text')}")
        if found >= 3:
            failures.append(f"the handoff is cause {found + 1}, not among the first three")
        if measured == 0 or abs(cost - measured) > 0.05 * measured:
            failures.append(f"cost {cost / 1e6:.1f} ms against {measured / 1e6:.1f} ms measured")
        if cause["gpu_idle_ns"] == 0:
            failures.append("no GPU idle time explained by the handoff")
        if (root.get("thread") or {}).get("tid") not in producers:
            failures.append(f"root {root.get('text')} is not a producer")
        if "decode_sample" not in json.dumps(root):
            failures.append("the root does not name decode_sample")
    for failure in failures:
        print("FAIL:", failure)
    print("check:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
