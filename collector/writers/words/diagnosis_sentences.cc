#include "collector/writers/words/diagnosis_sentences.h"

#include <algorithm>
#include <vector>

#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"

namespace gprof::collector {

std::string CauseClassLabel(const Cause& cause) {
  if (cause.wait_class == WaitClass::kCpu) return "CPU";
  if (cause.kind == CauseKind::kHandoff) return "handoff";
  if (cause.wait_class == WaitClass::kOther && !cause.gaps.empty()) return "host late";
  return WaitClassName(cause.wait_class);
}

const std::vector<ClassMeaning>& ClassLegend() {
  static const std::vector<ClassMeaning> kLegend = {
      {"host late", "the GPU ran out of work because the thread that launches it was late"},
      {"CPU", "threads ready to run waited for a CPU: too few CPUs for them"},
      {"user lock", "a lock of the program or a library (a pthread mutex, std::mutex, a futex)"},
      {"condition variable", "waiting for another thread's signal: a condition, join or event"},
      {"Python GIL", "waiting for CPython's global interpreter lock"},
      {"kernel lock", "a lock inside the kernel (a process's mmap_lock, a kernel mutex)"},
      {"GPU driver", "a system call on a GPU device file (ioctl, poll on nvidia*)"},
      {"page fault", "a slow page fault"},
      {"I/O", "disk, pipes, sockets, poll"},
      {"sleep", "asked to sleep, or a timed wait that nobody ended"},
      {"other", "none of those"},
  };
  return kLegend;
}

std::string CauseGpuIdleWords(const Cause& cause) {
  if (cause.gpu_idle_ns == 0) return {};
  return "GPU idle " + FormatDuration(cause.gpu_idle_ns) + " in " +
         CountOf(cause.gaps.size(), "gap");
}

std::string CauseBlockedWords(const Cause& cause) {
  if (cause.wait_count == 0) return {};
  const bool cpu = cause.wait_class == WaitClass::kCpu;
  std::string text = CountOf(cause.tids.size(), "thread") + (cpu ? " runnable " : " blocked ") +
                     FormatDuration(cause.blocked_ns);
  if (!cpu) {
    text += " in " + CountOf(cause.wait_count, "wait") + " (longest " +
            FormatDuration(cause.longest_ns) + ")";
  }
  return text;
}

std::string CriticalPathWords(const Cause& cause) {
  if (cause.held_up_ns == 0) return {};
  return "of it, the program's critical path waited " + FormatDuration(cause.held_up_ns);
}

const char* ChainStepWords(const ChainLink& link, bool first) {
  if (link.creator) return "created by";
  if (!first) return "who waited for";
  return link.owner ? "held by" : "ended by";
}

std::string GapWaitWords(const Session& session, const GpuGap& gap, const LockUsers* users) {
  if (gap.gpu_side) return "queued in time: the GPU side held it";
  if (gap.late_thread)
    return "the GPU waited for " + DescribeLink(session, *gap.late_thread, users);
  return "the call that launched the next work was not recorded";
}

std::string ModuleLoadWords(const GpuGap& gap) {
  if (gap.module_load_ns == 0) return {};
  return "the driver spent " + FormatDuration(gap.module_load_ns) +
         " of the wait loading a CUDA module";
}

std::string DescribeDeadlock(const Session& session, const Stall& stall) {
  if (stall.deadlock_tid == 0 || stall.chain.empty()) return {};
  // The waiter, each link, and the thread the chain came back to; the cycle starts where that
  // thread first appears (the waiter itself, or a link it waited behind).
  std::vector<uint32_t> tids = {stall.tid};
  for (const ChainLink& link : stall.chain) tids.push_back(link.tid);
  tids.push_back(stall.deadlock_tid);
  size_t first = std::find(tids.begin(), tids.end(), stall.deadlock_tid) - tids.begin();
  std::string text;
  if (first > 0) text = QuotedThread(session, stall.tid) + " waited behind a deadlock: ";
  for (size_t i = first; i + 1 < tids.size(); ++i) {
    text += (i == first ? QuotedThread(session, tids[i]) + " waited for "
                        : ", " + QuotedThread(session, tids[i]) + " for ") +
            QuotedThread(session, tids[i + 1]);
  }
  return text + ": a cycle of waits";
}

std::string DescribeProfilerCost(const Session& session, const Analysis& diagnosis) {
  const ProfilerCost& cost = diagnosis.profiler_cost;
  if (cost.stalls.empty()) return {};
  auto times = [](size_t count, const char* one) {
    return std::to_string(count) + " " + one + (count == 1 ? "" : "s");
  };
  const Stall& longest = diagnosis.stalls[cost.longest];
  std::string text = "gprof-run's own threads delayed the program's threads " +
                     times(cost.stalls.size(), "time") + ", " + FormatDuration(cost.total_ns) +
                     " in all, longest " + FormatDuration(longest.asleep_ns()) + " (" +
                     session.ThreadLabel(longest.tid) + " " +
                     WhereAsleep(session, longest.wait.object) + ", held up by " +
                     session.ThreadLabel(longest.profiler_tid) + ")";
  if (cost.gaps > 0)
    text += "; GPU idle " + FormatDuration(cost.gpu_idle_ns) + " in " + times(cost.gaps, "gap");
  return text + ": gprof-run's cost, counted in no cause";
}

namespace {

// " in cudaFree" when the whole window was inside the call; else where its time went, as CUDA calls
// go: " (8.2 s outside CUDA calls, then 12.0 us in cudaMemcpyAsync)". A call that only ended the
// window (the launch that came late) did not take the window's time.
std::string CallsText(const Session& session, const ChainLink& link) {
  const uint64_t window_ns = link.end_ns - link.start_ns;
  if (link.call != nullptr && link.call_ns >= window_ns)
    return " in " + session.ApiName(*link.call);
  const uint64_t in_calls_ns = link.call_ns + link.other_calls_ns;
  if (in_calls_ns == 0) return "";
  std::vector<std::string> parts;
  if (window_ns > in_calls_ns)
    parts.push_back(FormatDuration(window_ns - in_calls_ns) + " outside CUDA calls");
  if (link.other_calls > 0 && link.longest_other_call != nullptr) {
    const std::string longest = session.ApiName(*link.longest_other_call);
    parts.push_back(FormatDuration(link.other_calls_ns) + " in " +
                    (link.other_calls == 1 ? longest
                                           : WithThousands(link.other_calls) +
                                                 " other CUDA calls (longest " + longest + ")"));
  }
  if (link.call != nullptr && link.call_ns > 0) {
    parts.push_back(std::string(parts.empty() ? "" : "then ") + FormatDuration(link.call_ns) +
                    " in " + session.ApiName(*link.call));
  }
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : ", ") + part;
  return " (" + text + ")";
}

}  // namespace

