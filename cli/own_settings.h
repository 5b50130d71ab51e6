// What gprof-run sets for its own process and never for the command's: the command starts with
// the limits, signal dispositions and OOM score gprof-run was started with.
#pragma once

namespace gprof::cli {

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
