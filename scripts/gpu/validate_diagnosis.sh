#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: issue 4 and 5 on real CUDA. Records (kernel recorder on, CUPTI capture) the real cudaFree
# and cudaFreeHost freezes of launching threads (cuda_free_freeze, runtime linked statically) and
# the article's DataLoader with pin_memory=True on 77 MB float32 batches, and keeps each report,
# report.json and (when small) trace in $OUT. Prints, per session, the diagnosis's top causes and
# what the kernel recorder saw of the GPU driver (device waits on /dev/nvidia*).
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
gprof=$PWD/.gpu/build/bin/gprof-run
work=$(mktemp -d)
summary=$out/diagnosis.txt
: > "$summary"

keep_session() {
  local name=$1 dir=$2
  cp "$dir/report.txt" "$out/$name.report.txt" 2>/dev/null
  cp "$dir/report.json" "$out/$name.report.json" 2>/dev/null
  if [ -f "$dir/trace.perfetto-trace" ] && [ "$(stat -c %s "$dir/trace.perfetto-trace")" -lt 8000000 ]; then
    cp "$dir/trace.perfetto-trace" "$out/$name.perfetto-trace"
  fi
}

# The diagnosis's top causes and the driver's device waits, from a report.json.
summarize() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = r["diagnosis"]
counts = r["session"]["counts"]
print("  counts", {k: v for k, v in counts.items()})
print("  causes", len(d["causes"]), "freezes", len(d["freezes"]), "gaps", len(d["gaps"]),
      "stalls", len(d["stalls"]))
for i, c in enumerate(d["causes"][:5]):
    holder = (c.get("holder") or {}).get("name")
    root = (c.get("root") or {}).get("text")
    print(f"  {i+1}. [{c['class']}] {c['identity']}: gpu idle {c['gpu_idle_ns']/1e6:.1f} ms,"
          f" blocked {c['blocked_ns']/1e6:.1f} ms, {len(c['threads'])} threads,"
          f" {len(c['freezes'])} freezes, holder {holder}; root: {root}")
PY
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for holder in free freehost; do
    timeout 120 "$gprof" -q -o "$work/static-$holder" -- .gpu/cuda_free_freeze_static --rounds 4 \
      --holder $holder --calls-out "$work/calls-$holder.txt"
    echo "static $holder: gprof-run status $?"
    summarize "$work/static-$holder/report.json"
    keep_session "diag-static-$holder" "$work/static-$holder"
  done
  timeout 400 "$gprof" -q -o "$work/pin" -- python3 scripts/gpu/pin_memory_loader.py
  echo "pin: gprof-run status $?"
  summarize "$work/pin/report.json"
  keep_session diag-pin "$work/pin"
} >> "$summary" 2>&1
cat "$summary"
