#include "inject/shared/capture_windows.h"

#include <sched.h>

#include "inject/shared/clock.h"

namespace gprof {

namespace {

// Waits (yielding, up to `timeout_ns`) until the kernel recorder has applied `transitions`.
void WaitForKernelRecorder(const CaptureWindowsState* state, uint64_t transitions,
                           uint64_t timeout_ns) {
  if (timeout_ns == 0 || state->kernel_follows.load(std::memory_order_acquire) == 0) return;
  uint64_t deadline = MonotonicNs() + timeout_ns;
  // Yielding, not sleeping: a sleep here would itself be an off-CPU interval at a window's edge.
  while (state->kernel_applied.load(std::memory_order_acquire) < transitions &&
         MonotonicNs() < deadline) {
    sched_yield();
  }
}

}  // namespace

bool OpenCaptureWindow(CaptureWindowsState* state, uint32_t pid, CaptureSwitch cause,
                       uint64_t kernel_wait_ns, uint64_t* transitions) {
  uint64_t seen = state->transitions.load(std::memory_order_acquire);
  do {
    *transitions = seen;
    if (seen % 2 == 1) return false;  // open already: a second start changes nothing
    // A flight recording, once stopped, stays stopped: what it holds is the time before that.
    if (seen > 0 && state->mode.load(std::memory_order_relaxed) ==
                        static_cast<uint32_t>(CaptureRange::kFlight)) {
      return false;
    }
    if (seen / 2 >= CaptureWindowsState::kWindows) {
      state->refused_opens.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!state->transitions.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel));
  auto& window = state->windows[seen / 2];
  window.opened_by_pid = pid;
  window.open_cause = static_cast<uint32_t>(cause);
  window.end_ns.store(0, std::memory_order_relaxed);
  window.start_ns.store(MonotonicNs(), std::memory_order_release);
  *transitions = seen + 1;
  WaitForKernelRecorder(state, *transitions, kernel_wait_ns);
  return true;
}

bool CloseCaptureWindow(CaptureWindowsState* state, uint32_t pid, CaptureSwitch cause,
                        uint64_t kernel_wait_ns, uint64_t* transitions) {
  uint64_t seen = state->transitions.load(std::memory_order_acquire);
  do {
    *transitions = seen;
    if (seen % 2 == 0) return false;
  } while (!state->transitions.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel));
  auto& window = state->windows[seen / 2];
  window.closed_by_pid = pid;
  window.close_cause = static_cast<uint32_t>(cause);
  *transitions = seen + 1;
  WaitForKernelRecorder(state, *transitions, kernel_wait_ns);
  window.end_ns.store(MonotonicNs(), std::memory_order_release);
  return true;
}

bool CaptureAdmits(const CaptureWindowsState* state, uint64_t ns) {
  if (state->mode.load(std::memory_order_relaxed) == 0) return true;
  uint64_t opened = (state->transitions.load(std::memory_order_acquire) + 1) / 2;
  if (opened > CaptureWindowsState::kWindows) opened = CaptureWindowsState::kWindows;
  // Newest first: what is recorded now starts in the last window, or after it.
  for (uint64_t i = opened; i-- > 0;) {
    const auto& window = state->windows[i];
    uint64_t start = window.start_ns.load(std::memory_order_acquire);
    if (start == 0 || ns < start) continue;  // being opened, or later than `ns`
    uint64_t end = window.end_ns.load(std::memory_order_acquire);
    return end == 0 || ns < end;
  }
  return false;
}

bool FireFlightTrigger(CaptureWindowsState* state, const FlightTrigger& trigger) {
  auto& flight = state->flight;
  uint32_t none = 0;
  if (!flight.fired.compare_exchange_strong(none, static_cast<uint32_t>(trigger.cause),
                                            std::memory_order_acq_rel)) {
    return false;
  }
  flight.pid = trigger.pid;
  flight.tid = trigger.tid;
  flight.api_id = trigger.api_id;
  flight.duration_ns = trigger.duration_ns;
  flight.freeze_kind = static_cast<uint32_t>(trigger.kind);
  flight.threads = trigger.threads;
  flight.released_ns.store(trigger.released_ns, std::memory_order_relaxed);
  flight.fired_ns.store(trigger.at_ns != 0 ? trigger.at_ns : 1, std::memory_order_release);
  return true;
}

uint64_t FlightTrimBefore(const CaptureWindowsState* state, uint64_t now_ns) {
  if (state->mode.load(std::memory_order_relaxed) != static_cast<uint32_t>(CaptureRange::kFlight))
    return 0;
  uint64_t keep = state->flight.keep_ns;
  CaptureWindow latest{};
  if (keep == 0 || !LatestCaptureWindow(state, &latest) || latest.start_ns == 0) return 0;
  uint64_t end = latest.end_ns != 0 ? latest.end_ns : now_ns;
  return end > keep ? end - keep : 0;
}

bool LatestCaptureWindow(const CaptureWindowsState* state, CaptureWindow* window) {
  bool found = false;
  ForEachCaptureWindow(state, [&](const CaptureWindow& each) {
    *window = each;
    found = true;
  });
  return found;
}

}  // namespace gprof
