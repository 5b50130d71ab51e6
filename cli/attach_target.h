// `gprof-run -p PID[,PID...]`: the running processes an attach records, checked before anything
// is loaded (each one must be a live user process gprof-run may trace), and their descendants.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "inject/shared/status.h"

namespace gprof::cli {

// "PID" or "PID,PID..." as given (each -p once or more) into process ids; kInvalid for one that
// is no number.
Expected<std::vector<pid_t>> ParsePidList(const std::vector<std::string>& given);

// Whether gprof-run may attach to each process: it exists, is no zombie, no kernel thread, not
// gprof-run itself, a process and not one of its threads; this process holds what loading the
// kernel recorder takes (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) and what reading another
// user's process takes (CAP_SYS_PTRACE, and a Yama ptrace_scope that allows it). The first that
// fails, in one line naming the process and the privilege.
Status CheckAttachTargets(const std::vector<pid_t>& pids);

// The processes, and every live descendant of theirs now (read from /proc), each once.
std::vector<pid_t> WithDescendants(const std::vector<pid_t>& pids);

// A process's identity across pid reuse: its start time in clock ticks after boot (/proc/PID/stat
// field 22); 0 once it is gone or a zombie.
uint64_t LiveProcessStart(pid_t pid);

// Its command line (/proc/PID/cmdline), one string per argument; its name (comm) where the
// command line is empty.
std::vector<std::string> ProcessCommandLine(pid_t pid);

}  // namespace gprof::cli
