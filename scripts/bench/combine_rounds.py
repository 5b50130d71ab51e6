#!/usr/bin/env python3
"""Combines gpu_overhead.py result files of the same configurations (runs split across several
device-tool calls) into one summary, as if the rounds had been one run; each file's round 0 stays
an uncounted warm-up.

usage: combine_rounds.py OUT.json IN.json [IN.json ...]
"""
import json
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from gpu_overhead import summarize  # noqa: E402


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    parts = [json.load(open(path)) for path in sys.argv[2:]]
    combined = dict(parts[0])
    combined["parts"] = [{"date": p["date"], "rounds": p["rounds"]} for p in parts]
    combined["runs"], offset = [], 0
    for part in parts:
        for run in part["runs"]:
            counted = dict(run)
            counted["round"] = run["round"] + offset if run["round"] > 0 else 0
            combined["runs"].append(counted)
        offset += part["rounds"]
    combined["rounds"] = offset
    # A configuration measured in only some parts counts the rounds it has (its n says how many).
    combined["configs"] = list(dict.fromkeys(c for part in parts for c in part["configs"]))
    combined["summary"] = summarize(combined["runs"], combined["configs"])
    with open(sys.argv[1], "w") as out:
        json.dump(combined, out, indent=1)
    print("median time per unit [min-max]; ratio to no profiler: median of per-round ratios "
          f"[min-max], {offset} rounds")
    for workload, by_config in combined["summary"].items():
        print(workload)
        for config, figures in by_config.items():
            t, r = figures["per_unit_us"], figures["ratio"]
            if t is None:
                continue
            line = f"  {config:15s} {t['median']:10.2f} us [{t['min']:.2f}-{t['max']:.2f}]"
            if r is not None and config != "plain":
                line += f"  ratio {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}] n={r['n']}"
            print(line)


if __name__ == "__main__":
    main()
