// The namespaces of this process that change what the session's records mean: its PID namespace
// (getpid() and gettid() there are not the ids the kernel recorder records, which are the initial
// namespace's) and its time namespace (CLOCK_MONOTONIC there runs at an offset from the one
// bpf_ktime_get_ns() reads). Read without a descriptor the program could see for long, and
// without /proc/self/status, which under `--mount-proc` names the namespace's pids only.
#pragma once

#include <cstdint>

namespace gprof {

// The inode of /proc/self/ns/pid, which tells PID namespaces apart (a namespace's, not the
// pidfs'/procfs' instance's: readlink gives "pid:[N]" in every mount of /proc); 0 where it cannot
// be read. stat on the link's target would work too, but a /proc mounted by another namespace
// (`unshare -p` without --mount-proc) names that one's `self`.
uint32_t OwnPidNamespace();

// CLOCK_MONOTONIC of this process's time namespace minus the initial one's, in ns
// (/proc/self/timens_offsets, `monotonic <s> <ns>`); 0 without a time namespace or where the file
// cannot be read.
int64_t ReadTimeNamespaceOffset();

// The same for CLOCK_BOOTTIME (`boottime <s> <ns>`).
int64_t ReadBoottimeNamespaceOffset();

}  // namespace gprof
