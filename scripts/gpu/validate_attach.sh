#!/usr/bin/env bash
# On the GPU machine: `gprof-run -p PID --duration 5` on a running PyTorch loop that gprof-run did
# not start (scripts/gpu/attach_loop.py): the uprobes on the real libcuda's cu* entry points record
# its CUDA calls; the loop runs on and ends as it would alone; its rate before, during and after the
# window says what the probes cost on real CUDA calls. Usage: validate_attach.sh GPROF_RUN OUT_DIR
# (Written with `gprof-run -p`; not yet run on the GPU machine: see docs/attach.md.)
set -uo pipefail
gprof=${1:?gprof-run}
out=${2:?output directory}
here=$(dirname "$(readlink -f "$0")")
mkdir -p "$out"
python3 "$here/attach_loop.py" 20 > "$out/loop.out" 2> "$out/loop.rates" &
loop=$!
sleep 6  # torch's start, then a few seconds of rate before the attach
attach_start=$(date +%s.%N)
"$gprof" -p "$loop" --duration 5 -o "$out/session" > "$out/gprof.out" 2> "$out/gprof.err"
gprof_status=$?
attach_end=$(date +%s.%N)
wait "$loop"
loop_status=$?
echo "gprof-run -p: exit $gprof_status, $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$attach_end" "$attach_start") s in all"
echo "loop: exit $loop_status, stdout: $(cat "$out/loop.out")"
grep -m1 "recording" "$out/gprof.err"
sed -n '1,12p' "$out/session/report.txt"
grep -o "CUDA driver calls of pid [0-9]* recorded by uprobes on [0-9]* of [0-9]* cu\* entry points of [^ ]*" \
  "$out/session/report.txt" "$out/gprof.err" | head -3
echo "CUDA calls by name (report.json):"
python3 - "$out/session/report.json" <<'PY' || true
import json, sys, collections
report = json.load(open(sys.argv[1]))
rows = report["tables"]["cuda_api_calls"]
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
for row in rows[:12]:
    print("  " + json.dumps(row))
PY
python3 - "$out/loop.rates" "$attach_start" "$attach_end" <<'PY'
import sys, statistics
rates = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if line.strip()]
start, end = float(sys.argv[2]), float(sys.argv[3])
before = [r for t, r in rates if t < start - 0.5]
during = [r for t, r in rates if start + 2 < t < end - 1]  # after the probes are in
after = [r for t, r in rates if t > end + 1]
def median(values):
    return statistics.median(values) if values else float("nan")
print(f"ops/s: before {median(before):.0f} ({len(before)} windows), during {median(during):.0f} "
      f"({len(during)}), after {median(after):.0f} ({len(after)}); during/before "
      f"{median(during) / median(before):.3f}, after/before {median(after) / median(before):.3f}")
PY
