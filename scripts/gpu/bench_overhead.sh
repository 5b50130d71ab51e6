#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: issue 6's GPU figures. Usage: scripts/gpu/bench_overhead.sh [ROUNDS] [growth]
#   ROUNDS   rounds of gpu_overhead.py (after one uncounted warm-up run; default 5, so that
#            one call fits the device tool's 10 minutes: run it twice for 10 rounds and combine
#            the two JSON files with scripts/bench/combine_rounds.py)
#   growth   first, the ResNet-50 loop for 60 s under gprof-run (kernel recorder on): how fast the
#            session grows (session_growth.py)
# CONFIGS (environment) picks the configurations (see gpu_overhead.py). Results go to $OUT
# (default: gpu-bench/ in today's results folder outside the tree, scripts/results_dir.py).
set -u
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu-bench)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
rounds=${1:-5}
gprof=$PWD/.gpu/build/bin/gprof-run
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
if [ "${2:-}" = growth ]; then
  python3 scripts/bench/session_growth.py --gprof "$gprof" --every 2 --skip 15 \
    --json "$out/session_growth_resnet50.json" -- \
    python3 scripts/bench/gpu_workload.py --only resnet50 --steps 1 --seconds 60 \
    2>&1 | tail -3 | tee "$out/session_growth_resnet50.txt"
fi
python3 scripts/bench/gpu_overhead.py --rounds "$rounds" \
  --configs "${CONFIGS:-plain,gprof_cuda,gprof_full,torch_profiler,nsys}" \
  --gprof "$gprof" --workload-args "--ops 20000 --steps 10" --timeout 150 \
  --json "$out/gpu_overhead.json" 2>&1 | tee "$out/gpu_overhead.txt"
