#!/bin/bash
# The least a futex call's timing costs, by attach point: `pingpong futex ROUNDS` plain, then with
# each variant's programs attached (probe.bpf.c), REPS times interleaved; prints each variant's
# median and range of the pairwise ratios to plain. As root, in a directory that holds load,
# probe.bpf.o, pingpong (and lib/ with the libraries load needs, where the machine lacks them).
#
# Built here with:
#   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I build/bpf/vmlinux \
#     -c scripts/bench/attach_floor/probe.bpf.c -o DIR/probe.bpf.o
#   cc -O2 scripts/bench/attach_floor/load.c -o DIR/load -lbpf
#   cp build/tests/apps/pingpong scripts/bench/attach_floor/run.sh DIR/
# usage: DIR/run.sh ROUNDS REPS VARIANT...   (PINGPONG_CPUS=A,B pins the two threads)
set -u
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib
rounds=$1 reps=$2
shift 2
one() { ./pingpong futex "$rounds" | sed -n 's/.*ns_per_round=\([0-9.]*\).*/\1/p'; }
for _ in $(seq "$reps"); do
  line="plain=$(one)"
  for variant in "$@"; do
    ./load "$variant" > "out.$variant" 2>&1 &
    loader=$!
    until grep -q ready "out.$variant"; do
      sleep 0.05
      if ! kill -0 $loader 2> /dev/null; then
        cat "out.$variant" >&2
        line="$line $variant=fail"
        continue 2
      fi
    done
    line="$line $variant=$(one)"
    kill $loader
    wait $loader
  done
  echo "$line"
done | tee runs.txt
python3 - << 'PY'
import statistics
rows = [dict(pair.split("=") for pair in line.split()) for line in open("runs.txt")]
for variant in rows[0]:
    ratios = sorted(float(row[variant]) / float(row["plain"]) for row in rows
                    if variant != "plain" and row.get(variant, "fail") != "fail")
    if ratios:
        print(f"{variant}: {statistics.median(ratios):.3f}x [{ratios[0]:.3f}-{ratios[-1]:.3f}]"
              f" over {len(ratios)} pairs")
print(f"plain: {statistics.median(float(row['plain']) for row in rows):.0f} ns a round (median)")
PY
