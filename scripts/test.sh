#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test. Run as root: the kernel recorder's tests
# load BPF programs. With GPROF_REQUIRE_BPF=1 (CI), a test that cannot load BPF fails instead of
# skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# One test at a time: the end-to-end tests compare durations, and parallel tests on a small
# machine would measure each other.
ctest --test-dir build --output-on-failure --timeout 300
