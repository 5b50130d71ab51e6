// `gprof-run dump -p PID[,PID...]`: what each thread of running process trees waits on now, who
// holds it, and the deadlocks among them, with each thread's kernel, native and Python stacks.
#pragma once

#include <string>
#include <vector>

namespace gprof::cli {

struct DumpCommandOptions {
  std::vector<std::string> pids;  // as given: each "PID" or "PID,PID..."
  std::string json_path;          // --json: the dump as JSON too, into this new file
  std::string html_path;          // --html: the dump as an HTML page too
};

// Prints the dump on stdout (and into --json's and --html's files) and returns 0, or one line on
// stderr and kExitToolFailure.
int DumpCommand(const DumpCommandOptions& options);

}  // namespace gprof::cli
