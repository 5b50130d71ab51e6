#!/usr/bin/env bash
# On the GPU machine: `gprof-run dump` on PyTorch programs made to hang (scripts/gpu/hang_torch.py):
#   lock        the main thread in torch.cuda.synchronize() behind a spinning kernel, a thread
#               holding an RLock in time.sleep, two threads waiting for it
#   dataloader  the main thread in next() for a batch its DataLoader worker never makes
# Each dump (text and --json) is kept in OUT_DIR and checked by check_dump_report.py against the
# tids the program printed. Usage: validate_dump.sh GPROF_RUN OUT_DIR
set -uo pipefail
gprof=${1:?gprof-run}
out=${2:?output directory}
here=$(dirname "$(readlink -f "$0")")
mkdir -p "$out"
status=0
for mode in lock dataloader; do
  python3 "$here/hang_torch.py" "$mode" > "$out/$mode.facts" 2> "$out/$mode.stderr" &
  program=$!
  for _ in $(seq 60); do  # torch's start and CUDA's: until the program said where it hangs
    grep -q "role=main" "$out/$mode.facts" && break
    sleep 0.5
  done
  sleep 3
  start=$(date +%s.%N)
  "$gprof" dump -p "$program" --json "$out/$mode.dump.json" > "$out/$mode.dump.txt" \
    2> "$out/$mode.dump.err"
  echo "$mode: dump exit $?, $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 2))" "$(date +%s.%N)" "$start") s"
  kill -9 "$program" 2>/dev/null
  pkill -9 -P "$program" 2>/dev/null
  wait "$program" 2>/dev/null
  python3 "$here/check_dump_report.py" "$mode" "$out/$mode.facts" "$out/$mode.dump.txt" \
    "$out/$mode.dump.json" || status=1
done
exit $status
