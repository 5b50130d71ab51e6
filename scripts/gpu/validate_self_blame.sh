#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with the build carried as build-lead/ (or
# .gpu/build from scripts/gpu/bundle.sh): issue 18.1, gprof-run never blames itself, on real CUDA
# with PyTorch. Runs scripts/gpu/self_blame_program.py bare and under gprof-run (kernel recorder
# on, CUPTI capture, slow-call stacks on), three times each; checks each report.json with
# check_self_blame_report.py and keeps the reports in $OUT. Exits 1 if any check missed.
#
# What to look for, if it is right: "program waits held up by gprof-run's threads: 0" in every
# run; the writer (and CUPTI's threads, where CUPTI started any) listed as gprof-run's; no cause
# naming _rtld_global or gprof-writer; slow calls' stacks naming PyTorch's frames (libtorch,
# libc10) below the CUDA call; the loader thread's longest lookup under gprof-run close to the
# bare run's (it was 1.3 ms bare and 5.4 ms under the old library).
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
build=build-lead
[ -x "$build/bin/gprof-run" ] || build=.gpu/build
gprof=$PWD/$build/bin/gprof-run
work=$(mktemp -d)
summary=$out/self_blame.txt
status=0
: > "$summary"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  for i in 1 2 3; do
    echo "== bare run $i"
    timeout 120 python3 scripts/gpu/self_blame_program.py
    echo "== under gprof-run, run $i"
    timeout 240 "$gprof" -q -o "$work/run$i" -- python3 scripts/gpu/self_blame_program.py
    echo "gprof-run status $?"
    grep -E "^  (gpu|gpu idle|capture|stacks) |gprof-run's own threads" "$work/run$i/report.txt"
    python3 scripts/gpu/check_self_blame_report.py "$work/run$i/report.json" || status=1
    cp "$work/run$i/report.txt" "$out/self-blame-$i.report.txt" 2>/dev/null
    cp "$work/run$i/report.json" "$out/self-blame-$i.report.json" 2>/dev/null
  done
} >> "$summary" 2>&1
cat "$summary"
exit $status
