// `gprof-run [options] -- CMD [ARGS...]`: record CMD and everything it starts, then explain it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inject/shared/status.h"

namespace gprof::cli {

struct RunOptions {
  std::vector<std::string> command;
  std::string output_dir;  // empty: a new gprof-<cmd>-<date-time> here
  double threshold_ms = 1.0;
  bool kernel_recording = true;
  bool print_report = true;
  bool run_as_root = false;        // under sudo, keep the command as root
  std::string inject_library;      // empty: next to the gprof-run executable
  std::string cuda_mode = "auto";  // auto | cupti | preload | off
  std::string cupti_library;       // empty: found in the target (inject/cupti_library.h)
  uint32_t ring_buffer_mb = 0;     // kernel recorder's ring buffer; 0: 2 MiB per CPU, >= 16 MiB
  std::string device_prefix = "nvidia";  // device files whose system calls are device waits
  uint32_t count_under_us = 20;          // --count-under: shorter waits only counted; 0: none
  double delay_s = 0;                    // --delay: recording starts this long after the start
  double duration_s = 0;                 // --duration: and lasts this long; 0: to the end
  uint64_t max_size_bytes = 0;           // --max-size: cap on the recording files; 0: none
  uint32_t capture_range = 0;            // --capture-range: a CaptureRange; 0: none
  std::string capture_nvtx_name;         // --capture-range=nvtx:NAME's NAME
  bool capture_repeat = false;           // --capture-range-end=repeat: every such range
  double flight_recorder_s = 0;          // --flight-recorder: seconds kept; 0: none
  uint64_t freeze_trigger_ns = 0;        // --trigger freeze:MS; 0: none
  uint64_t hang_trigger_ns = 0;          // --trigger hang:SEC; 0: none
  uint64_t collector_memory_bytes = 0;   // --collector-memory; 0: the collector's default
  bool python_stacks = true;             // --python-stacks=on|off
  uint32_t sample_hz = 99;               // --sample-hz; 0: no on-CPU samples
  std::vector<std::string> attach_pids;  // -p: record these running processes, no command
};

// Returns the status gprof-run exits with: the command's, or one of exit_codes.h.
int RunCommand(const RunOptions& options);

// `gprof-run -p PID[,PID...] [--duration SEC]`: records running processes and their descendants
// (kernel recorder, Python stacks, CUDA calls through uprobes) until SEC elapses, SIGINT or
// SIGTERM, or they have all exited, then reports as on a launched command. They run on, untouched.
// Returns 0, or kExitToolFailure with one line on stderr.
int AttachCommand(const RunOptions& options);

// One line on stderr, "gprof-run: ...", escaped as the report escapes names.
void Say(const std::string& line);

// `report` (and `merge`) run as root on a directory that is not root's run as its owner, for good;
// a directory of root's that others can change is refused.
Status ReportAsOwner(int dir_fd, const std::string& directory);

// `gprof-run report DIR`: runs the collector again on a saved session and prints the report.
int ReportCommand(const std::string& directory, double threshold_ms,
                  uint64_t collector_memory_bytes);

}  // namespace gprof::cli
