// --flight-recorder SEC (issue 39 item 6): every recorder records from the start, in one capture
// window (inject/shared/capture_windows.h), and punches its data older than SEC out of its file,
// keeping its state (names, maps, stacks); the files hold the last SEC seconds. A trigger
// (--trigger freeze:MS: a CUDA call took MS or longer; --trigger hang:SEC: no CUDA call finished
// for SEC) ends the window for good a short tail later, as `gprof-run stop DIR` and the command's
// end do at once: the recording stops, the command runs on untouched, and the report explains the
// seconds held.
#pragma once

#include <cstdint>
#include <string>

#include "bpf/kernel_recorder.h"
#include "cli/run_command.h"
#include "cli/session_directory.h"
#include "inject/shared/session_control.h"
#include "inject/shared/status.h"

namespace gprof::cli {

// "freeze:MS" or "hang:SEC" into `options`; an error that says what is accepted otherwise.
Status ParseFlightTrigger(const std::string& text, RunOptions* options);

class FlightRecorder {
 public:
  // Before the command starts, once the capture range is the flight recorder's: sets what the
  // recorders trim and fire on, and opens the window.
  void Start(SessionControl* control, const RunOptions& options);
  bool active() const { return control_ != nullptr; }
  // In gprof-run's loop: the hang trigger, the close a tail after a trigger, and kernel.gpr's
  // trimming (`recorder` nullptr: none running).
  void Tick(bpf::KernelRecorder* recorder, uint64_t now_ns);
  // At the command's end, after EndCapture: kernel.gpr trimmed to the window's end.
  void TrimKernelRecord(bpf::KernelRecorder* recorder) const;
  // At the command's end, after EndCapture: what the recording held and what ended it.
  void Describe(RunDescription* run) const;

 private:
  SessionControl* control_ = nullptr;
  uint64_t hang_ns_ = 0;
  uint64_t calls_seen_ = 0;
  uint64_t calls_changed_ns_ = 0;
  uint64_t last_trim_ns_ = 0;
};

}  // namespace gprof::cli
