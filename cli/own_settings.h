// What gprof-run sets for its own process and never for the command's: the command starts with
// the limits, signal dispositions and OOM score gprof-run was started with.
//
// Limits: the resource limits gprof-run was started with are the command's, not gprof-run's own. A
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

// Runs main(argc, argv) with stack enough for gprof-run, and returns what it returns. A small
// stack limit (`ulimit -s 64`, a launcher's: it sets the hard limit too) is the command's to live
// with, not gprof-run's: below what gprof-run needs, main runs on a stack of its own mapping, and
// every thread gets that much stack whatever the limit. The limit stays as it was: the command
// inherits it.
int RunOnOwnStack(int (*main)(int, char**), int argc, char** argv);

// Once the command is forked (it keeps what gprof-run was started with):
// - gprof-run is the OOM killer's first choice, before any process of the job: where both share a
//   memory cgroup (a container), the kernel recorder's maps count against it, and a profiler
//   that runs a job out of memory must be what goes (the command runs on unrecorded; the session
//   keeps what was recorded).
// - a closed pipe on its stderr (`gprof-run ... 2>&1 | head`) does not kill it with SIGPIPE: its
//   exit status stays the command's.
void TakeOwnSettingsAfterFork();

}  // namespace gprof::cli
