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

# /proc/PID/maps: a real one, and lines with odd paths.
head -c 8192 /proc/self/maps > "$corpus/process_maps/self"
printf '%s\n' '7f0000000000-7f0000001000 r-xp 00000000 08:01 42 /tmp/a b (deleted)' \
  '7f0000001000-7f0000000000 rw-p 00001000 08:01 42' '0-ffffffffffffffff ---p 0 0:0 0 [vsyscall]' \
  'garbage' > "$corpus/process_maps/odd"
ls "$corpus"/* | head -100
du -sh "$corpus"
