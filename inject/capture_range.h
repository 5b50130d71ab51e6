// --capture-range in one process: the session's capture windows (inject/shared/capture_windows.h)
// as this process reads and switches them. gprof-run names the range in kCaptureRangeEnv; the
// windows live in the session's control, so that one process's cudaProfilerStart opens the
// window for every process of the session and for the kernel recorder.
#pragma once

#include <cstddef>

#include "inject/format/session_format.h"
#include "inject/shared/capture_windows.h"

namespace gprof::inject {

// Environment of the target: the CaptureRange as a number; unset or 0: no capture range.
inline constexpr char kCaptureRangeEnv[] = "GPROF_CAPTURE_RANGE";
// With --capture-range=nvtx:NAME: NAME, the message of the ranges that open windows.
inline constexpr char kCaptureNvtxEnv[] = "GPROF_CAPTURE_NVTX";
// "repeat": every such range opens a window; unset or "stop": only the session's first one.
inline constexpr char kCaptureEndEnv[] = "GPROF_CAPTURE_END";

// At activation: attaches the windows of the control `control_handle` names (nullptr: none)
// when the environment sets a range. A control that cannot be attached leaves windows of this
// process's own (its cudaProfilerStart/Stop still switch them; the kernel recorder does not).
void AttachCaptureRange(const char* control_handle);
// The windows, or nullptr without a capture range.
const CaptureWindowsState* CaptureWindows();
// True when a capture range is set and no window is open: a call entering now is outside, and
// is neither timed nor recorded (one load; a window opening meanwhile does not hold it).
bool CaptureClosedNow();

// cudaProfilerStart/Stop and cuProfilerStart/Stop, seen by the interposer or CUPTI: a start
// opens a window before the call is timed, a stop closes it after; each then waits (a bounded
// time) for the kernel recorder to apply it. Nothing without --capture-range=cudaProfilerApi.
void OnProfilerStart();
void OnProfilerStop();

// --capture-range=nvtx:NAME: whether the NVTX message `text` (`length` bytes, as recorded: ASCII,
// other characters '?') is NAME. False without that range.
bool IsNvtxCaptureName(const char* text, size_t length);
// A range named NAME was pushed or started: opens a window (only the session's first, unless
// --capture-range-end=repeat). Closed when that range is: OnNvtxCaptureRangeClosed.
void OnNvtxCaptureRangeOpened();
void OnNvtxCaptureRangeClosed();

// --flight-recorder --trigger freeze:MS: a recorded call that took MS or longer fires the trigger
// (the first one only; gprof-run then ends the recording a short tail later). One load and a
// compare otherwise.
void OnFlightCall(const format::ApiCallRecord& call);
// --flight-recorder --trigger freeze:MS, when set: calls are watched while they run, and threads
// while they are blocked (freeze_watch.h); after it fired, until what froze runs again.
uint64_t FreezeTriggerNs();  // MS in ns; 0: none
// The writer thread's freeze watch: fires the freeze trigger (false when one fired already), and
// says when what froze ran again.
bool FireFreezeTrigger(const FlightTrigger& trigger);
void NoteFreezeReleased(uint64_t ns);

}  // namespace gprof::inject
