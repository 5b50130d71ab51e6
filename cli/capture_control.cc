#include "cli/capture_control.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/run_command.h"
#include "collector/model/model.h"
#include "collector/session/session_files.h"
#include "inject/format/session_format.h"
#include "inject/format/session_json.h"
#include "inject/shared/clock.h"
#include "inject/shared/file_owner.h"

namespace gprof::cli {
namespace {

namespace key = format::session_json;

// What `gprof-run start|stop` waits, at most, for the kernel recorder to follow.
constexpr uint64_t kKernelWaitNs = 1'000'000'000;
constexpr off_t kMaxSessionJsonBytes = 16 << 20;

const char* SwitchName(uint32_t cause, bool open) {
  switch (static_cast<CaptureSwitch>(cause)) {
    case CaptureSwitch::kProfilerApi:
      return open ? "cudaProfilerStart" : "cudaProfilerStop";
    case CaptureSwitch::kCommand:
      return open ? "gprof-run start" : "gprof-run stop";
    case CaptureSwitch::kSessionEnd:
      return "the command's end";
    case CaptureSwitch::kNvtxRange:
      return open ? "the NVTX range's start" : "the NVTX range's end";
    case CaptureSwitch::kFlightStart:
      return "the flight recorder's start";
    case CaptureSwitch::kFreezeTrigger:
      return "the freeze trigger";
    case CaptureSwitch::kHangTrigger:
      return "the hang trigger";
    case CaptureSwitch::kNone:
      break;
  }
  return "";
}

// The control handle session.json names, read through the directory's descriptor.
Expected<std::string> ControlHandleOf(int dir_fd, const std::string& shown) {
  int fd = openat(dir_fd, "session.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::Error(StatusCode::kNotFound, shown + " has no session.json");
  struct stat info {};
  std::string text;
  if (fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size <= kMaxSessionJsonBytes) {
    text.resize(static_cast<size_t>(info.st_size));
    ssize_t got = pread(fd, text.data(), text.size(), 0);
    text.resize(got > 0 ? static_cast<size_t>(got) : 0);
  }
  close(fd);
  nlohmann::json meta = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* capture = nullptr;
  if (meta.is_object() && meta.contains(key::kCapture) && meta[key::kCapture].is_object())
    capture = &meta[key::kCapture];
  if (capture == nullptr || !capture->contains(key::kCaptureControl) ||
      !(*capture)[key::kCaptureControl].is_string()) {
    return Status::Error(StatusCode::kInvalid,
                         shown + " is not a session run with --capture-range");
  }
  return (*capture)[key::kCaptureControl].get<std::string>();
}

}  // namespace

Expected<CaptureRange> ParseCaptureRange(const std::string& text) {
  if (text == "cudaProfilerApi") return CaptureRange::kCudaProfilerApi;
  if (text == "manual") return CaptureRange::kManual;
  if (text.starts_with("nvtx:")) {
    const std::string name = text.substr(5);
    // As the injected library compares it: the recorded message, ASCII, at most its length.
    if (name.empty() || name.size() > format::kNvtxMaxText ||
        !std::all_of(name.begin(), name.end(),
                     [](char c) { return c >= 0x20 && c < 0x7f && c != '?'; })) {
      return Status::Error(StatusCode::kInvalid,
                           "--capture-range=nvtx:NAME: NAME must be 1 to " +
                               std::to_string(format::kNvtxMaxText) +
                               " printable ASCII characters (the range's message)");
    }
    return CaptureRange::kNvtx;
  }
  return Status::Error(StatusCode::kInvalid, "--capture-range " + text +
                                                 ": expected cudaProfilerApi, manual or nvtx:NAME");
}

const char* CaptureRangeName(CaptureRange range) {
  switch (range) {
    case CaptureRange::kCudaProfilerApi:
      return "cudaProfilerApi";
    case CaptureRange::kManual:
      return "manual";
    case CaptureRange::kNvtx:
      return "nvtx";
    case CaptureRange::kFlight:
      return "flight";
    case CaptureRange::kNone:
      break;
  }
  return "";
}

void KernelWindowFollower::Start(SessionControl* control, bpf::KernelRecorder* recorder,
                                 CaptureRange range) {
  CaptureWindowsState* state = control->capture();
  if (state == nullptr) return;
  state->mode.store(static_cast<uint32_t>(range), std::memory_order_release);
  control_ = control;
  recorder_ = recorder;
  if (recorder_ != nullptr) state->kernel_follows.store(1, std::memory_order_release);
  Follow();
}

void KernelWindowFollower::Follow() {
  if (control_ == nullptr) return;
  CaptureWindowsState* state = control_->capture();
  uint64_t transitions = state->transitions.load(std::memory_order_acquire);
  if (transitions == applied_) return;
  CaptureWindow latest{};
  if (!LatestCaptureWindow(state, &latest)) {
    if (recorder_ != nullptr) recorder_->SetWindow(1, 1);  // empty: no window yet
  } else {
    bool open = transitions % 2 == 1;
    if (latest.start_ns == 0) return;  // the opener has yet to store its time: the next pass
    // A close not yet timed waits for this: the kernel recorder stops now, before its end.
    uint64_t end = open ? 0
                        : std::max(latest.end_ns != 0 ? latest.end_ns : MonotonicNs(),
                                   latest.start_ns + 1);  // never 0: no end
    if (recorder_ != nullptr) recorder_->SetWindow(latest.start_ns, end);
  }
  applied_ = transitions;
  state->kernel_applied.store(transitions, std::memory_order_release);
}

void KernelWindowFollower::KernelStopped() {
  if (control_ == nullptr) return;
  control_->capture()->kernel_follows.store(0, std::memory_order_release);
  recorder_ = nullptr;
}

void EndCapture(SessionControl* control, RunDescription* run) {
  CaptureWindowsState* state = control->capture();
  if (state == nullptr || state->mode.load(std::memory_order_acquire) == 0) return;
  uint64_t transitions = 0;
  CloseCaptureWindow(state, 0, CaptureSwitch::kSessionEnd, /*kernel_wait_ns=*/0, &transitions);
  run->capture_windows.clear();
  ForEachCaptureWindow(state, [&](const CaptureWindow& window) {
    RunDescription::CaptureWindow& kept = run->capture_windows.emplace_back();
    kept.start_ns = window.start_ns;
    kept.end_ns = window.end_ns;
    kept.opened_by = SwitchName(window.open_cause, true);
    kept.closed_by = SwitchName(window.close_cause, false);
    kept.open_pid = window.opened_by_pid;
    kept.close_pid = window.closed_by_pid;
  });
  run->capture_refused_opens = state->refused_opens.load(std::memory_order_acquire);
}

int CaptureSwitchCommand(const std::string& directory, bool start) {
  const std::string shown = collector::PrintableName(directory);
  auto dir = collector::OpenSessionDirectory(directory);
  if (!dir.ok()) {
    Say(dir.status().message());
    return kExitToolFailure;
  }
  // As root, only as the directory's owner: the control is theirs (0600), so a session.json they
  // wrote can name nothing of anyone else's.
  if (geteuid() == 0) {
    if (Status owned = ReportAsOwner(dir->get(), directory); !owned.ok()) {
      Say(owned.message());
      return kExitToolFailure;
    }
  }
  auto handle = ControlHandleOf(dir->get(), shown);
  if (!handle.ok()) {
    Say(handle.status().message());
    return kExitToolFailure;
  }
  SessionControl control;
  if (int rc = control.Attach(handle->c_str()); rc != 0) {
    Say(shown + ": its session is not running, or is not yours (" + strerror(rc) + ")");
    return kExitToolFailure;
  }
  CaptureWindowsState* state = control.capture();
  if (control.closing() || state->mode.load(std::memory_order_acquire) == 0) {
    Say(shown + ": its command has ended");
    return kExitToolFailure;
  }
  uint64_t transitions = 0;
  bool changed =
      start ? OpenCaptureWindow(state, 0, CaptureSwitch::kCommand, kKernelWaitNs, &transitions)
            : CloseCaptureWindow(state, 0, CaptureSwitch::kCommand, kKernelWaitNs, &transitions);
  uint64_t window = (transitions + 1) / 2;
  if (!changed) {
    if (start && state->mode.load(std::memory_order_acquire) ==
                     static_cast<uint32_t>(CaptureRange::kFlight)) {
      Say(shown + ": a flight recording, once stopped, is not started again");
      return kExitToolFailure;
    }
    if (start && transitions % 2 == 0) {
      Say(shown + ": no room for another window (" + std::to_string(CaptureWindowsState::kWindows) +
          " at most)");
      return kExitToolFailure;
    }
    printf("%s: already %s (window %llu)\n", shown.c_str(), start ? "recording" : "stopped",
           static_cast<unsigned long long>(window));
    return 0;
  }
  printf("%s: window %llu %s\n", shown.c_str(), static_cast<unsigned long long>(window),
         start ? "opened: recording" : "closed: not recording");
  return 0;
}

}  // namespace gprof::cli
