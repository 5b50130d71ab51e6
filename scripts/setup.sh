#!/usr/bin/env bash
# Installs every Debian package gprof-run needs to build and test, then builds it in ./build.
# Run as root (or with sudo) on Debian 12. Usage: scripts/setup.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config       # the C++20 toolchain
  clang llvm bpftool                     # BPF programs: clang -target bpf, skeletons, vmlinux.h
  libbpf-dev libelf-dev zlib1g-dev libzstd-dev  # the kernel recorder's loader (linked statically)
  libdw-dev libbz2-dev liblzma-dev       # the collector's unwinder and source lines, libdw (static)
  libcli11-dev nlohmann-json3-dev libprotozero-dev  # command line, JSON report, Perfetto encoder
  libgtest-dev protobuf-compiler         # tests; protoc checks the trace against Perfetto's schema
  libclang-rt-14-dev                     # scripts/fuzz.sh: libFuzzer and the sanitizers for clang
  python3                                # tests: the GIL convoy (tests/apps/gil_convoy.py)
  python3-torch                          # tests: Python stacks of DataLoader workers (py_frames.py), handoffs (handoffs_test)
  libpython3-dev                         # tests: CPython's internal headers, to check our offsets
  passwd libcap2-bin util-linux          # security tests: throwaway users, setcap, setpriv
  libc6-dbg                              # tests: libc's local symbols (stdout's lock), by build-id
  btrfs-progs                            # tests: a disk quota (a btrfs qgroup on a loop device)
  chromium                               # tests: report.html in a headless browser
  universal-ctags git                    # tests: the house's size rules (scripts/check_house.py)
  iproute2                               # tests: hosts as network namespaces joined by veth pairs (ip)
  libc6-i386                             # tests: a 32-bit program under gprof-run (its loader)
)

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: installing packages needs root; run it with sudo" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" > /dev/null

if [ ! -f /usr/local/cuda/include/cuda_runtime_api.h ]; then
  echo "setup.sh: the CUDA toolkit headers are missing (/usr/local/cuda/include): install the CUDA" \
       "toolkit (13.0) first; no GPU is needed" >&2
  exit 1
fi
if [ ! -r /sys/kernel/btf/vmlinux ]; then
  echo "setup.sh: this kernel has no BTF (/sys/kernel/btf/vmlinux): the BPF programs cannot be" \
       "built here" >&2
  exit 1
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" > /dev/null
cmake --build build -j "$(nproc)"
