// --capture-range in gprof-run (inject/shared/capture_windows.h): the windows the program or the
// user opens, followed by the kernel recorder, written into session.json at the end; and
// `gprof-run start|stop DIR`, which open and close them from outside while the command runs.
#pragma once

#include <cstdint>
#include <string>

#include "bpf/kernel_recorder.h"
#include "cli/session_directory.h"
#include "inject/shared/capture_windows.h"
#include "inject/shared/session_control.h"
#include "inject/shared/status.h"

namespace gprof::cli {

// "cudaProfilerApi", "manual"; anything else is an error that says what is accepted.
Expected<CaptureRange> ParseCaptureRange(const std::string& text);
const char* CaptureRangeName(CaptureRange range);

// Keeps the kernel recorder's window (kernel_events.bpf.c) on the session's latest capture
// window, and tells the writers how far it has (their cudaProfilerStart/Stop wait for it).
class KernelWindowFollower {
 public:
  // Before the command starts: nothing is recorded until a window opens.
  void Start(SessionControl* control, bpf::KernelRecorder* recorder, CaptureRange range);
  // In gprof-run's loop: applies a change of the windows, once each.
  void Follow();
  bool following() const { return control_ != nullptr; }
  // The kernel recorder has stopped (--max-size): the writers wait for it no more.
  void KernelStopped();

 private:
  SessionControl* control_ = nullptr;
  bpf::KernelRecorder* recorder_ = nullptr;
  uint64_t applied_ = UINT64_MAX;
};

// At the command's end: closes a window still open and copies the windows into `run`.
void EndCapture(SessionControl* control, RunDescription* run);

// `gprof-run start DIR` (start true) and `gprof-run stop DIR`. Returns gprof-run's exit status.
int CaptureSwitchCommand(const std::string& directory, bool start);

}  // namespace gprof::cli
