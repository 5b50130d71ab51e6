#!/usr/bin/env bash
# One device call on the GPU machine, from the repository root, with .gpu/ from scripts/gpu/bundle.sh
# carried (BUILD=build-lead scripts/gpu/bundle.sh here first). Each part is capped with timeout so
# that the call stays under the device's 10 minutes; the results come back as one archive,
# $OUT/results.tar.gz, and $OUT/summary.txt (the device returns at most 8 files).
#   scripts/gpu/run_all.sh validate   never blaming itself, GPU idle per device, the driver lock's
#                                     freeze, Python stacks on real CUDA (about 9 minutes)
#   scripts/gpu/run_all.sh bench      short waits counted (ResNet-50, 60 s, both settings), the
#                                     Python stacks' cost, the H200 freeze's report.html
#   scripts/gpu/run_all.sh PART...    the parts named (bpf_tests signals self_blame gpu_idle freeze containers handoffs
#                                     python_stacks dump attach nvtx nccl short_waits python_cost kernel_cost
#                                     kernel_cost_pinned kernel_long_futex kernel_long_pipe
#                                     kernel_5min_pipe; KINDS=futex,pipe,tcp,bulk,faults picks
#                                     kernel_cost's programs)
set -u
# $OUT, or today's results folder outside the tree (scripts/results_dir.py), gpu/ in it.
out=${OUT:-$(python3 "$(dirname "$0")/../results_dir.py" gpu)} || exit 1
echo "results: $out" >&2
results=$out/results
mkdir -p "$results"
work=$(mktemp -d)
[ -e build-lead ] || ln -s .gpu/build build-lead
summary=$out/summary.txt
: > "$summary"

part() {  # part NAME SECONDS COMMAND...: runs COMMAND capped, its output in results/NAME.log
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  timeout "$seconds" "$@" > "$results/$name.log" 2>&1
  echo "$name: status $? after $((SECONDS - start)) s" | tee -a "$summary"
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
  uname -r
} >> "$summary" 2>&1

