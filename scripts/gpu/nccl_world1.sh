#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with the build carried as build-lead/ (or
# GPROF_BUILD=DIR): issue 37's NCCL profiler plugin on real NCCL. A world-size-1
# torch.distributed NCCL loop under gprof-run; nccl_world1.py then checks report.json's NCCL
# records against the NCCL kernels of the GPU timeline. Reports kept in $OUT. Exits 1 on a miss.
set -u
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
build=${GPROF_BUILD:-$PWD/build-lead}
gprof=$build/bin/gprof-run
work=$(mktemp -d)
steps=${1:-100}
timeout 240 "$gprof" -q -o "$work/s" -- \
  python3 scripts/gpu/nccl_world1.py run "$steps" > "$out/nccl_world1.stdout" 2>&1
echo "gprof-run status $?"
cat "$out/nccl_world1.stdout"
cp "$work/s/report.txt" "$out/nccl_world1.report.txt" 2>/dev/null
cp "$work/s/report.json" "$out/nccl_world1.report.json" 2>/dev/null
python3 scripts/gpu/nccl_world1.py check "$work/s/report.json" "$out/nccl_world1.stdout" "$steps" \
  | tee "$out/nccl_world1.txt"
status=${PIPESTATUS[0]}
if [ "$status" != 0 ]; then
  # What NCCL said of its plugins, for the miss: a short run with NCCL's own log.
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE NCCL_DEBUG_FILE="$out/nccl_debug.%p.txt" \
    timeout 120 "$gprof" -q -o "$work/d" -- python3 scripts/gpu/nccl_world1.py run 3 \
    > "$out/nccl_world1.debug.stdout" 2>&1
fi
exit "$status"
