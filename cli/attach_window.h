// `gprof-run -p`: the attached processes followed by the kernel recorder, and the recording
// window's end (--duration, SIGINT/SIGTERM to gprof-run, or every process of the tree gone).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "inject/shared/status.h"

namespace gprof::cli {

// Tracks the processes and every descendant they have now (those they start later the recorder
// follows itself); the tree is read again after tracking, for children forked meanwhile. Returns
// the processes tracked, or the first failure.
Expected<std::vector<pid_t>> TrackProcessTrees(bpf::KernelRecorder* recorder,
                                               const std::vector<pid_t>& pids);

// Drains the recorder until end_ns (0: no end), SIGINT or SIGTERM, the size cap, or the end of
// every process it follows. Returns what ended it, as session.json says it: "duration",
// "signal", "max_size", "exited". The signals are caught only meanwhile.
std::string RecordUntilWindowEnds(bpf::KernelRecorder* recorder, uint64_t end_ns);

}  // namespace gprof::cli
