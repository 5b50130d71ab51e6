#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: the kernel-recorder and end-to-end tests (fake runtime, BPF required), the real-CUDA
# driver-lock freeze explained, and PyTorch under gprof-run (launch-bound loop timed against no
# profiler, interleaved; DataLoader with forked workers and pinned memory). Results go to $OUT.
# `validate.sh quick` stops after the freeze and its collection with spill files (the timing is
# bench_overhead.sh's job now).
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
build=$PWD/.gpu/build
gprof=$build/bin/gprof-run
work=$(mktemp -d)

{
  date -u
  nvidia-smi -L
  uname -r
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} > "$out/environment.txt" 2>&1

# 1. The tests that need BPF, on this kernel (the test programs run on the fake runtime), and the
# diagnosis of real kernel waits (kernel_scenarios, the Python GIL and lock convoys).
for test in kernel_recorder_test inject_test e2e_test kernel_scenarios_test; do
  LD_LIBRARY_PATH=$build/tests/fake_cuda GPROF_BUILD_DIR=$build GPROF_SOURCE_DIR=$PWD \
    GPROF_REQUIRE_BPF=1 \
    timeout 300 "$build/tests/$test" --gtest_brief=1 2>&1 | tail -n 30
done > "$out/tests.log" 2>&1

# 2. The real driver lock: cudaFree waits for the GPU while other threads launch.
timeout 120 "$gprof" -o "$work/freeze" -- .gpu/cuda_free_freeze --rounds 8 --calls-out "$work/calls.txt" \
  > "$out/freeze_report.txt" 2>&1
echo "gprof-run exit status $?" >> "$out/freeze_report.txt"
python3 scripts/gpu/check_freeze_report.py "$work/freeze/report.json" "$work/calls.txt" cudaFree \
  > "$out/freeze_check.txt" 2>&1

# 2b. A PyTorch session (a launch-bound loop and a DataLoader: CUDA calls, GPU activities, the
# kernel's record) collected again with its records in spill files (--collector-memory 1M): the
# same report, report.json and trace, byte for byte.
timeout 300 "$gprof" -q -o "$work/spill" -- python3 scripts/gpu/torch_check.py 20000 \
  > "$out/spill_report.txt" 2>&1
mkdir -p "$work/first"
cp "$work/spill"/{report.txt,report.json,trace.perfetto-trace} "$work/first/"
"$gprof" report "$work/spill" --collector-memory 1M >> "$out/spill_report.txt" 2>&1
{
  grep -h "records in files" "$out/spill_report.txt" || echo "nothing spilled"
  for file in report.txt report.json trace.perfetto-trace; do
    cmp "$work/first/$file" "$work/spill/$file" && echo "$file: the same bytes"
  done
} > "$out/spill_check.txt" 2>&1

[ "${1:-}" = quick ] && exit 0

# 3. PyTorch: plain, CUDA calls only, and full recording, interleaved.
ops=50000
{
  for round in 1 2 3 4 5; do
    for config in plain cuda full; do
      case $config in
        plain) cmd=(python3 scripts/gpu/torch_check.py $ops) ;;
        cuda) cmd=("$gprof" -q --no-kernel -o "$work/t-$config-$round" -- python3 scripts/gpu/torch_check.py $ops) ;;
        full) cmd=("$gprof" -q -o "$work/t-$config-$round" -- python3 scripts/gpu/torch_check.py $ops) ;;
      esac
      result=$(timeout 300 "${cmd[@]}" 2>&1)
      status=$?
      echo "round=$round config=$config status=$status $(echo "$result" | tr '\n' ' ')"
    done
  done
} > "$out/torch_runs.txt" 2>&1
cp "$work/t-full-1/report.txt" "$out/torch_report.txt" 2>/dev/null
python3 - "$work" >> "$out/torch_runs.txt" 2>&1 <<'PY'
import json, sys, glob
for path in sorted(glob.glob(sys.argv[1] + "/t-full-1/report.json")):
    r = json.load(open(path))
    s = r["session"]
    print("session", path, "counts", s["counts"], "lost", s["lost"], "diagnostics", s["diagnostics"][:3])
    names = {}
    for call in r["slow_calls"]:
        names[call["api"]] = names.get(call["api"], 0) + 1
    print("slow calls by api", names)
PY
ls -la "$work"/t-full-1 >> "$out/torch_runs.txt" 2>&1