namespace {

// "malloc_trim", "janitor_loop (app.c:41)", "libfoo.so+?" where no symbol names it.
std::string NativeFrameWords(const NativeFrame& frame) {
  std::string text = frame.function.empty() ? frame.module : ShortCppName(frame.function);
  if (frame.program && !frame.source.empty()) text += " (" + frame.source + ")";
  return text;
}

}  // namespace

std::string OnCpuWords(const OnCpuActivity& ran) {
  std::string native;
  bool program = std::any_of(ran.frames.begin(), ran.frames.end(),
                             [](const NativeFrame& frame) { return frame.program; });
  if (!ran.python || program) {
    for (const NativeFrame& frame : ran.frames)
      native += (native.empty() ? "" : " <- ") + NativeFrameWords(frame);
  }
  if (ran.python) {
    return " at " + PythonFrameText(*ran.python) +
           (native.empty() ? "" : "; natively in " + native);
  }
  return native.empty() ? "" : " in " + native;
}

std::string DescribeLink(const Session& session, const ChainLink& link, const LockUsers* users) {
  std::string text = QuotedThread(session, link.tid);
  if (link.created_ns != 0) text += ", created at " + FormatOffset(session, link.created_ns) + ",";
  switch (link.state) {
    case ChainLink::State::kExited:
      return text + " (had exited)";
    case ChainLink::State::kOnCpu:
      text += " on CPU " + FormatDuration(link.on_cpu_ns) + OnCpuWords(link.ran);
      // Page faults are said where they took a tenth of its time on CPU or more.
      if (link.faults.ns * 10 >= link.on_cpu_ns && link.faults.ns > 0)
        text += ", " + FormatDuration(link.faults.ns) + " of it in " +
                WithThousands(link.faults.faults) + " page faults";
      break;
    case ChainLink::State::kRunnable:
      text += " waiting for a CPU " + FormatDuration(link.runnable_ns);
      break;
    case ChainLink::State::kAsleep:
      text += " " + (link.wait ? SleptWords(session, link.wait->object, link.wait_class,
                                            link.asleep_ns, users) +
                                     " [" + WaitClassName(link.wait_class) + "]"
                               : "asleep " + FormatDuration(link.asleep_ns));
      break;
    case ChainLink::State::kGpu:
      text += " waiting for the GPU";
      if (link.gpu_activity != nullptr)
        text += ", which ran " + ShortCppName(GpuActivityName(session, *link.gpu_activity));
      break;
  }
  if (link.memory_call != nullptr) {
    text += " in " + std::string(MemorySyscallName(link.memory_call->syscall)) + " of " +
            MemoryMapSize(*link.memory_call);
  } else {
    text += CallsText(session, link);
  }
  // Time without a CPU is said wherever it took a tenth of the window or more.
  const uint64_t window_ns = link.end_ns - link.start_ns;
  if (link.state != ChainLink::State::kRunnable && link.runnable_ns > 0 &&
      link.runnable_ns * 10 >= window_ns)
    text += ", waiting for a CPU " + FormatDuration(link.runnable_ns);
  if (link.released)
    text += ", until it released the lock at " + FormatOffset(session, link.end_ns);
  return text;
}

