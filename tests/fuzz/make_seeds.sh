#!/usr/bin/env bash
# Regenerates the seed corpus (tests/fuzz/corpus/TARGET) from sessions that the main build's
# gprof-run records of the test programs: small valid inputs for each reader, and cut and damaged
# variants of them. Run through scripts/fuzz.sh --make-seeds [MAIN_BUILD]; as root, so that the
# kernel recorder runs. Usage: make_seeds.sh MAIN_BUILD FUZZ_BUILD
set -euo pipefail
main=$1 fuzz=$2
cd "$(dirname "$0")/../.."
cmake --build "$main" -j "$(nproc)" --target gprof-run gprof_inject mock_cupti fake_cudart \
  api_tour_app freeze_app kernel_scenarios > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gprof="$main/bin/gprof-run" apps="$main/tests/apps" extract="$fuzz/fuzz/extract_records"
"$gprof" -q -o "$work/tour" -- "$apps/api_tour_app" > /dev/null
"$gprof" -q -o "$work/freeze" -- "$apps/freeze_app" --rounds 2 > /dev/null
"$gprof" -q -o "$work/odd" -- "$apps/kernel_scenarios" odd-names > /dev/null
"$gprof" -q -o "$work/lock" -- "$apps/kernel_scenarios" kernel-mutex > /dev/null
"$gprof" -q --device-prefix ptmx -o "$work/device" -- "$apps/kernel_scenarios" device-ioctl > /dev/null
"$gprof" -q -o "$work/waitv" -- "$apps/kernel_scenarios" futex-waitv > /dev/null

corpus=tests/fuzz/corpus
rm -rf "$corpus"
mkdir -p "$corpus"/{chunk_file,inject_records,kernel_records,session_json,process_maps}

# A copy of `$1` cut to `$2` bytes, and one with the byte at `$3` flipped.
cut() { head -c "$2" "$1"; }
flip() { cp "$1" "$2"; printf '\xa5' | dd of="$2" bs=1 seek="$3" conv=notrunc status=none; }

for session in tour freeze odd lock device waitv; do
  for file in "$work/$session"/inject-*.gpr; do
    [ -e "$file" ] || continue
    seed="$corpus/inject_records/$session"
    "$extract" "$file" 3 > "$seed"
    cut "$seed" $(( $(stat -c %s "$seed") / 2 )) > "$seed-cut"
    "$extract" "$file" 1 >> "$corpus/kernel_records/$session-joint"
    break
  done
  if [ -e "$work/$session/kernel.gpr" ]; then
    seed="$corpus/kernel_records/$session"
    "$extract" "$work/$session/kernel.gpr" 3 > "$seed"
    "$extract" "$work/$session/kernel.gpr" 2 >> "$corpus/kernel_records/$session-joint"
    cut "$seed" $(( $(stat -c %s "$seed") / 2 )) > "$seed-cut"
  fi
  meta="$work/$session/session.json"
  cp "$meta" "$corpus/session_json/$session"
done
# session.json: cut, damaged, from a newer gprof-run.
cut "$work/tour/session.json" 40 > "$corpus/session_json/cut"
flip "$work/tour/session.json" "$corpus/session_json/damaged" 20
sed 's/"version": *1/"version": 2/' "$work/tour/session.json" > "$corpus/session_json/newer"

# session.json as a hostile user could write it (issue 17): numbers past a double's range, an
# integer past every field's, values out of their fields' ranges or of the wrong type, nesting
# past what the reader takes, and tiny values by the thousand.
printf '{"version": 1, "command": ["a"], "start": {"monotonic_ns": 1e400, "realtime_ns": -1e999}}' \
  > "$corpus/session_json/overflow"
printf '{"version": 1, "root_pid": %s}' "$(printf '9%.0s' $(seq 401))" > "$corpus/session_json/digits"
printf '%s' '{"version": 1, "root_pid": -5, "exit": {"code": 99999999999, "signal": -3},' \
  ' "window": {"delay_s": -1, "duration_s": null}, "finished": "yes", "command": ["a", 5, {}],' \
  ' "kernel_recording": [], "max_size": 7, "recording_stopped": [1, {"file": 2}]}' \
  > "$corpus/session_json/ranges"
{ printf '{"version": 1, "start": '; printf '[%.0s' $(seq 20000); printf ']%.0s' $(seq 20000)
  printf '}'; } > "$corpus/session_json/deep"
{ printf '{"version": 1, "x": ['; printf '{},%.0s' $(seq 5000); printf '{}], "recording_stopped": ['
  printf '{"file": "kernel.gpr"},%.0s' $(seq 1500); printf '{}]}'; } > "$corpus/session_json/many"

# Whole files, as they lie on disk: the smallest real ones, cut inside the last chunk and damaged
# in the first chunk's payload; and a header from a newer format version.
for file in "$work/tour"/inject-*.gpr "$work/odd/kernel.gpr"; do
  name=$(basename "$file" .gpr)
  size=$(stat -c %s "$file")
  [ "$size" -le 65536 ] || continue
  cp "$file" "$corpus/chunk_file/$name"
  cut "$file" $(( size - 10 )) > "$corpus/chunk_file/$name-cut"
  flip "$file" "$corpus/chunk_file/$name-damaged" 100
  flip "$file" "$corpus/chunk_file/$name-newer" 8  # the low byte of the format version
done

# Hostile framing (issue 17), from the first of those: zeros where a chunk should be (what a hole
# reads as), junk after every chunk, and a chunk header claiming 4 GiB of everything.
file=$(ls "$corpus"/chunk_file/inject-* | grep -v -- '-[a-z]*$' | head -1)
header=$(( $(od -An -tu4 -j12 -N4 "$file") ))
{ head -c "$header" "$file"; head -c 4096 /dev/zero; tail -c +$(( header + 1 )) "$file"; } \
  > "$corpus/chunk_file/zeros"
{ head -c "$header" "$file"; for _ in 1 2 3; do tail -c +$(( header + 1 )) "$file"; printf 'junk!'; done; } \
  > "$corpus/chunk_file/junk"
cp "$file" "$corpus/chunk_file/huge-sizes"
printf '\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff' |
  dd of="$corpus/chunk_file/huge-sizes" bs=1 seek=$(( header + 8 )) conv=notrunc status=none

# /proc/PID/maps: a real one, and lines with odd paths.
head -c 8192 /proc/self/maps > "$corpus/process_maps/self"
printf '%s\n' '7f0000000000-7f0000001000 r-xp 00000000 08:01 42 /tmp/a b (deleted)' \
  '7f0000001000-7f0000000000 rw-p 00001000 08:01 42' '0-ffffffffffffffff ---p 0 0:0 0 [vsyscall]' \
  'garbage' > "$corpus/process_maps/odd"
ls "$corpus"/* | head -100
du -sh "$corpus"
