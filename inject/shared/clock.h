// The session's one clock. clock_gettime(CLOCK_MONOTONIC) is a vDSO call (no syscall, ~20 ns) and
// is the clock bpf_ktime_get_ns() reads, so both recorders' timestamps compare directly.
#pragma once

#include <time.h>

#include <cstdint>

namespace gprof {

// In a time namespace (`unshare -T --monotonic 7`) CLOCK_MONOTONIC runs this far ahead of the
// host's, which the kernel recorder reads: the injected library sets it (namespaces.h) before it
// records anything, and every time it writes is then on the host's clock. 0 in gprof-run.
inline constinit int64_t g_time_namespace_offset_ns = 0;

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec) -
         static_cast<uint64_t>(g_time_namespace_offset_ns);
}

}  // namespace gprof
