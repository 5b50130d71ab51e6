#!/usr/bin/env bash
# Issue 22 on the GPU machine: what the 60-s ResNet-50 loop leaves under gprof-run with every wait
# recorded (--count-under=0, as before issue 22) and with waits under 20 us only counted (the
# default), run back to back, ROUNDS times (default 1: A B). Run from the repository root with the
# build carried as build-lead/:
#   scripts/gpu/bench_short_waits.sh [ROUNDS] [SECONDS]
# For each run: the step time the workload measured itself, records written to kernel.gpr per
# second, kernel.gpr and trace bytes per second, the trace's size, what was counted. Results in
# $OUT/short_waits.json and .txt (default: short-waits/ in today's results folder outside the
# tree, scripts/results_dir.py). Each run is capped with timeout.
set -u
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" short-waits)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
rounds=${1:-1}
seconds=${2:-60}
gprof=$PWD/build-lead/bin/gprof-run
[ -x "$gprof" ] || { echo "bench_short_waits: $gprof is missing (carry the build as build-lead/)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
for round in $(seq 1 "$rounds"); do
  for us in 0 20; do
    dir=$out/resnet50-$us-$round
    rm -rf "$dir"
    start=$(date +%s.%N)
    # The workload's own time plus start-up, the collector's run and room to spare.
    timeout $((seconds * 4 + 120)) "$gprof" --count-under=$us -q -o "$dir" -- \
      python3 scripts/bench/gpu_workload.py --only resnet50 --steps 1 --seconds "$seconds" \
      > "$dir.stdout" 2> "$dir.stderr"
    echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $start" | bc)" >> "$dir.stdout"
    # The sessions' big files stay out of $OUT's copy: only the figures come back.
  done
done
python3 - "$out" "$seconds" <<'EOF' | tee "$out/short_waits.txt"
import glob, json, os, re, sys
sys.path.insert(0, "scripts/bench")
from kernel_cost import kernel_records
out, seconds = sys.argv[1], float(sys.argv[2])
results = []
for stdout in sorted(glob.glob(os.path.join(out, "resnet50-*-*.stdout"))):
    dir = stdout[: -len(".stdout")]
    us, rnd = dir.rsplit("-", 2)[1:]
    text = open(stdout).read()
    step = re.search(r"RESULT name=resnet50 per_unit_us=([\d.]+)", text)
    wall = re.search(r"rc=(\d+) wall_s=([\d.]+)", text)
    entry = {"count_under_us": int(us), "round": int(rnd), "rc": int(wall.group(1)) if wall else None,
             "gprof_run_wall_s": float(wall.group(2)) if wall else None,
             "step_us": float(step.group(1)) if step else None}
    try:
        session = json.load(open(os.path.join(dir, "report.json")))["session"]
        records = kernel_records(dir)
        kernel = os.path.getsize(os.path.join(dir, "kernel.gpr"))
        trace = os.path.getsize(os.path.join(dir, "trace.perfetto-trace"))
        span_s = (session["end_monotonic_ns"] - session["start_monotonic_ns"]) / 1e9
        entry.update({"session_s": span_s, "kernel_records": records,
                      "kernel_records_per_s": records / span_s, "kernel_gpr_bytes": kernel,
                      "kernel_gpr_bytes_per_s": kernel / span_s, "trace_bytes": trace,
                      "trace_bytes_per_s": trace / span_s, "counts": session["counts"],
                      "counted": session["counted"], "lost": session["lost"]})
    except (OSError, KeyError, ValueError) as error:
        entry["error"] = str(error)
    results.append(entry)
    print(f"--count-under={us:<2} round {rnd}: step {entry['step_us']} us,"
          f" {entry.get('kernel_records_per_s', 0):,.0f} records/s,"
          f" kernel.gpr {entry.get('kernel_gpr_bytes_per_s', 0) / 1e3:,.1f} kB/s,"
          f" trace {entry.get('trace_bytes_per_s', 0) / 1e3:,.1f} kB/s"
          f" ({entry.get('trace_bytes', 0) / 1e6:.1f} MB), rc {entry['rc']}, {entry.get('error', '')}")
json.dump(results, open(os.path.join(out, "short_waits.json"), "w"), indent=1)
EOF
# Keep the reports (small), drop the recordings and traces.
for dir in "$out"/resnet50-*-*/; do
  [ -d "$dir" ] || continue
  cp "$dir/report.txt" "${dir%/}.report.txt" 2>/dev/null
  rm -rf "$dir"
done
