#include "cli/flight_recorder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "inject/shared/capture_windows.h"
#include "inject/shared/clock.h"

namespace gprof::cli {
namespace {

// What the recorders still record after what froze ran again (the threads the freeze released),
// so that it is in the report too.
constexpr uint64_t kTailNs = 1'000'000'000;
// A freeze that lasts is not waited for past half the seconds kept (and at least the tail): the
// span held then still holds as much before the trigger as after it.
uint64_t TailBoundNs(uint64_t keep_ns) { return std::max(kTailNs, keep_ns / 2); }
// How often kernel.gpr's old data is punched out (the injected library's writers do the same).
constexpr uint64_t kTrimIntervalNs = 1'000'000'000;

std::optional<uint64_t> PositiveNs(const std::string& number, double unit_ns) {
  char* end = nullptr;
  double value = strtod(number.c_str(), &end);
  if (end == number.c_str() || *end != '\0' || !std::isfinite(value) || value <= 0 ||
      value * unit_ns > 1e18) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(value * unit_ns);
}

const char* EndedBy(uint32_t cause) {
  switch (static_cast<CaptureSwitch>(cause)) {
    case CaptureSwitch::kFreezeTrigger:
      return "freeze";
    case CaptureSwitch::kHangTrigger:
      return "hang";
    case CaptureSwitch::kCommand:
      return "stop";
    default:
      return "end";
  }
}

const char* FreezeKindWord(uint32_t kind) {
  switch (static_cast<FreezeKind>(kind)) {
    case FreezeKind::kCallRunning:
      return "running";
    case FreezeKind::kThreadsBlocked:
      return "threads";
    default:
      return "call";
  }
}

}  // namespace

Status ParseFlightTrigger(const std::string& text, RunOptions* options) {
  if (text.starts_with("freeze:")) {
    if (auto ns = PositiveNs(text.substr(7), 1e6)) {
      options->freeze_trigger_ns = *ns;
      return {};
    }
  } else if (text.starts_with("hang:")) {
    if (auto ns = PositiveNs(text.substr(5), 1e9)) {
      options->hang_trigger_ns = *ns;
      return {};
    }
  }
  return Status::Error(StatusCode::kInvalid,
                       "--trigger " + text +
                           ": expected freeze:MS (a CUDA call running MS milliseconds, or threads "
                           "doing CUDA work blocked together that long) or hang:SEC (no CUDA call "
                           "finished for SEC seconds)");
}

void FlightRecorder::Start(SessionControl* control, const RunOptions& options) {
  CaptureWindowsState* state = control->capture();
  if (state == nullptr) return;
  state->flight.keep_ns = static_cast<uint64_t>(options.flight_recorder_s * 1e9);
  state->flight.freeze_ns = options.freeze_trigger_ns;
  hang_ns_ = options.hang_trigger_ns;
  control_ = control;
  uint64_t transitions = 0;
  // gprof-run follows the windows itself, right after (KernelWindowFollower): no wait.
  OpenCaptureWindow(state, 0, CaptureSwitch::kFlightStart, 0, &transitions);
}

void FlightRecorder::Tick(bpf::KernelRecorder* recorder, uint64_t now_ns) {
  if (control_ == nullptr) return;
  CaptureWindowsState* state = control_->capture();
  bool open = state->transitions.load(std::memory_order_acquire) % 2 == 1;
  if (open && hang_ns_ != 0 && state->flight.fired.load(std::memory_order_acquire) == 0) {
    // The writers count every call that finishes (a process that ends takes its count along,
    // which changes the sum too: that is not silence either).
    uint64_t calls = 0;
    control_->ForEachWriterCalls(
        [&](uint32_t, uint64_t, uint64_t submitted, uint64_t) { calls += submitted; });
    if (calls != calls_seen_ || calls_changed_ns_ == 0) {
      calls_seen_ = calls;
      calls_changed_ns_ = now_ns;
    } else if (calls > 0 && now_ns - calls_changed_ns_ >= hang_ns_) {
      FlightTrigger trigger;
      trigger.cause = CaptureSwitch::kHangTrigger;
      trigger.at_ns = now_ns;
      trigger.duration_ns = now_ns - calls_changed_ns_;
      FireFlightTrigger(state, trigger);
    }
  }
  uint32_t fired = state->flight.fired.load(std::memory_order_acquire);
  uint64_t fired_ns = state->flight.fired_ns.load(std::memory_order_acquire);
  if (open && fired == static_cast<uint32_t>(CaptureSwitch::kHangTrigger) &&
      state->flight.released_ns.load(std::memory_order_relaxed) == 0) {
    // A call finished again: the hang is over.
    uint64_t calls = 0;
    control_->ForEachWriterCalls(
        [&](uint32_t, uint64_t, uint64_t submitted, uint64_t) { calls += submitted; });
    if (calls != calls_seen_) state->flight.released_ns.store(now_ns, std::memory_order_relaxed);
  }
  uint64_t released_ns = state->flight.released_ns.load(std::memory_order_relaxed);
  bool tail_over = fired_ns != 0 && (now_ns >= fired_ns + TailBoundNs(state->flight.keep_ns) ||
                                     (released_ns != 0 && now_ns >= released_ns + kTailNs));
  if (open && fired != 0 && tail_over) {
    uint64_t transitions = 0;
    CloseCaptureWindow(state, 0, static_cast<CaptureSwitch>(fired), 0, &transitions);
  }
  if (recorder != nullptr && now_ns - last_trim_ns_ >= kTrimIntervalNs) {
    recorder->TrimBefore(FlightTrimBefore(state, now_ns));
    last_trim_ns_ = now_ns;
  }
}

void FlightRecorder::TrimKernelRecord(bpf::KernelRecorder* recorder) const {
  if (control_ != nullptr)
    recorder->TrimBefore(FlightTrimBefore(control_->capture(), MonotonicNs()));
}

void FlightRecorder::Describe(RunDescription* run) const {
  if (control_ == nullptr) return;
  const CaptureWindowsState* state = control_->capture();
  collector::FlightRecording& flight = run->flight.emplace();
  flight.keep_ns = state->flight.keep_ns;
  flight.freeze_ns = state->flight.freeze_ns;
  flight.hang_ns = hang_ns_;
  uint32_t fired = state->flight.fired.load(std::memory_order_acquire);
  uint64_t fired_ns = state->flight.fired_ns.load(std::memory_order_acquire);
  if (fired != 0 && fired_ns != 0) {
    flight.ended_by = EndedBy(fired);
    flight.fired_monotonic_ns = fired_ns;
    flight.duration_ns = state->flight.duration_ns;
    flight.pid = state->flight.pid;
    flight.tid = state->flight.tid;
    flight.api_id = state->flight.api_id;
    flight.freeze_kind = FreezeKindWord(state->flight.freeze_kind);
    flight.threads = state->flight.threads;
  } else {
    CaptureWindow window{};
    flight.ended_by =
        LatestCaptureWindow(state, &window) ? EndedBy(window.close_cause) : EndedBy(0);
  }
}

}  // namespace gprof::cli
