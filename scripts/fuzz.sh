#!/usr/bin/env bash
# Fuzzes every reader of session files (tests/fuzz): builds the libFuzzer targets with Clang, ASan
# and UBSan in their own build directory, runs each for a set time on a copy of its committed seed
# corpus (tests/fuzz/corpus/TARGET), and fails when one finds a crash, a leak, undefined behaviour
# or a hang, printing the input that reproduces it (rerun: BUILD/fuzz/TARGET_fuzzer INPUT).
#
# Usage: scripts/fuzz.sh [--seconds N] [--build-dir DIR] [TARGET...]
#   --seconds N     how long each target runs (default 60)
#   --build-dir DIR where to build (default build-fuzz); the grown corpora stay in DIR/corpus
#   TARGET          chunk_file inject_records kernel_records session_json process_maps (default: all)
#        scripts/fuzz.sh --make-seeds [MAIN_BUILD_DIR]
#   regenerates the seed corpus from sessions that the main build's gprof-run (default: build)
#   records of the test programs; kernel recording needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$(pwd)

targets_all=(chunk_file inject_records kernel_records session_json process_maps)
seconds=60
build=build-fuzz
targets=()
make_seeds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --make-seeds) make_seeds="${2:-build}"; shift $(( $# > 1 ? 2 : 1 )) ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${targets_all[@]}")
for target in "${targets[@]}"; do
  [ -f "tests/fuzz/${target}_fuzzer.cc" ] || { echo "fuzz.sh: no fuzz target $target" >&2; exit 2; }
done

for tool in clang clang++; do
  command -v "$tool" > /dev/null || { echo "fuzz.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 2; }
done
if ! [ -f "$build/CMakeCache.txt" ] || ! grep -q '^GPROF_FUZZERS:BOOL=ON' "$build/CMakeCache.txt"; then
  # -O1: compiles faster than -O2 and keeps the sanitizers' reports exact; fast enough to fuzz.
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DGPROF_FUZZERS=ON -DBUILD_TESTING=OFF > /dev/null
fi
cmake --build "$build" -j "$(nproc)" --target fuzzers ${make_seeds:+extract_records} \
  > "$build/fuzz-build.log" 2>&1 || {
  tail -40 "$build/fuzz-build.log" >&2
  echo "fuzz.sh: building the fuzzers failed (log: $build/fuzz-build.log)" >&2
  exit 1
}

if [ -n "$make_seeds" ]; then
  exec "$source_dir/tests/fuzz/make_seeds.sh" "$make_seeds" "$build"
fi

failed=()
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"     # a copy: what the fuzzer adds never touches the committed seeds
  findings="$build/findings/$target"
  rm -rf "$findings"
  mkdir -p "$corpus" "$findings"
  cp -r "tests/fuzz/corpus/$target/." "$corpus/"
  log="$build/findings/$target.log"
  echo "fuzz.sh: $target for ${seconds}s"
  # A target's dictionary of the tokens its input is made of, where it has one.
  dict=()
  [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: one that takes 2 GiB is a finding.
  if "$build/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 "${dict[@]}" -artifact_prefix="$findings/" -print_final_stats=1 "$corpus" \
      > "$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$log" | tail -1 | sed "s/^/  /" || true
  else
    failed+=("$target")
    echo "fuzz.sh: $target FAILED; its report:" >&2
    grep -E -A30 '^==[0-9]+==ERROR|runtime error|fuzz finding|ALARM|out-of-memory|deadly signal' "$log" \
      | head -60 >&2 || tail -40 "$log" >&2
    for input in "$findings"/crash-* "$findings"/leak-* "$findings"/timeout-* "$findings"/oom-*; do
      [ -e "$input" ] && echo "fuzz.sh: reproducer: $input (run $build/fuzz/${target}_fuzzer $input)" >&2
    done
    echo "fuzz.sh: full log: $log" >&2
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no findings in ${targets[*]} (${seconds}s each)"
