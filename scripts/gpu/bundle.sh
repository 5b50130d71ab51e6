#!/usr/bin/env bash
# Run here, after scripts/setup.sh: puts what scripts/gpu/validate.sh needs into .gpu/ (ignored by
# git), for the device tool's `carry`: gprof-run, the injected library, the test binaries and
# programs of the build, and the real-CUDA freeze program compiled for Hopper.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}  # the build directory to take the binaries from
baseline=${BASELINE:-}  # optional: another build whose gprof-run run_all.sh kernel_cost compares
rm -rf .gpu && mkdir -p .gpu/build/bin .gpu/build/lib/gprof-run .gpu/build/tests/apps \
  .gpu/build/tests/fake_cuda
cp "$build"/bin/gprof-run .gpu/build/bin/
cp "$build"/lib/gprof-run/libgprof_inject.so .gpu/build/lib/gprof-run/
cp "$build"/tests/e2e_test "$build"/tests/kernel_recorder_test "$build"/tests/inject_test \
  "$build"/tests/kernel_scenarios_test "$build"/tests/job_control_test \
  "$build"/tests/signal_forwarding_test .gpu/build/tests/
if [ -n "$baseline" ]; then
  mkdir -p .gpu/baseline/bin .gpu/baseline/lib/gprof-run
  cp "$baseline"/bin/gprof-run .gpu/baseline/bin/
  cp "$baseline"/lib/gprof-run/libgprof_inject.so .gpu/baseline/lib/gprof-run/
fi
# Every test program, and the mock CUPTI beside the fake runtime: without it the tests' injected
# library finds the machine's real libcupti, which never hears of the fake runtime's calls.
find "$build"/tests/apps -maxdepth 1 -type f -perm -u+x -exec cp {} .gpu/build/tests/apps/ \;
cp -P "$build"/tests/fake_cuda/libcudart.so.13* "$build"/tests/fake_cuda/libcupti.so* \
  .gpu/build/tests/fake_cuda/
# bpftool for scripts/bench/kernel_cost.py's BPF run times, with the libraries the host may lack.
mkdir -p .gpu/tools/lib
cp "$(readlink -f "$(command -v bpftool)")" .gpu/tools/lib/bpftool
for lib in libelf.so.1 libz.so.1 libcap.so.2; do
  cp -L "/lib/x86_64-linux-gnu/$lib" .gpu/tools/lib/
done
find .gpu -type f -perm -u+x -exec strip --strip-debug {} +
# (after the strip: a shell script)
printf '#!/bin/sh\nhere=$(dirname "$(readlink -f "$0")")\nLD_LIBRARY_PATH=$here/lib exec "$here/lib/bpftool" "$@"\n' \
  > .gpu/tools/bpftool
chmod +x .gpu/tools/bpftool
/usr/local/cuda/bin/nvcc -O2 -std=c++17 -arch=sm_90 -cudart shared \
  -Xlinker -rpath,/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib \
  -o .gpu/cuda_free_freeze scripts/gpu/cuda_free_freeze.cu
# nvcc's default: the CUDA runtime linked in statically, as third-party binaries often are.
/usr/local/cuda/bin/nvcc -O2 -std=c++17 -arch=sm_90 -o .gpu/cuda_free_freeze_static \
  scripts/gpu/cuda_free_freeze.cu
# Ignored by git, so that the device tool carries it (in a worktree too: its exclude file is the
# common one).
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
du -sh .gpu
