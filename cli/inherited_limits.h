// The resource limits gprof-run was started with are the command's, not gprof-run's own. A
// launcher's `ulimit -f 64` must bound the command's files, not kill gprof-run with SIGXFSZ
// halfway through kernel.gpr or the report (and leave the command running orphaned); a
// `ulimit -v` must not make gprof-run's own memory (the kernel recorder, the collector) fail.
//
// So gprof-run lifts its own file size, address-space and data limits as far as it may (to the
// hard limit; past it where it holds CAP_SYS_RESOURCE, as root does) and turns SIGXFSZ into a
// write error (EFBIG) for its own writes, and the command gets back exactly the limits and the
// SIGXFSZ disposition gprof-run was started with, right before its exec.
#pragma once

#include <string>

namespace gprof::cli {

// Called first in main: saves the limits gprof-run was started with and lifts its own.
void TakeOwnLimits();

// In the forked command, right before its exec: the saved limits and disposition, exactly.
// Async-signal-safe (system calls only).
void RestoreInheritedLimits();

// When the command starts under a finite address-space or data limit: why it is not injected,
// for the report (empty when it is not). The injected library's memory could make one of the
// program's own allocations fail that succeeds without it (inject/process_limits.h).
std::string MemoryLimitOfCommand();

}  // namespace gprof::cli
