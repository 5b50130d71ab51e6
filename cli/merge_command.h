// `gprof-run merge -o OUT DIR...`: the sessions of one job (one per rank, host or process group)
// explained together: one clock, the ranks' waits for each other, one report and trace in OUT.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gprof::cli {

struct MergeCommandOptions {
  std::string output_dir;
  std::vector<std::string> directories;
  double threshold_ms = 1.0;
  uint64_t collector_memory_bytes = 0;
};

// Returns 0, or kExitToolFailure with one line on stderr.
int MergeCommand(const MergeCommandOptions& options);

}  // namespace gprof::cli
