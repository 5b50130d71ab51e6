#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: what each part of the CUDA capture costs on the launch-bound loops (issue 6), by taking
# API calls from each source GPROF_CUPTI_API_RECORDS offers (inject/cupti_tracer.h), interleaved
# with no profiler, --cuda=preload and torch.profiler. Then one short session per source, to show
# what it recorded. Usage: scripts/gpu/bench_capture_parts.sh [ROUNDS] [OPS]
# The figures of 2026-11-29 (85b9c36:scripts/bench/results/2026-11-29/capture_*) were taken at
# commit 85b9c36, which also offered runtime-only callbacks, interposition with and without CUPTI
# external correlation, and subsets of the GPU activity kinds; none cost measurably less, so they
# are gone.
# Results go to $OUT (default: gpu-bench/ in today's results folder outside the tree,
# scripts/results_dir.py).
set -u
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu-bench)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
rounds=${1:-5}
ops=${2:-100000}
gprof=$PWD/.gpu/build/bin/gprof-run
sources="callbacks activity gpu-only"
configs=plain,gprof_preload,torch_profiler
for source in $sources; do configs+=",gprof_cuda@$source"; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
python3 scripts/bench/gpu_overhead.py --rounds "$rounds" --configs "$configs" --gprof "$gprof" \
  --workload-args "--only launch,launch4 --ops $ops" --timeout 120 \
  --json "$out/capture_parts.json" 2>&1 | tee "$out/capture_parts.txt"
for source in $sources; do
  session=$(mktemp -d)/s
  GPROF_CUPTI_API_RECORDS=$source timeout 120 "$gprof" -q --no-kernel -o "$session" -- \
    python3 scripts/bench/gpu_workload.py --only launch --ops 2000 > /dev/null 2>&1
  echo "== $source: status $?"
  python3 - "$session/report.json" <<'PY' 2>&1 | tee -a "$out/capture_parts_sessions.txt"
import json, sys
r = json.load(open(sys.argv[1]))
s = r["session"]
print("  capture", [p.get("capture") for p in s.get("processes", [])])
print("  counts", s.get("counts"), "lost", s.get("lost"))
print("  gpu", {k: v for k, v in r.get("gpu", {}).items() if k != "kernels"})
PY
  cp "$session/report.txt" "$out/capture_parts_$source.report.txt" 2>/dev/null
done
