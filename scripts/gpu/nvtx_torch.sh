#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with the build carried as build-lead/ (or
# GPROF_BUILD=DIR): issue 39's PyTorch labels on real CUDA. A small training loop with
# torch.cuda.nvtx.range around data/forward/backward/optimizer and emit_nvtx for its operators,
# under gprof-run; nvtx_torch.py then compares report.json's RANGES with torch.profiler's view of
# the same loop (run in the same process after it). Reports kept in $OUT. Exits 1 on a miss.
#
# What to look for: report.txt's "RANGES (NVTX) by total time" with train_step, data, forward,
# backward, optimizer and aten:: operators; its GPU gaps and slow calls "in train_step > ...".
set -u
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
build=${GPROF_BUILD:-$PWD/build-lead}
gprof=$build/bin/gprof-run
work=$(mktemp -d)
steps=${1:-50}
timeout 300 "$gprof" -q -o "$work/s" -- \
  python3 scripts/gpu/nvtx_torch.py run "$steps" "$work/profile.json" > "$out/nvtx_torch.stdout" 2>&1
echo "gprof-run status $?"
cat "$out/nvtx_torch.stdout"
cp "$work/s/report.txt" "$out/nvtx_torch.report.txt" 2>/dev/null
cp "$work/s/report.json" "$out/nvtx_torch.report.json" 2>/dev/null
cp "$work/profile.json" "$out/nvtx_torch.profile.json" 2>/dev/null
sed -n '/^RANGES (NVTX)/,/^$/p' "$work/s/report.txt"
python3 scripts/gpu/nvtx_torch.py check "$work/s/report.json" "$work/profile.json" \
  | tee "$out/nvtx_torch.txt"
exit "${PIPESTATUS[0]}"