run() {
  case $1 in
    bpf_tests)
      # The tests that need BPF, on this host's kernel (their programs run on the fake runtime):
      # the kernel scenarios three times, as their waits and switches differ from run to run.
      part "$1" 300 env LD_LIBRARY_PATH=.gpu/build/tests/fake_cuda \
        GPROF_BUILD_DIR="$PWD/.gpu/build" GPROF_SOURCE_DIR="$PWD" GPROF_REQUIRE_BPF=1 \
        sh -c 'status=0; for test in kernel_scenarios_test kernel_scenarios_test \
        kernel_scenarios_test kernel_recorder_test; do \
        .gpu/build/tests/$test --gtest_brief=1 || { echo "$test failed"; status=1; }; done; \
        exit $status'
      ;;
    signals)
      # Signal forwarding and job control, with the kernel recorder's records of signals.
      part "$1" 180 env LD_LIBRARY_PATH=.gpu/build/tests/fake_cuda \
        GPROF_BUILD_DIR="$PWD/.gpu/build" GPROF_SOURCE_DIR="$PWD" GPROF_REQUIRE_BPF=1 \
        sh -c 'status=0; for test in signal_forwarding_test job_control_test; do \
        .gpu/build/tests/$test --gtest_brief=1 || { echo "$test failed"; status=1; }; done; \
        exit $status'
      ;;
    self_blame) part self_blame 170 env OUT="$results" scripts/gpu/validate_self_blame.sh ;;
    gpu_idle) part gpu_idle 170 env OUT="$results" scripts/gpu/validate_gpu_idle.sh ;;
    freeze)
      # The driver's lock: cudaFree waits for the GPU while other threads launch; the lock is
      # named in libcuda and its holder is the thread in cudaFree. report.html comes back too.
      part freeze 60 sh -c ".gpu/build/bin/gprof-run -o $work/freeze -- .gpu/cuda_free_freeze \
        --rounds 8 --calls-out $work/calls.txt > $results/freeze_report.txt 2>&1; \
        python3 scripts/gpu/check_freeze_report.py $work/freeze/report.json $work/calls.txt cudaFree"
      cp "$work/freeze/report.json" "$results/freeze.report.json" 2>/dev/null
      cp "$work/freeze/report.html" "$results/freeze.report.html" 2>/dev/null
      ;;
    containers)
      # Issue 34: the driver lock's freeze in a PID namespace (threads matched by name: the
      # program's ids are the namespace's), in a time namespace (the program's clock 7 s ahead),
      # and a torch loop in a PID and IPC namespace, recorded whole, its stdout its own.
      part containers_pidns 60 sh -c ".gpu/build/bin/gprof-run -o $work/pidns -- unshare -fp \
        --mount-proc .gpu/cuda_free_freeze --rounds 4 --calls-out $work/pidns.txt \
        > $results/containers_pidns.txt 2>&1; python3 scripts/gpu/check_freeze_report.py \
        $work/pidns/report.json $work/pidns.txt cudaFree --tids-by-name"
      part containers_timens 60 sh -c ".gpu/build/bin/gprof-run -o $work/timens -- unshare -T \
        --monotonic 7 --boottime 7 -f .gpu/cuda_free_freeze --rounds 4 --calls-out \
        $work/timens.txt > $results/containers_timens.txt 2>&1; python3 \
        scripts/gpu/check_freeze_report.py $work/timens/report.json $work/timens.txt cudaFree \
        --clock-offset-ns 7000000000"
      part containers_torch 150 sh -c "python3 scripts/gpu/torch_in_namespace.py > $work/plain.out; \
        .gpu/build/bin/gprof-run -q -o $work/torch -- unshare -fpi --mount-proc python3 \
        scripts/gpu/torch_in_namespace.py > $work/ns.out 2> $results/containers_torch.err; \
        cmp $work/plain.out $work/ns.out && python3 scripts/gpu/check_recorded_whole.py \
        $work/torch/report.json worker0 worker1"
      cp "$work/torch/report.txt" "$results/containers_torch.report.txt" 2>/dev/null
      ;;
    dump)
      # Issue 38: `gprof-run dump` on PyTorch programs made to hang (a CUDA wait beside an RLock's
      # holder and waiters; a DataLoader worker that never returns): the threads' Python lines.
      part dump 120 scripts/gpu/validate_dump.sh .gpu/build/bin/gprof-run "$results/dump"
      ;;
    attach)
      # Issue 38: `gprof-run -p PID --duration 5` on a running PyTorch loop: its CUDA calls from
      # uprobes on the real libcuda, the loop's rate before, during and after.
      part attach 180 scripts/gpu/validate_attach.sh .gpu/build/bin/gprof-run "$results/attach"
      ;;
    nvtx)
      # Issue 39: torch.cuda.nvtx ranges and emit_nvtx's operators against torch.profiler.
      part nvtx 330 env OUT="$results" GPROF_BUILD="$PWD/.gpu/build" scripts/gpu/nvtx_torch.sh
      ;;
    nccl)
      # Issue 37: NCCL's profiler plugin on real NCCL, a world-size-1 torch.distributed loop.
      part nccl 420 env OUT="$results" GPROF_BUILD="$PWD/.gpu/build" scripts/gpu/nccl_world1.sh
      ;;
    handoffs)
      # Issue 35: a DataLoader-bound training loop; the GPU's idle time followed through the main
      # thread's wait in next() into the late worker and its decode_sample.
      part handoffs 120 sh -c ".gpu/build/bin/gprof-run -o $work/dl -- python3 \
        scripts/gpu/dataloader_gpu_handoff.py > $work/dl.out 2> $results/handoffs_report.txt; \
        python3 scripts/gpu/check_handoff_report.py $work/dl/report.json $work/dl.out"
      ;;
    python_stacks) part python_stacks 150 env OUT="$results" ROUNDS=0 scripts/gpu/validate_python_stacks.sh ;;
    short_waits)
      part short_waits 330 env OUT="$work/short" scripts/gpu/bench_short_waits.sh 1 60
      cp "$work/short"/short_waits.* "$work/short"/gpu.txt "$results/" 2>/dev/null
      for f in "$work/short"/resnet50-*/report.txt; do
        [ -f "$f" ] && cp "$f" "$results/$(basename "$(dirname "$f")").report.txt"
      done
      ;;
    python_cost)
      part python_cost 200 python3 scripts/bench/gpu_overhead.py --rounds 2 \
        --configs plain,gprof_full,gprof_full_nopy --gprof "$PWD/.gpu/build/bin/gprof-run" \
        --workload-args "--ops 20000 --steps 10" --timeout 90 --json "$results/python_overhead.json"
      ;;
    kernel_cost | kernel_cost_pinned)
      # The kernel recorder's cost on hand-overs on a host with many idle CPUs: as it comes
      # (idle CPUs sleep), then with idle CPUs polling (/dev/cpu_dma_latency 0). bpftool is the
      # bundle's (the host has none), for the BPF run time per program. With .gpu/baseline
      # (bundle.sh BASELINE=DIR), that build runs in the same rounds: a change's before and after.
      # kernel_cost_pinned: ping and pong on CPUs 2 and 3 (PIN_CPUS), plain and recorded alike, so
      # that every hand-over crosses the same two CPUs; the default --count-under only.
      local name=$1 pin=() under=0,20
      [ "$name" = kernel_cost_pinned ] && pin=(--pin-cpus "${PIN_CPUS:-2,3}") && under=20
      for latency in default 0; do
        local extra=("${pin[@]}")
        [ "$latency" = 0 ] && extra+=(--cpu-latency-us 0)
        [ -x .gpu/baseline/bin/gprof-run ] && extra+=(--baseline .gpu/baseline)
        part "${name}_latency_$latency" 270 env PATH="$PWD/.gpu/tools:$PATH" \
          python3 scripts/bench/kernel_cost.py .gpu/build "${extra[@]}" --runs 11 --rounds 30000 \
          --kinds "${KINDS:-futex,pipe}" --count-under "$under" \
          --stats-windows 3 --long-seconds 0 --json "$results/${name}_latency_$latency.json"
      done
      { nproc; lscpu | grep -i "model name"; lscpu -e
        cat /sys/devices/system/clocksource/clocksource0/current_clocksource
        cat /sys/devices/system/cpu/cpuidle/current_driver
        grep . /sys/devices/system/cpu/cpu0/cpuidle/state*/name; } > "$results/host.txt" 2>&1
      ;;
    kernel_long_futex | kernel_long_pipe)
      # Issue 22's records and trace bytes a second of a 60-s ping-pong, every wait recorded
      # (--count-under 0) and short waits counted (20 us), idle CPUs polling; part 1's one round
      # only sizes the long runs. One kind a call: both take over two minutes, near the device's
      # limit with the machine's start.
      local kind=${1#kernel_long_}
      part "$1" 560 env PATH="$PWD/.gpu/tools:$PATH" \
        python3 scripts/bench/kernel_cost.py .gpu/build --cpu-latency-us 0 --runs 1 --rounds 30000 \
        --kinds "$kind" --count-under 0,20 --stats-windows 0 --long-seconds 60 \
        --long-kinds "$kind" --json "$results/$1.json"
      ;;
    kernel_5min_pipe)
      # Issue 22's long run: a pipe ping-pong of about 5 minutes (its rounds sized from part 1's
      # one round) recorded as it comes, short waits counted: the trace's size (the Perfetto UI
      # opens up to about 2 GB) and gprof-run's peak RSS.
      part "$1" 560 env PATH="$PWD/.gpu/tools:$PATH" \
        python3 scripts/bench/kernel_cost.py .gpu/build --runs 1 --rounds 30000 --kinds pipe \
        --count-under 20 --stats-windows 0 --long-seconds 300 --long-kinds pipe \
        --json "$results/$1.json"
      ;;
    *) echo "run_all.sh: no part $1" | tee -a "$summary" ;;
  esac
}
parts=("$@")
case ${1:-validate} in
  validate) parts=(self_blame gpu_idle freeze python_stacks) ;;
  bench) parts=(short_waits python_cost freeze) ;;
esac
for name in "${parts[@]}"; do run "$name"; done
tar czf "$out/results.tar.gz" -C "$out" results
rm -rf "$results" "$work"
ls -la "$out"
