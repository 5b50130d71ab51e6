#include "collector/writers/words/sentences.h"

#include <algorithm>
#include <cstdio>

#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"

namespace gprof::collector {

std::string WaitWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                      const LockUsers* users) {
  switch (object.kind) {
    case WaitKind::kFutex:
      switch (wait_class) {
        case WaitClass::kUserLock: {
          std::string words = ObjectWords(session, object, users);
          return (words.starts_with("a lock ") ? "waiting for " : "waiting for lock ") + words;
        }
        case WaitClass::kPythonGil:
          return "waiting for the GIL (" + ObjectWords(session, object, users) + ")";
        case WaitClass::kCondition:
          return "waiting on " + ObjectWords(session, object, users);
        default:
          return "waiting on " + ObjectWords(session, object, users);
      }
    case WaitKind::kKernelLock:
      return "waiting for " + ObjectWords(session, object, users);
    case WaitKind::kDevice:
    case WaitKind::kPageFault:
      return "in " + ObjectWords(session, object, users);
    case WaitKind::kKernelFunction:
      if (std::string words = ReasonInWords(object.kernel_function); !words.empty()) return words;
      if (object.kernel_function.empty()) return "asleep";
      return "asleep in the kernel's " + object.kernel_function;
  }
  return "asleep";
}

std::string SleptWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                       uint64_t asleep_ns, const LockUsers* users) {
  std::string words = WaitWords(session, object, wait_class, users);
  std::string text = "asleep " + FormatDuration(asleep_ns);
  if (words == "asleep") return text;
  if (words.starts_with("asleep ")) return text + words.substr(6);
  return text + " " + words;
}