std::string LateThreadWords(const Session& session, const Cause& cause) {
  switch (cause.kind) {
    case CauseKind::kModuleLoad:
      return std::string(" loading a CUDA module ") + (cause.loaded_in_launch ? "in " : "before ") +
             session.ApiName(*cause.launch) +
             " (the driver loads a module's code at its first use)";
    case CauseKind::kLateHost:
      return " late to launch the next GPU work (the GPU waited for the host)";
    default:
      return {};
  }
}

std::string CauseIdentity(const Session& session, const Cause& cause) {
  switch (cause.kind) {
    case CauseKind::kCpu:
      return "too few CPUs for the threads ready to run";
    case CauseKind::kGpuSide:
      return "the GPU side (work queued in time started late, with the GPU idle)";
    case CauseKind::kModuleLoad:
    case CauseKind::kLateHost:
      return session.ThreadLabel(cause.thread_tid) + LateThreadWords(session, cause);
    case CauseKind::kObject:
    case CauseKind::kHandoff:
      break;
  }
  if (!cause.python_lock.empty()) return cause.python_lock;
  if (cause.user_named) return UserNamedLockWords(*cause.user_named);
  if (!cause.symbol.empty()) {
    return (cause.wait_class == WaitClass::kPythonGil ? "the GIL: " : "") + cause.symbol + " in " +
           cause.symbol_module + " (futex " + FormatHex(cause.object.address) + ")";
  }
  return DescribeWaitObject(session, cause.object);
}

std::string CauseTitle(const Session& session, const Analysis& analysis, const Cause& cause) {
  if (cause.wait_class == WaitClass::kCpu) return "too few CPUs for the threads ready to run";
  if (cause.kind == CauseKind::kHandoff) {
    // Who waited for whom: the thread that ended most of the waits. What on: the cause says.
    std::string text;
    for (size_t i = 0; i < std::min<size_t>(2, cause.tids.size()); ++i)
      text += (i == 0 ? "" : ", ") + QuotedThread(session, cause.tids[i]);
    if (cause.tids.size() > 2) text += " and " + std::to_string(cause.tids.size() - 2) + " more";
    text += " waited";
    if (cause.holder_tid != 0) text += " for " + QuotedThread(session, cause.holder_tid);
    return text;
  }
  if (cause.wait_class == WaitClass::kOther && !cause.gaps.empty()) {
    // A late thread: its name quoted as everywhere in the reports.
    const GpuGap& gap = analysis.gaps[cause.gaps.front()];
    if (gap.late_thread &&
        (cause.kind == CauseKind::kModuleLoad || cause.kind == CauseKind::kLateHost))
      return QuotedThread(session, cause.thread_tid) + LateThreadWords(session, cause);
    return CauseIdentity(session, cause);
  }
  if (cause.object.kind == WaitKind::kKernelFunction && cause.object.kernel_function.empty())
    return CauseIdentity(session, cause);
  return ObjectWords(session, cause.object, &analysis.lock_users);
}

}  // namespace gprof::collector
