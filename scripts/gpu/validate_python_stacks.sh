#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with the build carried as build-lead/ (or
# GPROF_BUILD=DIR): issue 19 on real CUDA with PyTorch. Records python_stacks_programs.py's two
# programs under gprof-run (kernel recorder on, Python stacks on), checks each report with
# check_python_stacks_report.py, keeps the reports in $OUT, then measures what Python stacks cost:
# gpu_overhead.py's workloads (ResNet-50 step, launch-bound loop, ping-pong) with the kernel
# recorder, Python stacks on and off, interleaved in one run. Exits 1 if a check missed.
#
# What to look for:
#   pin-memory   "waited at   .../python_stacks_programs.py:N in pin_memory_loop" under the cause
#                (N: the `for images, labels in loader:` line the program printed)
#   gil-holder   train_loop's line that waited, and "released at ... in hold_gil" or
#                "running (K of M samples) .../python_stacks_programs.py:N in hold_gil"
#   cost         gpu_overhead.txt: gprof_full vs gprof_full_nopy, per workload (issue 19: ResNet-50
#                step at most 1% slower, launch-bound at most 0.05x, ping-pong within its spread)
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
build=${GPROF_BUILD:-$PWD/build-lead}
gprof=$build/bin/gprof-run
work=$(mktemp -d)
summary=$out/python_stacks.txt
status=0
: > "$summary"

run_mode() {
  local mode=$1
  timeout 120 "$gprof" -q -o "$work/$mode" -- python3 scripts/gpu/python_stacks_programs.py "$mode" \
    > "$out/python-$mode.stdout" 2>&1
  echo "$mode: gprof-run status $?"
  cat "$out/python-$mode.stdout"
  python3 scripts/gpu/check_python_stacks_report.py "$mode" "$out/python-$mode.stdout" \
    "$work/$mode/report.json" "$work/$mode/report.txt" || status=1
  grep -E "^  python " "$work/$mode/report.txt"
  cp "$work/$mode/report.txt" "$out/python-$mode.report.txt" 2>/dev/null
  cp "$work/$mode/report.json" "$out/python-$mode.report.json" 2>/dev/null
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  run_mode pin-memory
  run_mode gil-holder
  # ROUNDS=0: the checks only (run_all.sh measures the cost in a call of its own).
  [ "${ROUNDS:-3}" = 0 ] || timeout 330 python3 scripts/bench/gpu_overhead.py --rounds "${ROUNDS:-3}" \
    --configs plain,gprof_full,gprof_full_nopy --gprof "$gprof" \
    --workload-args "--ops 20000 --steps 10" --timeout 150 --json "$out/python_overhead.json" \
    2>&1 | tee "$out/python_overhead.txt" | tail -20
} >> "$summary" 2>&1
cat "$summary"
rm -rf "$work"
exit $status