namespace {

// "5", "0.25": a number of seconds as the user would have typed it.
std::string Seconds(double seconds) {
  char text[32];
  snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace

std::string WindowText(const Session& session) {
  const SessionMeta& meta = session.meta;
  if (!meta.window) return {};
  const SessionMeta::Window& window = *meta.window;
  std::string options = window.delay_s > 0 ? "--delay " + Seconds(window.delay_s) : "";
  if (window.duration_s > 0) {
    options += (options.empty() ? "--duration " : " --duration ") + Seconds(window.duration_s);
  }
  uint64_t run_end = meta.end_monotonic_ns;
  if (run_end != 0 && run_end <= window.start_monotonic_ns) {
    return "recorded nothing: the command ended at " + FormatOffset(session, run_end) +
           ", before the window (" + options + ")";
  }
  uint64_t end = window.end_monotonic_ns;
  if (run_end != 0 && (end == 0 || run_end < end)) end = run_end;
  if (end == 0) {
    return "recorded from " + FormatOffset(session, window.start_monotonic_ns) + " (" + options +
           "): what started before was not recorded";
  }
  std::string text = "recorded " + FormatOffset(session, window.start_monotonic_ns) + " to " +
                     FormatOffset(session, end) + ", " +
                     FormatDuration(end - window.start_monotonic_ns);
  if (run_end > meta.start_monotonic_ns && meta.start_monotonic_ns != 0) {
    text += " of " + FormatDuration(run_end - meta.start_monotonic_ns);
  }
  return text + " (" + options + "): what started outside was not recorded";
}

namespace {

// The end of a window as the report shows it: the command's end for one left open.
uint64_t CaptureEnd(const Session& session, const CaptureWindow& window) {
  return window.end_monotonic_ns != 0 ? window.end_monotonic_ns : session.meta.end_monotonic_ns;
}

std::string SwitchWords(const std::string& by, uint32_t pid) {
  if (by.empty()) return "?";
  return pid != 0 ? by + " (pid " + std::to_string(pid) + ")" : by;
}

}  // namespace

std::pair<uint64_t, uint64_t> FlightSpan(const Session& session) {
  if (!session.meta.capture || !session.meta.capture->flight ||
      session.meta.capture->windows.empty()) {
    return {0, 0};
  }
  const CaptureWindow& window = session.meta.capture->windows.front();
  uint64_t end = CaptureEnd(session, window);
  uint64_t keep = session.meta.capture->flight->keep_ns;
  uint64_t start = std::max(window.start_monotonic_ns, end > keep ? end - keep : 0);
  return {start, std::max(start, end)};
}

std::string FlightHeldText(const Session& session) {
  if (!session.meta.capture || !session.meta.capture->flight) return {};
  const FlightRecording& flight = *session.meta.capture->flight;
  char seconds[32];
  snprintf(seconds, sizeof(seconds), "%g", flight.keep_ns / 1e9);
  std::string text = std::string("--flight-recorder ") + seconds + " s: ";
  auto [start, end] = FlightSpan(session);
  if (end == 0) return text + "nothing was recorded";
  text += "held the last " + FormatDuration(end - start) + ", " + FormatOffset(session, start) +
          " to " + FormatOffset(session, end);
  if (session.trimmed_chunks > 0 || session.trimmed_bytes > 0) {
    text += " (older records trimmed: " + WithThousands(session.trimmed_chunks) + " chunks, " +
            FormatBytes(session.trimmed_bytes) + ")";
  }
  return text;
}

std::string FlightEndText(const Session& session) {
  if (!session.meta.capture || !session.meta.capture->flight) return {};
  const FlightRecording& flight = *session.meta.capture->flight;
  uint64_t end = FlightSpan(session).second;
  uint64_t fired = flight.fired_monotonic_ns;
  std::string after = fired != 0 && end > fired ? FormatDuration(end - fired) + " later" : "then";
  if (flight.ended_by == "freeze") {
    std::string head = "the freeze trigger fired at " + FormatOffset(session, fired) + " (";
    std::string where = " on thread " + std::to_string(flight.tid) + ", pid " +
                        std::to_string(flight.pid) + ") and the recording ended " + after;
    if (flight.freeze_kind == "threads") {
      return head + std::to_string(flight.threads) +
             " threads doing CUDA work all blocked outside it for " +
             FormatDuration(flight.duration_ns) + ", the first" + where;
    }
    bool running = flight.freeze_kind == "running";
    std::string call = "a CUDA call";
    for (const ApiCall& each : session.api_calls) {
      bool that_call =
          running ? each.enter_ns + flight.duration_ns == fired : each.exit_ns == fired;
      if (each.tid == flight.tid && that_call) {
        call = session.ApiName(each);
        break;
      }
    }
    return head + call + (running ? " still running after " : " took ") +
           FormatDuration(flight.duration_ns) + where;
  }
  if (flight.ended_by == "hang") {
    return "the hang trigger fired at " + FormatOffset(session, fired) +
           " (no CUDA call finished for " + FormatDuration(flight.duration_ns) +
           ") and the recording ended " + after;
  }
  if (flight.ended_by == "stop") return "ended by gprof-run stop, no trigger fired";
  return "ended with the command, no trigger fired";
}

std::string FlightText(const Session& session) {
  std::string held = FlightHeldText(session);
  return held.empty() ? held : held + "; " + FlightEndText(session);
}

std::string CaptureText(const Session& session) {
  if (!session.meta.capture) return {};
  const SessionMeta::Capture& capture = *session.meta.capture;
  if (capture.flight) return FlightText(session);
  std::string text = "--capture-range=" + capture.range + ": ";
  if (capture.windows.empty()) {
    text += "no window was opened: nothing was recorded";
  } else {
    uint64_t recorded = 0;
    for (const CaptureWindow& window : capture.windows) {
      uint64_t end = CaptureEnd(session, window);
      if (end > window.start_monotonic_ns) recorded += end - window.start_monotonic_ns;
    }
    text += std::to_string(capture.windows.size()) +
            (capture.windows.size() == 1 ? " window, " : " windows, ") + FormatDuration(recorded);
    const SessionMeta& meta = session.meta;
    if (meta.end_monotonic_ns > meta.start_monotonic_ns && meta.start_monotonic_ns != 0)
      text += " of " + FormatDuration(meta.end_monotonic_ns - meta.start_monotonic_ns);
    text += " recorded: what started outside them was not recorded";
  }
  if (capture.refused_opens > 0) {
    text += "; " + WithThousands(capture.refused_opens) +
            " more starts found no room for a window and were ignored";
  }
  return text;
}

std::string CaptureWindowText(const Session& session, size_t index) {
  const CaptureWindow& window = session.meta.capture->windows[index];
  uint64_t end = CaptureEnd(session, window);
  std::string text =
      FormatOffset(session, window.start_monotonic_ns) + " to " + FormatOffset(session, end) +
      ", " + FormatDuration(end > window.start_monotonic_ns ? end - window.start_monotonic_ns : 0) +
      ", " + SwitchWords(window.opened_by, window.open_pid) + " to " +
      SwitchWords(window.closed_by, window.close_pid);
  uint64_t before = index == 0 ? session.meta.start_monotonic_ns
                               : CaptureEnd(session, session.meta.capture->windows[index - 1]);
  if (before != 0 && window.start_monotonic_ns > before) {
    text += "; not recorded before it: " + FormatDuration(window.start_monotonic_ns - before);
  }
  return text;
}

std::string CaptureTailText(const Session& session) {
  if (!session.meta.capture || session.meta.capture->windows.empty()) return {};
  uint64_t last = CaptureEnd(session, session.meta.capture->windows.back());
  uint64_t run_end = session.meta.end_monotonic_ns;
  if (run_end <= last) return {};
  return "not recorded after the last window: " + FormatDuration(run_end - last);
}

std::string NestedSessionText(const NestedSession& nested) {
  return "pid " + std::to_string(nested.pid) + " (gprof-run) recorded its command into " +
         nested.directory + " (" +
         (nested.calls ? WithThousands(*nested.calls) : std::string("an unknown number of")) +
         " CUDA calls): those are in that session, not this one";
}

std::string AttachedText(const SessionMeta& meta) {
  if (!meta.attach) return {};
  const AttachedRecording& attach = *meta.attach;
  std::string text = "to running process" + std::string(attach.pids.size() == 1 ? " " : "es ");
  for (size_t i = 0; i < attach.pids.size(); ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(attach.pids[i]);
  if (attach.processes > attach.pids.size()) {
    const uint32_t more = attach.processes - static_cast<uint32_t>(attach.pids.size());
    text += " and " + std::to_string(more) + (more == 1 ? " descendant" : " descendants");
  }
  if (meta.end_monotonic_ns > meta.start_monotonic_ns && meta.start_monotonic_ns != 0)
    text += ", for " + FormatDuration(meta.end_monotonic_ns - meta.start_monotonic_ns);
  const std::string ended = attach.ended == "duration"   ? "--duration elapsed"
                            : attach.ended == "signal"   ? "gprof-run was interrupted"
                            : attach.ended == "exited"   ? "the processes had all exited"
                            : attach.ended == "max_size" ? "--max-size was reached"
                                                         : "";
  if (!ended.empty()) text += " (until " + ended + ")";
  return text + ": not started by gprof-run, which recorded only that window";
}

std::string MaxSizeText(const Session& session) {
  if (!session.meta.max_size) return {};
  const SessionMeta::MaxSize& cap = *session.meta.max_size;
  if (cap.stopped_at_monotonic_ns == 0) {
    return "within --max-size " + FormatBytes(cap.limit_bytes) + " (used " +
           FormatBytes(cap.used_bytes) + ")";
  }
  return "stopped at --max-size " + FormatBytes(cap.limit_bytes) + " at " +
         FormatOffset(session, cap.stopped_at_monotonic_ns) + ": " +
         WithThousands(cap.refused_records) + " records (" + FormatBytes(cap.refused_bytes) +
         ") not written, nothing recorded from then on";
}

namespace {

struct ActivityDetail {
  std::string operator()(const GpuKernel&) const { return {}; }
  std::string operator()(const GpuMemcpy& copy) const {
    return " of " + FormatBytes(copy.bytes) + " (" + MemoryKindName(copy.src_kind) + " to " +
           MemoryKindName(copy.dst_kind) + ")";
  }
  std::string operator()(const GpuMemset& memset) const {
    return " of " + FormatBytes(memset.bytes) + " (" + MemoryKindName(memset.memory_kind) + ")";
  }
  std::string operator()(const GpuSync&) const { return {}; }
};

}  // namespace

std::string DescribeGpuActivity(const Session& session, const GpuActivity& activity,
                                bool short_names) {
  std::string name = GpuActivityName(session, activity);
  std::string text =
      (short_names ? ShortCppName(name) : name) + std::visit(ActivityDetail{}, activity.detail);
  if (activity.stream_id != kNoStream) text += " on stream " + std::to_string(activity.stream_id);
  return text;
}

std::string DescribeGpuDuring(const Session& session, const GpuDuringCall& gpu,
                              const std::string& window, bool short_names) {
  const GpuActivity* main = gpu.main_activity;
  bool main_is_own =
      std::find(gpu.own_work.begin(), gpu.own_work.end(), main) != gpu.own_work.end();
  std::string text;
  if (main == nullptr) {
    text = "the GPU was idle during " + window;
  } else {
    text = "the GPU was running " + std::string(main_is_own ? "its own " : "") +
           DescribeGpuActivity(session, *main, short_names) + " for " +
           FormatDuration(gpu.main_overlap_ns);
    if (!main_is_own && gpu.main_launcher != nullptr) {
      text += ", launched by " + QuotedThread(session, gpu.main_launcher->tid) + " in " +
              session.ApiName(*gpu.main_launcher);
    }
    text += "; busy " + FormatShare(gpu.busy_ns, gpu.window_ns) + " of " + window;
  }
  if (!gpu.own_work.empty() && !main_is_own) {
    const GpuActivity& first = *gpu.own_work.front();
    text += "; its own work: " + DescribeGpuActivity(session, first, short_names) + ", " +
            FormatDuration(first.duration()) + " at " + FormatOffset(session, first.start_ns);
    if (gpu.own_work.size() > 1) text += " (+" + std::to_string(gpu.own_work.size() - 1) + " more)";
  }
  return text;
}

std::string HolderGpuWindow(const Session& session, const HolderActivity& holder) {
  return holder.call != nullptr ? "its " + session.ApiName(*holder.call) : "the hold";
}

std::string RangeName(const Session& session, uint32_t name, uint32_t domain) {
  std::string text = name != 0 ? session.nvtx_strings[name] : "(unnamed)";
  if (domain != 0) text += " [" + session.nvtx_strings[domain] + "]";
  return text;
}

std::string InRangesWords(const Session& session, const std::vector<uint32_t>& ranges) {
  if (ranges.empty()) return "";
  // Each thread's path (its ranges come together, outermost first), then the threads of each
  // path, in the order given.
  std::vector<std::pair<uint32_t, std::string>> paths;
  for (uint32_t index : ranges) {
    const NvtxRange& range = session.nvtx_ranges[index];
    if (paths.empty() || paths.back().first != range.tid) paths.push_back({range.tid, ""});
    std::string& path = paths.back().second;
    path += (path.empty() ? "" : " > ") + RangeName(session, range.name, range.domain);
  }
  if (paths.size() == 1) return "in " + paths[0].second;
  std::vector<std::pair<std::string, std::string>> grouped;  // path, its threads
  for (const auto& [tid, thread_path] : paths) {
    const std::string& path = thread_path;  // a lambda may not capture a structured binding
    auto same = std::find_if(grouped.begin(), grouped.end(),
                             [&](const auto& entry) { return entry.first == path; });
    if (same == grouped.end()) same = grouped.insert(grouped.end(), {path, ""});
    same->second += (same->second.empty() ? "" : ", ") + QuotedThread(session, tid);
  }
  std::string text = "in ";
  for (size_t i = 0; i < grouped.size(); ++i)
    text += (i == 0 ? "" : "; ") + grouped[i].first + " (" + grouped[i].second + ")";
  return text;
}

}  // namespace gprof::collector
