#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: issue 18's GPU idle per device, late threads, CUDA graphs and lazy module loading, on real
# CUDA with PyTorch. Runs each mode of scripts/gpu/gpu_idle_programs.py under gprof-run (kernel
# recorder on, CUPTI capture), checks its report.json with check_gpu_idle_report.py, and keeps the
# reports in $OUT. lazy-matmul runs twice: lazy loading (the default), then
# CUDA_MODULE_LOADING=EAGER, where the first GEMM loads every cuBLAS module (seconds, on the H200
# on 2026-12-02: 3.04 s in cuLibraryLoadData), named as loading too. Exits 1 if any check missed.
#
# What the reports should say, if the collector is right:
#   decode-streams  "gpu idle  GPU 0 ran nothing X (N%) of the Y ..." with X < the run's length,
#                   and the causes' GPU idle adding up to at most X.
#   lazy-matmul     a cause "python3 (PID) loading a CUDA module before cudaLaunchKernel (the
#                   driver loads ...)" with ~100 ms of GPU idle; its gap's line ends "; the driver
#                   spent ~N ms of the wait loading a CUDA module". Seconds of it under EAGER.
#   cpu-between     "the GPU waited for python3 (PID) on CPU 2.0 s (2.0 s outside CUDA calls, then
#                   N us in cudaMemcpyAsync)".
#   graphs          "gpu  ...; K kernel launches captured into CUDA graphs; 20 graph launches ran
#                   M kernels", and no "have no kernel recorded".
#   shared-gpu      one "gpu idle  GPU 0 (GPU-..., pids A, B)" line.
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
gprof=$PWD/.gpu/build/bin/gprof-run
work=$(mktemp -d)
summary=$out/gpu_idle.txt
status=0
: > "$summary"

run_mode() {
  local name=$1 mode=$2
  shift 2
  timeout 240 env "$@" "$gprof" -q -o "$work/$name" -- python3 scripts/gpu/gpu_idle_programs.py "$mode"
  echo "$name: gprof-run status $?"
  grep -E "^  (gpu|gpu idle|top) " "$work/$name/report.txt"
  env "$@" python3 scripts/gpu/check_gpu_idle_report.py "$mode" "$work/$name/report.json" || status=1
  cp "$work/$name/report.txt" "$out/gpu-idle-$name.report.txt" 2>/dev/null
  cp "$work/$name/report.json" "$out/gpu-idle-$name.report.json" 2>/dev/null
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  run_mode decode-streams decode-streams
  run_mode lazy-matmul lazy-matmul
  run_mode lazy-matmul-eager lazy-matmul CUDA_MODULE_LOADING=EAGER EAGER=1
  run_mode cpu-between cpu-between
  run_mode graphs graphs
  run_mode shared-gpu shared-gpu
} >> "$summary" 2>&1
cat "$summary"
exit $status
