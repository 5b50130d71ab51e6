// The capture windows of --capture-range: the program (cudaProfilerStart/Stop) or the user
// (gprof-run start/stop) opens and closes them, in the session's control (session_control.h),
// and every recorder keeps what starts inside one: the injected library's CUDA calls and GPU
// records exactly, gprof-run's kernel recorder once it has applied the change (the program's
// cudaProfilerStart/Stop wait for that, a bounded time). Lock-free: an open or a close is one
// compare-and-swap of `transitions` and a store of the time; a reader that finds a window's time
// not yet stored treats it as open (a close) or not yet open (an open).
#pragma once

#include <cstdint>

#include "inject/format/shared_memory.h"

namespace gprof {

enum class CaptureRange : uint32_t {
  kNone = 0,             // everything is recorded
  kCudaProfilerApi = 1,  // between cudaProfilerStart/cuProfilerStart and ...Stop
  kManual = 2,           // between `gprof-run start DIR` and `gprof-run stop DIR`
  kNvtx = 3,             // while an NVTX range of the name --capture-range=nvtx:NAME gives is open
  kFlight = 4,           // --flight-recorder: one window from the start to a trigger or the end
};

// What opened or closed a window (append only: written in session.json as a number too).
enum class CaptureSwitch : uint32_t {
  kNone = 0,
  kProfilerApi = 1,    // cudaProfilerStart/Stop, cuProfilerStart/Stop
  kCommand = 2,        // gprof-run start/stop DIR
  kSessionEnd = 3,     // the command ended with a window open
  kNvtxRange = 4,      // the NVTX range --capture-range=nvtx:NAME names was opened / closed
  kFlightStart = 5,    // --flight-recorder: the window opened before the command started
  kFreezeTrigger = 6,  // --trigger freeze:MS: a CUDA call took MS or longer
  kHangTrigger = 7,    // --trigger hang:SEC: no CUDA call finished for SEC
};

// Opens a window now; false when one is open already or none is left (then counted). The
// kernel recorder starts at the window's start once it has seen it: what happens before that is
// missing from kernel.gpr, never outside the window. Waits up to `kernel_wait_ns` for it.
// `*transitions`: the count after the open (the window's number is (transitions + 1) / 2).
bool OpenCaptureWindow(CaptureWindowsState* state, uint32_t pid, CaptureSwitch cause,
                       uint64_t kernel_wait_ns, uint64_t* transitions);
// Closes the open window; false when none is open. In two steps, so that the kernel recorder
// stops before the window's end: the close is marked, the kernel recorder stops at its own time
// and says so (up to `kernel_wait_ns` waited for), and only then is the end stored, later than
// that. Meanwhile readers take the window for open.
bool CloseCaptureWindow(CaptureWindowsState* state, uint32_t pid, CaptureSwitch cause,
                        uint64_t kernel_wait_ns, uint64_t* transitions);
// True when what starts at `ns` is to be recorded: no capture range, or inside a window.
bool CaptureAdmits(const CaptureWindowsState* state, uint64_t ns);

// What --trigger freeze:MS saw (append only: written in session.json as a word).
enum class FreezeKind : uint32_t {
  kCallReturned = 0,    // a CUDA call that took MS or longer returned
  kCallRunning = 1,     // a CUDA call was still running MS after it began
  kThreadsBlocked = 2,  // threads doing CUDA work were all blocked for MS (freeze_watch.h)
};
// What fired a trigger: `pid`, `tid`, `api_id` name it, 0 where nothing does.
struct FlightTrigger {
  CaptureSwitch cause = CaptureSwitch::kNone;
  FreezeKind kind = FreezeKind::kCallReturned;
  uint32_t pid = 0, tid = 0, api_id = 0;
  uint32_t threads = 0;  // kThreadsBlocked: how many
  uint64_t at_ns = 0, duration_ns = 0;
  uint64_t released_ns = 0;  // what froze runs again from then; 0: not yet
};
// --flight-recorder: notes the first trigger (later ones change nothing); false when one fired
// already.
bool FireFlightTrigger(CaptureWindowsState* state, const FlightTrigger& trigger);
// --flight-recorder: each recorder trims the data it wrote before this time (0: nothing to trim):
// the window's end, or now while it is open, less the seconds kept.
uint64_t FlightTrimBefore(const CaptureWindowsState* state, uint64_t now_ns);

// A window as read: end_ns 0 while still open.
struct CaptureWindow {
  uint64_t start_ns, end_ns;
  uint32_t opened_by_pid, open_cause, closed_by_pid, close_cause;
};
// The window last opened (valid when returning true).
bool LatestCaptureWindow(const CaptureWindowsState* state, CaptureWindow* window);
// Calls `f(window)` for each window opened, in order.
template <typename F>
void ForEachCaptureWindow(const CaptureWindowsState* state, F f) {
  uint64_t opened = (state->transitions.load(std::memory_order_acquire) + 1) / 2;
  for (uint64_t i = 0; i < opened && i < CaptureWindowsState::kWindows; ++i) {
    const auto& w = state->windows[i];
    f(CaptureWindow{w.start_ns.load(std::memory_order_acquire),
                    w.end_ns.load(std::memory_order_acquire), w.opened_by_pid, w.open_cause,
                    w.closed_by_pid, w.close_cause});
  }
}

}  // namespace gprof
