// `gprof-run dump -p PID[,PID...]`: what each thread of running process trees waits on now, who
// holds it, and the deadlocks among them, read from /proc without stopping the processes.
#pragma once

#include <string>
#include <vector>

namespace gprof::cli {

struct DumpCommandOptions {
  std::vector<std::string> pids;  // as given: each "PID" or "PID,PID..."
};

// Prints the dump on stdout and returns 0, or one line on stderr and kExitToolFailure.
int DumpCommand(const DumpCommandOptions& options);

}  // namespace gprof::cli
