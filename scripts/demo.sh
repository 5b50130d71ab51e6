#!/usr/bin/env bash
# Installs what is needed, builds, and shows gprof-run explaining a freeze. Run as root.
#
# Without a GPU the demo runs tests/apps/freeze_app on the fake CUDA runtime (tests/fake_cuda): three
# threads launch small kernels while a fourth calls cudaDeviceSynchronize, which holds the runtime's
# driver lock until the (simulated) GPU drains a 40 ms kernel. Every launch meanwhile blocks on
# that lock, as with the real driver (design brief, sections 1.2 and 6). The contention is real
# (a futex in the kernel); only the GPU is simulated.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

session="$(mktemp -d /tmp/gprof-demo-XXXXXX)/session"
echo
echo "== gprof-run demo: a CUDA launch freeze, on a simulated GPU with a real driver lock =="
echo "== (no GPU is used: the fake CUDA runtime of tests/fake_cuda stands in for libcudart) =="
echo "\$ gprof-run -o $session -- freeze_app --rounds 2"
echo
build/bin/gprof-run -o "$session" -- build/tests/apps/freeze_app --rounds 2
echo
echo "The report above is also in $session/report.txt (and report.json); the trace,"
echo "$session/trace.perfetto-trace, opens in https://ui.perfetto.dev."
