#!/usr/bin/env python3
"""Checks gprof-run's report.json against what a freeze program measured itself (--calls-out):
each holding call is one freeze, released by the holder inside that call, with every launcher the
program saw blocked during it, and durations within 10%; the lock the freezes share, a futex on the
heap inside the CUDA driver, is named by that library (issue 18.5). Prints what it found; exits 1 on a miss.

Usage: check_freeze_report.py REPORT_JSON CALLS_TXT HOLDER_API [--tids-by-name] [--clock-offset-ns N]

--tids-by-name: the program ran in a PID namespace of its own, where its thread ids are not the
host's that the report gives: its threads are matched to the report's by name (each unique).
--clock-offset-ns N: the program ran in a time namespace whose CLOCK_MONOTONIC is N ns ahead of the
host's, which the report's times are on: its times are moved back by N."""
import argparse
import json
import re
import sys


def main(report_path, calls_path, holder_api, tids_by_name=False, clock_offset_ns=0):
    report = json.load(open(report_path))
    host_tid = {t["name"]: t["tid"] for t in report["session"]["threads"]}
    calls = []
    for line in open(calls_path):
        m = re.match(r"call tid=(\d+) thread=(\S+) api=(\w+) enter_ns=(\d+) exit_ns=(\d+)", line)
        if m:
            tid = host_tid.get(m[2], -1) if tids_by_name else int(m[1])
            calls.append(dict(tid=tid, thread=m[2], api=m[3], enter=int(m[4]) - clock_offset_ns,
                              exit=int(m[5]) - clock_offset_ns))
    rounds = [c for c in calls if c["thread"] == "holder" and c["api"] == holder_api]
    failures = []
    print(f"{len(calls)} calls >= 1 ms measured by the program, {len(rounds)} rounds")
    print(f"report: {len(report['slow_calls'])} slow calls, {len(report['freezes'])} freezes, "
          f"lost {report['session']['lost']}, kernel recording {report['session']['kernel_recording']}")
    for number, round_ in enumerate(rounds, 1):
        blocked = [c for c in calls if c["thread"].startswith("launcher")
                   and c["enter"] < round_["exit"] and c["exit"] > round_["enter"]
                   and c["exit"] - c["enter"] > (round_["exit"] - round_["enter"]) / 2]
        overlapping = [f for f in report["freezes"]
                       if f["start_ns"] < round_["exit"] and f["end_ns"] > round_["enter"]]
        held_ms = (round_["exit"] - round_["enter"]) / 1e6
        print(f"round {number}: holder {holder_api} {held_ms:.1f} ms (program), "
              f"{len(blocked)} launches blocked > half of it")
        if not overlapping:
            failures.append(f"round {number}: no freeze")
            continue
        freeze = max(overlapping, key=lambda f: f["duration_ns"])
        holder = freeze["holder"] or {}
        call = holder.get("call") or {}
        print(f"  freeze {freeze['duration_ns'] / 1e6:.1f} ms, {freeze['thread_count']} threads on "
              f"{freeze['object']['description']}; holder {holder.get('name')} ({holder.get('tid')}) in "
              f"{call.get('api')} {call.get('duration_ns', 0) / 1e6:.1f} ms, on CPU "
              f"{holder.get('on_cpu_ns', 0) / 1e6:.1f} ms, asleep {holder.get('asleep_ns', 0) / 1e6:.1f} ms")
        if holder.get("name") != "holder" or call.get("api") != holder_api:
            failures.append(f"round {number}: holder is {holder.get('name')} in {call.get('api')}")
        members = {m["tid"] for m in freeze["members"]}
        for c in blocked:
            if c["tid"] not in members:
                failures.append(f"round {number}: {c['thread']} not in the freeze")
            found = [s for s in report["slow_calls"] if s["tid"] == c["tid"]
                     and s["enter_ns"] >= c["enter"] and s["exit_ns"] <= c["exit"]]
            program_ms = (c["exit"] - c["enter"]) / 1e6
            if not found:
                failures.append(f"round {number}: {c['thread']}'s {program_ms:.1f} ms call not reported")
                continue
            reported_ms = found[0]["duration_ns"] / 1e6
            print(f"  {c['thread']}: {found[0]['api']} {reported_ms:.2f} ms reported, "
                  f"{program_ms:.2f} ms measured by the program")
            if abs(reported_ms - program_ms) > 0.1 * program_ms:
                failures.append(f"round {number}: {c['thread']} {reported_ms} vs {program_ms} ms")
    # The driver's lock is on the heap: its cause is named by the library that waited on it.
    driver = [c for c in report["diagnosis"]["causes"]
              if c.get("class") == "user lock" and "heap" in c["identity"]]
    for cause in driver:
        print(f"heap lock cause: {cause['identity']}")
        if not cause["identity"].startswith("a lock inside libcuda"):
            failures.append(f"a heap lock not named by its library: {cause['identity']}")
    if not driver:
        failures.append("no cause on a heap lock (the driver's)")
    for failure in failures:
        print("FAIL:", failure)
    print("check:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("calls")
    parser.add_argument("holder_api")
    parser.add_argument("--tids-by-name", action="store_true")
    parser.add_argument("--clock-offset-ns", type=int, default=0)
    args = parser.parse_args()
    sys.exit(main(args.report, args.calls, args.holder_api, args.tids_by_name, args.clock_offset_ns))
