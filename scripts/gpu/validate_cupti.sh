#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with .gpu/ from scripts/gpu/bundle.sh carried
# along: the CUPTI capture of issue 3. `validate_cupti.sh bench` times the launch-bound loop with
# no profiler, interposition, CUPTI callbacks and CUPTI activity API records (5 interleaved
# rounds), and explains the real freezes of a program with the CUDA runtime linked statically
# (cudaFree, cudaFreeHost). `validate_cupti.sh torch` compares the kernels of a training loop with
# torch.profiler's, runs torch.profiler inside gprof-run (CUPTI taken, then --cuda=preload), and
# the pin-memory DataLoader of the article. Sessions' reports and small traces go to $OUT.
set -u
part=${1:?bench or torch}
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
mkdir -p "$out"
gprof=$PWD/.gpu/build/bin/gprof-run
work=$(mktemp -d)
keep=$work/keep
mkdir -p "$keep"
summary=$out/$part.txt
: > "$summary"

# Keeps a session's report.txt/report.json (and its trace when small) as $keep/<name>.*
keep_session() {
  local name=$1 dir=$2
  cp "$dir/report.txt" "$keep/$name.report.txt" 2>/dev/null
  cp "$dir/report.json" "$keep/$name.report.json" 2>/dev/null
  if [ -f "$dir/trace.perfetto-trace" ] && [ "$(stat -c %s "$dir/trace.perfetto-trace")" -lt 8000000 ]; then
    cp "$dir/trace.perfetto-trace" "$keep/$name.perfetto-trace"
  fi
}

if [ "$part" = bench ]; then
  {
    date -u
    for round in 1 2 3 4 5; do
      for config in plain preload cupti_callbacks cupti_activity; do
        case $config in
          plain) cmd=(python3 scripts/gpu/torch_check.py 50000 loop) ;;
          preload) cmd=("$gprof" -q --no-kernel --cuda=preload -o "$work/b-$config-$round" -- python3 scripts/gpu/torch_check.py 50000 loop) ;;
          cupti_callbacks) cmd=("$gprof" -q --no-kernel -o "$work/b-$config-$round" -- python3 scripts/gpu/torch_check.py 50000 loop) ;;
          cupti_activity) cmd=(env GPROF_CUPTI_API_RECORDS=activity "$gprof" -q --no-kernel -o "$work/b-$config-$round" -- python3 scripts/gpu/torch_check.py 50000 loop) ;;
        esac
        result=$(timeout 120 "${cmd[@]}" 2>&1 | tr '\n' ' ')
        echo "round=$round config=$config status=$? $result"
      done
    done
    python3 - "$work" <<'PY'
import json, sys
for config in ("preload", "cupti_callbacks", "cupti_activity"):
    r = json.load(open(f"{sys.argv[1]}/b-{config}-1/report.json"))
    s = r["session"]
    print(config, "counts", s["counts"], "lost", s["lost"], "messages", s["messages"][:3])
    print("   capture", [p.get("capture") for p in s["processes"]],
          "gpu", {k: v for k, v in r["gpu"].items() if k != "kernels"})
PY
  } >> "$summary" 2>&1
  for holder in free freehost; do
    api=cudaFree; [ $holder = freehost ] && api=cudaFreeHost
    timeout 120 "$gprof" -q -o "$work/static-$holder" -- .gpu/cuda_free_freeze_static --rounds 4 \
      --holder $holder --calls-out "$work/calls-$holder.txt" >> "$summary" 2>&1
    echo "static $holder: gprof-run status $?" >> "$summary"
    python3 scripts/gpu/check_freeze_report.py "$work/static-$holder/report.json" \
      "$work/calls-$holder.txt" $api >> "$summary" 2>&1
    keep_session "static-$holder" "$work/static-$holder"
  done
else
  {
    date -u
    timeout 300 python3 scripts/gpu/train_small.py --profiler torch --out "$work/torch_kernels.json"
    timeout 300 "$gprof" -q -o "$work/train" -- python3 scripts/gpu/train_small.py
    echo "train under gprof-run: status $?"
    python3 scripts/gpu/compare_kernels.py "$work/train/report.json" "$work/torch_kernels.json"
    cp "$work/torch_kernels.json" "$keep/train.torch_kernels.json"
    # torch.profiler inside gprof-run: CUPTI taken by gprof-run (said in the report), then left to it.
    timeout 300 "$gprof" -q -o "$work/taken" -- python3 scripts/gpu/train_small.py --steps 20 \
      --profiler torch --out "$work/taken_kernels.json"
    echo "torch.profiler under gprof-run: status $?, kernels torch.profiler saw: $(python3 -c "import json;print(len(json.load(open('$work/taken_kernels.json'))))")"
    grep -i 'cupti\|note' "$work/taken/report.txt" | head -5
    timeout 300 "$gprof" -q --cuda=preload -o "$work/preload" -- python3 scripts/gpu/train_small.py \
      --steps 20 --profiler torch --out "$work/preload_kernels.json"
    echo "torch.profiler under gprof-run --cuda=preload: status $?, kernels torch.profiler saw: $(python3 -c "import json;print(len(json.load(open('$work/preload_kernels.json'))))")"
    timeout 300 "$gprof" -q -o "$work/pin" -- python3 scripts/gpu/pin_memory_loader.py
    echo "pin_memory_loader under gprof-run: status $?"
    head -40 "$work/pin/report.txt"
  } >> "$summary" 2>&1
  keep_session train "$work/train"
  keep_session taken "$work/taken"
  keep_session pin "$work/pin"
fi
python3 -c "import tarfile,sys; t=tarfile.open('$out/$part-sessions.tar.gz','w:gz'); t.add('$keep', arcname='$part'); t.close()"
ls -la "$keep" >> "$summary"
