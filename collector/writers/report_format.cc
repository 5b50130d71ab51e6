#include "collector/writers/report_format.h"

#include <algorithm>
#include <cstdio>

#include "collector/analysis/user_lock.h"
#include "collector/symbols/kernel_stack.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/diagnosis_words.h"
#include "collector/writers/gpu_vocabulary.h"
#include "collector/writers/kernel_vocabulary.h"
#include "collector/writers/report_words.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

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
  std::optional<UserNamedLock> lock = NameLockByItsUser(session, wait, call);
  return lock ? UserNamedLockWords(*lock) : std::string();
}

std::string WhereAsleep(const Session& session, const WaitObject& object) {
  bool inside = object.kind == WaitKind::kDevice || object.kind == WaitKind::kPageFault;
  return (inside ? "in " : "on ") + DescribeWaitObject(session, object);
}

std::string LockOwnerText(const Session& session, const Wait& wait) {
  if (wait.kernel_lock == nullptr) return {};
  const LockWait& lock = *wait.kernel_lock;
  // The thread the hint named was asleep where it held no kernel lock: no holder is named.
  if (lock.owner_tid != 0 && wait.owner_hint_stale) return "owner unknown (hint stale)";
  std::string owner = session.threads.contains(lock.owner_tid)
                          ? QuotedThread(session, lock.owner_tid)
                          : LockOwnerLabel(session, lock);
  if (owner.empty()) return {};
  std::string text = "held by " + owner;
  if (const MemoryMapCall* call = wait.owner_memory_call) {
    text += " in " + std::string(MemorySyscallName(call->syscall)) + " of " + MemoryMapSize(*call);
  } else if (wait.owner_call != nullptr) {
    text += " in " + session.ApiName(*wait.owner_call);
  }
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

std::string NestedSessionText(const NestedSession& nested) {
  return "pid " + std::to_string(nested.pid) + " (gprof-run) recorded its command into " +
         nested.directory + " (" +
         (nested.calls ? WithThousands(*nested.calls) : std::string("an unknown number of")) +
         " CUDA calls): those are in that session, not this one";
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

}  // namespace gprof::collector
