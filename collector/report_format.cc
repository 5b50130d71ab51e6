#include "report_format.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "gpu_vocabulary.h"
#include "kernel_events.h"
#include "kernel_stack.h"
#include "kernel_vocabulary.h"
#include "user_symbols.h"

namespace gprof::collector {

std::string FormatDuration(uint64_t ns) {
  char text[32];
  if (ns < 1000) {
    snprintf(text, sizeof(text), "%llu ns", static_cast<unsigned long long>(ns));
  } else if (ns < 1000000) {
    snprintf(text, sizeof(text), "%.1f us", ns / 1e3);
  } else if (ns < 1000000000) {
    snprintf(text, sizeof(text), "%.1f ms", ns / 1e6);
  } else {
    snprintf(text, sizeof(text), "%.3f s", ns / 1e9);
  }
  return text;
}

uint64_t SessionOrigin(const Session& session) {
  if (session.meta.start_monotonic_ns != 0) return session.meta.start_monotonic_ns;
  uint64_t origin = UINT64_MAX;
  if (!session.api_calls.empty()) origin = std::min(origin, session.api_calls.front().enter_ns);
  if (!session.off_cpu.empty()) origin = std::min(origin, session.off_cpu.front().start_ns);
  if (!session.futex_calls.empty()) origin = std::min(origin, session.futex_calls.front().start_ns);
  return origin == UINT64_MAX ? 0 : origin;
}

std::string FormatOffset(const Session& session, uint64_t time_ns) {
  uint64_t origin = SessionOrigin(session);
  char text[32];
  if (time_ns >= origin) {
    snprintf(text, sizeof(text), "+%.3f s", (time_ns - origin) / 1e9);
  } else {
    snprintf(text, sizeof(text), "-%.3f s", (origin - time_ns) / 1e9);
  }
  return text;
}

std::string FormatHex(uint64_t value) {
  char text[24];
  snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string DescribeAddress(const Session& session, uint32_t pid, uint64_t address,
                            uint64_t time_ns) {
  return DataText(LocateUserAddress(session, pid, address, time_ns, AddressUse::kData));
}

std::string DescribeWaitObject(const Session& session, const WaitObject& object) {
  switch (object.kind) {
    case WaitKind::kFutex: {
      std::string text = "futex " + FormatHex(object.address);
      std::string where = DescribeAddress(session, object.pid, object.address, object.seen_ns);
      if (!where.empty()) text += " (" + where + ")";
      if (!object.kernel_function.empty()) text += " in " + object.kernel_function;
      return text;
    }
    case WaitKind::kKernelLock:
      if (object.lock_flags & GPROF_LOCK_MMAP_LOCK)
        return "the mmap_lock of pid " + std::to_string(object.pid);
      return std::string("kernel ") + LockKindName(object.lock_flags) + " " +
             FormatHex(object.address) +
             (object.taken_in.empty() ? "" : " (taken in " + object.taken_in + ")");
    case WaitKind::kDevice: {
      std::string text = DeviceCallName(object.device_call);
      if (!object.device.empty())
        text += (object.device_call == DeviceCall::kMmap ? " of " : " on ") + object.device;
      return text;
    }
    case WaitKind::kPageFault: {
      std::string text = "a page fault at " + FormatHex(object.address);
      std::string where = DescribeAddress(session, object.pid, object.address, object.seen_ns);
      return where.empty() ? text : text + " (" + where + ")";
    }
    case WaitKind::kKernelFunction:
      if (IsFileLockFunction(object.kernel_function))
        return "a file lock (flock, fcntl) in " + object.kernel_function;
      break;
  }
  return object.kernel_function.empty() ? "an unknown wait" : object.kernel_function;
}

std::string DescribeLockByItsUser(const Session& session, const Wait& wait, const ApiCall* call) {
  const WaitObject& object = wait.object;
  if (object.kind != WaitKind::kFutex) return {};
  UserLocation word =
      LocateUserAddress(session, object.pid, object.address, object.seen_ns, AddressUse::kData);
  if (word.in_module() || word.module.empty()) return {};
  std::optional<LockUser> user = FindLockUser(session, wait.pid, wait.user_stack_id, wait.start_ns);
  if (!user) return {};
  std::string memory = word.module == "[heap]"             ? "on the heap"
                       : word.module.starts_with("[stack") ? "on the main thread's stack"
                       : word.module == "anonymous memory" ? "in anonymous memory"
                                                           : "in " + word.module;
  std::string text =
      "a lock inside " + user->module + " (futex " + FormatHex(object.address) + " " + memory + ")";
  if (!user->function.empty()) {
    text += ", waited for in " + user->function;
  } else if (call != nullptr) {
    text += ", waited for in " + session.ApiName(*call);
  }
  return text;
}

std::string WhereAsleep(const Session& session, const WaitObject& object) {
  bool inside = object.kind == WaitKind::kDevice || object.kind == WaitKind::kPageFault;
  return (inside ? "in " : "on ") + DescribeWaitObject(session, object);
}

std::string LockOwnerText(const Session& session, const Wait& wait) {
  if (wait.kernel_lock == nullptr) return {};
  std::string owner = LockOwnerLabel(session, *wait.kernel_lock);
  if (owner.empty()) return {};
  std::string text = "held by " + owner;
  if (const MemoryMapCall* call = wait.owner_memory_call) {
    text += " in " + std::string(MemorySyscallName(call->syscall)) + " of " + MemoryMapSize(*call);
  } else if (wait.owner_call != nullptr) {
    text += " in " + session.ApiName(*wait.owner_call);
  }
  return text;
}

std::string Shortened(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return std::string(text.substr(0, cut));
}

std::string WithThousands(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text += ',';
    text += digits[i];
  }
  return text;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
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

std::string FormatShare(uint64_t part, uint64_t whole) {
  if (whole == 0 || part >= whole) return "100%";
  // Rounded down, so that 100% means all of it.
  auto percent = static_cast<unsigned>(part * 100.0 / whole);
  if (percent == 0) return part == 0 ? "0%" : "<1%";
  return std::to_string(percent) + "%";
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

std::string DescribeGpuActivity(const Session& session, const GpuActivity& activity) {
  std::string text =
      GpuActivityName(session, activity) + std::visit(ActivityDetail{}, activity.detail);
  if (activity.stream_id != kNoStream) text += " on stream " + std::to_string(activity.stream_id);
  return text;
}

std::string DescribeGpuDuring(const Session& session, const GpuDuringCall& gpu,
                              const std::string& window) {
  const GpuActivity* main = gpu.main_activity;
  bool main_is_own =
      std::find(gpu.own_work.begin(), gpu.own_work.end(), main) != gpu.own_work.end();
  std::string text;
  if (main == nullptr) {
    text = "the GPU was idle during " + window;
  } else {
    text = "the GPU was running " + std::string(main_is_own ? "its own " : "") +
           DescribeGpuActivity(session, *main) + " for " + FormatDuration(gpu.main_overlap_ns);
    if (!main_is_own && gpu.main_launcher != nullptr) {
      text += ", launched by " + session.ThreadLabel(gpu.main_launcher->tid) + " in " +
              session.ApiName(*gpu.main_launcher);
    }
    text += "; busy " + FormatShare(gpu.busy_ns, gpu.window_ns) + " of " + window;
  }
  if (!gpu.own_work.empty() && !main_is_own) {
    const GpuActivity& first = *gpu.own_work.front();
    text += "; its own work: " + DescribeGpuActivity(session, first) + ", " +
            FormatDuration(first.duration()) + " at " + FormatOffset(session, first.start_ns);
    if (gpu.own_work.size() > 1) text += " (+" + std::to_string(gpu.own_work.size() - 1) + " more)";
  }
  return text;
}

std::string HolderGpuWindow(const Session& session, const HolderActivity& holder) {
  return holder.call != nullptr ? "its " + session.ApiName(*holder.call) : "the hold";
}

std::vector<std::string> NativeStackFrames(const Session& session, const NativeStack& stack) {
  std::vector<std::string> frames;
  frames.reserve(stack.ips.size());
  for (size_t i = 0; i < stack.ips.size(); ++i) {
    if (i < stack.symbols.size() && !stack.symbols[i].empty()) {
      frames.push_back(stack.symbols[i]);
      continue;
    }
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    frames.push_back(
        FrameText(LocateUserAddress(session, stack.pid, stack.ips[i], kLatest, use), stack.ips[i]));
  }
  return frames;
}

}  // namespace gprof::collector
