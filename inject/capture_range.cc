#include "inject/capture_range.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "inject/shared/session_control.h"

namespace gprof::inject {
namespace {

// Long enough for gprof-run's loop, which applies a change within its 10 ms slice; bounded, so
// that a gprof-run that is gone or busy never holds the program.
constexpr uint64_t kKernelWaitNs = 1'000'000'000;

alignas(SessionControl) unsigned char g_control_storage[sizeof(SessionControl)];
CaptureWindowsState g_own_windows;  // when the session's cannot be attached
CaptureWindowsState* g_windows = nullptr;
// --capture-range=nvtx:NAME's NAME, as the environment gave it (read once at activation).
const char* g_nvtx_name = nullptr;
size_t g_nvtx_name_length = 0;
bool g_nvtx_repeat = false;

bool RangeIs(CaptureRange range) {
  return g_windows != nullptr &&
         g_windows->mode.load(std::memory_order_relaxed) == static_cast<uint32_t>(range);
}

}  // namespace

void AttachCaptureRange(const char* control_handle) {
  const char* range = getenv(kCaptureRangeEnv);
  if (range == nullptr) return;
  uint32_t mode = static_cast<uint32_t>(strtoul(range, nullptr, 10));
  if (mode == 0) return;
  if (mode == static_cast<uint32_t>(CaptureRange::kNvtx)) {
    g_nvtx_name = getenv(kCaptureNvtxEnv);
    g_nvtx_name_length = g_nvtx_name == nullptr ? 0 : strlen(g_nvtx_name);
    const char* end = getenv(kCaptureEndEnv);
    g_nvtx_repeat = end != nullptr && strcmp(end, "repeat") == 0;
  }
  if (control_handle != nullptr && control_handle[0] != '\0') {
    auto* control = new (g_control_storage) SessionControl;
    if (control->Attach(control_handle) == 0) {
      g_windows = control->capture();
      return;
    }
  }
  g_own_windows.mode.store(mode, std::memory_order_relaxed);
  g_windows = &g_own_windows;
  // A flight recording records from the start; without the session's control it has no trigger
  // and keeps all it records (gprof-run cannot tell it to stop).
  if (mode == static_cast<uint32_t>(CaptureRange::kFlight)) {
    uint64_t transitions = 0;
    OpenCaptureWindow(g_windows, static_cast<uint32_t>(getpid()), CaptureSwitch::kFlightStart, 0,
                      &transitions);
  }
}

const CaptureWindowsState* CaptureWindows() { return g_windows; }

bool CaptureClosedNow() {
  return g_windows != nullptr && g_windows->transitions.load(std::memory_order_relaxed) % 2 == 0;
}

void OnProfilerStart() {
  if (g_windows == nullptr || g_windows->mode.load(std::memory_order_relaxed) !=
                                  static_cast<uint32_t>(CaptureRange::kCudaProfilerApi)) {
    return;
  }
  uint64_t transitions = 0;
  OpenCaptureWindow(g_windows, static_cast<uint32_t>(getpid()), CaptureSwitch::kProfilerApi,
                    kKernelWaitNs, &transitions);
}

void OnProfilerStop() {
  if (g_windows == nullptr || g_windows->mode.load(std::memory_order_relaxed) !=
                                  static_cast<uint32_t>(CaptureRange::kCudaProfilerApi)) {
    return;
  }
  uint64_t transitions = 0;
  CloseCaptureWindow(g_windows, static_cast<uint32_t>(getpid()), CaptureSwitch::kProfilerApi,
                     kKernelWaitNs, &transitions);
}

bool IsNvtxCaptureName(const char* text, size_t length) {
  return g_nvtx_name != nullptr && RangeIs(CaptureRange::kNvtx) &&
         length == g_nvtx_name_length && memcmp(text, g_nvtx_name, length) == 0;
}

void OnNvtxCaptureRangeOpened() {
  if (!RangeIs(CaptureRange::kNvtx)) return;
  // Only the first window of the session, unless every such range was asked for.
  if (!g_nvtx_repeat && g_windows->transitions.load(std::memory_order_acquire) != 0) return;
  uint64_t transitions = 0;
  OpenCaptureWindow(g_windows, static_cast<uint32_t>(getpid()), CaptureSwitch::kNvtxRange,
                    kKernelWaitNs, &transitions);
}

void OnNvtxCaptureRangeClosed() {
  if (!RangeIs(CaptureRange::kNvtx)) return;
  uint64_t transitions = 0;
  CloseCaptureWindow(g_windows, static_cast<uint32_t>(getpid()), CaptureSwitch::kNvtxRange,
                     kKernelWaitNs, &transitions);
}

uint64_t FreezeTriggerNs() { return g_windows != nullptr ? g_windows->flight.freeze_ns : 0; }

bool FireFreezeTrigger(const FlightTrigger& trigger) {
  return g_windows != nullptr && FireFlightTrigger(g_windows, trigger);
}

void NoteFreezeReleased(uint64_t ns) {
  if (g_windows == nullptr) return;
  uint64_t none = 0;
  g_windows->flight.released_ns.compare_exchange_strong(none, ns, std::memory_order_relaxed);
}

void OnFlightCall(const format::ApiCallRecord& call) {
  if (g_windows == nullptr) return;
  uint64_t freeze_ns = g_windows->flight.freeze_ns;
  if (freeze_ns == 0 || call.exit_ns - call.enter_ns < freeze_ns ||
      g_windows->flight.fired.load(std::memory_order_relaxed) != 0) {
    return;
  }
  FlightTrigger trigger;
  trigger.cause = CaptureSwitch::kFreezeTrigger;
  trigger.kind = FreezeKind::kCallReturned;
  trigger.pid = static_cast<uint32_t>(getpid());
  trigger.tid = call.tid;
  trigger.api_id = call.api_id;
  trigger.at_ns = call.exit_ns;
  trigger.duration_ns = call.exit_ns - call.enter_ns;
  trigger.released_ns = call.exit_ns;
  FireFlightTrigger(g_windows, trigger);
}

}  // namespace gprof::inject
