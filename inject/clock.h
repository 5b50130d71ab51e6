// The session's one clock. clock_gettime(CLOCK_MONOTONIC) is a vDSO call (no syscall, ~20 ns) and
// is the clock bpf_ktime_get_ns() reads, so both recorders' timestamps compare directly.
#pragma once

#include <time.h>

#include <cstdint>

namespace gprof {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace gprof
