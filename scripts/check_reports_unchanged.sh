#!/usr/bin/env bash
# Whether a change to the collector changed its reports: records the demo and the scenario
# programs of tests/apps once, then rebuilds each session's report.txt, report.json, report.html
# and trace with an old and a new build (`gprof-run report DIR`) and diffs them. Both builds read
# the same sessions, so a difference is the collector's, never the run's; the volatile parts that
# are left (the collector's own time and memory, in report.html too, which holds report.txt) are
# masked.
#
#   scripts/check_reports_unchanged.sh OLD_BUILD NEW_BUILD [SESSIONS]
#
# OLD_BUILD, NEW_BUILD: build folders (bin/gprof-run, tests/apps/ in each); SESSIONS: a folder of
# sessions to reuse (recorded there with NEW_BUILD's gprof-run when empty or missing; default
# /tmp/gprof-check-sessions). Runs as root (the kernel recorder). Exit status 1 when any report
# differs; the differences are printed, and kept under SESSIONS/diff/.
set -uo pipefail
cd "$(dirname "$0")/.."
old="$(realpath "${1:?old build folder}")"
new="$(realpath "${2:?new build folder}")"
sessions="${3:-/tmp/gprof-check-sessions}"
mkdir -p "$sessions"

record() {  # NAME CMD...
  local name="$1"
  shift
  [ -d "$sessions/$name" ] && return
  echo "recording $name" >&2
  "$new/bin/gprof-run" -o "$sessions/$name" -- "$@" > "$sessions/$name.out" 2>&1 ||
    echo "  ($name exited with $?)" >&2
}

apps="$new/tests/apps"
python=/usr/bin/python3
record demo "$apps/freeze_app" --rounds 2
record gpu_gaps "$apps/gpu_gaps_app"
record api_tour "$apps/api_tour_app"
record loader_lock "$apps/loader_lock_app"
for scenario in mutex-convoy condvar munmap-fault overcommit pipe kernel-mutex device-ioctl \
  futex-waitv deadlock control odd-names lock-names mutex-chain late-waker preempted-producer \
  oversubscribed; do
  record "scenario-$scenario" "$apps/kernel_scenarios" "$scenario"
done
for script in py_lock_convoy py_queue_feeder gil_convoy py_frames py_thread_names; do
  record "$script" "$python" "tests/apps/$script.py"
done
# This branch's own programs, when they are there (tests/apps/handoffs/).
for script in tests/apps/handoffs/*.py; do
  [ -f "$script" ] || continue
  record "handoff-$(basename "$script" .py)" "$python" "$script"
done

# The collector's own cost and time differ between runs of one session (its unwinding's too).
mask() {
  sed -E -e 's/(collector[^0-9]*)[0-9.]+ ?(s|ms|MiB|KiB|GiB)/\1N \2/g' \
    -e 's/"collector_[a-z_]+": [0-9.]+/"collector_X": N/g' -e 's/"unwind_ns": [0-9]+/"unwind_ns": N/g' \
    "$1"
}

status=0
mkdir -p "$sessions/diff"
for dir in "$sessions"/*/; do
  name="$(basename "$dir")"
  [ "$name" = diff ] && continue
  [ -f "$dir/session.json" ] || continue
  for build in old new; do
    bin="$old/bin/gprof-run"
    [ "$build" = new ] && bin="$new/bin/gprof-run"
    "$bin" report "$dir" > /dev/null 2>&1
    for file in report.txt report.json report.html; do
      mask "$dir/$file" > "$sessions/diff/$name.$file.$build"
    done
    cp "$dir/trace.perfetto-trace" "$sessions/diff/$name.trace.$build" 2>/dev/null
  done
  for file in report.txt report.json report.html; do
    if ! diff -u "$sessions/diff/$name.$file.old" "$sessions/diff/$name.$file.new" \
      > "$sessions/diff/$name.$file.diff"; then
      echo "== $name: $file differs"
      head -60 "$sessions/diff/$name.$file.diff"
      status=1
    fi
  done
  if ! cmp -s "$sessions/diff/$name.trace.old" "$sessions/diff/$name.trace.new"; then
    echo "== $name: trace.perfetto-trace differs"
    status=1
  fi
done
[ "$status" = 0 ] && echo "all reports unchanged"
exit "$status"
