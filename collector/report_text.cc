#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "gpu_vocabulary.h"
#include "report.h"
#include "report_diagnosis.h"
#include "report_format.h"
#include "user_symbols.h"
#include "wait_class.h"

namespace gprof::collector {
namespace {

std::string JoinCommand(const std::vector<std::string>& command) {
  std::string text;
  for (const auto& arg : command) {
    if (!text.empty()) text += ' ';
    text += arg.find(' ') == std::string::npos ? arg : "'" + arg + "'";
  }
  return text;
}

// The frames of a stack the text shows; report.json has them all.
constexpr size_t kStackFramesShown = 8;

// "f0 <- f1 <- ... <- f7 <- ... (2 more)", innermost first.
std::string JoinFrames(const std::vector<std::string>& frames) {
  std::string text;
  for (size_t i = 0; i < std::min(frames.size(), kStackFramesShown); ++i) {
    if (i > 0) text += " <- ";
    text += frames[i];
  }
  if (frames.size() > kStackFramesShown)
    text += " <- ... (" + std::to_string(frames.size() - kStackFramesShown) + " more)";
  return text;
}

// What a freeze's threads blocked on is a lock (a futex word, a kernel lock), or another wait.
bool IsLock(const WaitObject& object) {
  return object.kind == WaitKind::kFutex || object.kind == WaitKind::kKernelLock;
}

// "CUPTI 13.0 (API version 130001), /usr/.../libcupti.so.13", "interposition, no GPU timeline
// (CUPTI subscriber taken by another tool)".
std::string CaptureText(const Capture& capture) {
  switch (capture.mode) {
    case CaptureMode::kCupti:
      return CuptiVersionText(capture.cupti_version) +
             (capture.note.empty() ? std::string() : ", " + capture.note);
    case CaptureMode::kInterposition:
      return "interposition, no GPU timeline" +
             (capture.note.empty() ? std::string() : " (" + capture.note + ")");
    case CaptureMode::kUnknown:
      break;
  }
  return "unknown";
}

uint64_t Magnitude(int64_t value) {
  return value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
}

// Offsets up to this (or up to their measurement's uncertainty) mean the clocks agreed, as the
// injected library asks CUPTI for: applied, but not worth a line.
constexpr uint64_t kClocksAgreeNs = 1000;

// "pid 429: CUPTI's clock was 1.2 ms ahead of CLOCK_MONOTONIC (+-1.0 us); GPU times corrected",
// or nothing when the clocks agreed.
std::string ClockOffsetText(const Process& process) {
  const ClockOffset* largest = nullptr;
  size_t corrections = 0;
  for (const ClockOffset& offset : process.clock_offsets) {
    if (Magnitude(offset.offset_ns) <= std::max(offset.uncertainty_ns, kClocksAgreeNs)) continue;
    ++corrections;
    if (largest == nullptr || Magnitude(offset.offset_ns) > Magnitude(largest->offset_ns))
      largest = &offset;
  }
  if (largest == nullptr) return {};
  std::string text = "pid " + std::to_string(process.pid) + ": CUPTI's clock was ";
  std::string size = FormatDuration(Magnitude(largest->offset_ns));
  if (corrections == 1) {
    text += size + (largest->offset_ns > 0 ? " ahead of" : " behind") + " CLOCK_MONOTONIC (+-" +
            FormatDuration(largest->uncertainty_ns) + ")";
  } else {
    text += "off CLOCK_MONOTONIC by up to " + size + " (" + std::to_string(corrections) +
            " measurements)";
  }
  return text + "; GPU times corrected";
}

class TextReport {
 public:
  TextReport(const Session& session, const Analysis& analysis, const ReportOptions& options,
             const Diagnosis* diagnosis)
      : session_(session), analysis_(analysis), options_(options), diagnosis_(diagnosis) {}

  std::string Render() {
    Header();
    if (diagnosis_ != nullptr)
      out_ << "\n" << RenderDiagnosisText(session_, *diagnosis_, options_.max_listed);
    Freezes();
    OtherSlowCalls();
    return out_.str();
  }

 private:
  std::string Thread(uint32_t tid) const { return session_.ThreadLabel(tid); }
  std::string Call(const ApiCall& call) const {
    return session_.ApiName(call) + " (" + FormatOffset(session_, call.enter_ns) + ", " +
           FormatDuration(call.duration()) + ")";
  }
  // "woken by holder (1236), inside cudaDeviceSynchronize (+0.208 s, 40.1 ms)"
  std::string Waker(uint32_t tid, const std::string& comm, const ApiCall* call) const {
    if (tid == 0) return comm.empty() ? "woken by an interrupt" : "woken by " + comm;
    std::string text =
        "woken by " + (session_.threads.contains(tid)
                           ? Thread(tid)
                           : comm + " (" + std::to_string(tid) + ", outside the traced tree)");
    if (call != nullptr) text += ", inside " + Call(*call);
    return text;
  }

  void Header();
  void CountedLine();
  void GpuLines();
  void CaptureLines();
  void UnrecordedLines();
  void StackLine(const ApiCall& call, const char* indent);
  void UserStackLine(const Wait& wait);
  void Freezes();
  void FreezeHolder(const Freeze& freeze);
  void HolderMeantime(const HolderActivity& holder);
  void OtherSlowCalls();
  std::string Breakdown(const BlockedCall& blocked) const;

  const Session& session_;
  const Analysis& analysis_;
  const ReportOptions& options_;
  const Diagnosis* diagnosis_;
  std::ostringstream out_;
  std::map<const ApiCall*, size_t> held_by_;  // a freeze holder's call -> the freeze's number
};

// What the GPU ran, and the launches whose kernel did not arrive (lost, or still running).
void TextReport::GpuLines() {
  const GpuSummary& gpu = analysis_.gpu;
  if (gpu.kernels + gpu.copies + gpu.memsets == 0) return;
  out_ << "  gpu       " << WithThousands(gpu.kernels) << " kernels, " << WithThousands(gpu.copies)
       << " copies, " << WithThousands(gpu.memsets) << " memsets";
  const uint64_t missing =
      gpu.launch_calls - gpu.launch_calls_with_kernel - gpu.launch_calls_captured;
  if (missing > 0) {
    out_ << "; " << WithThousands(missing) << " of " << WithThousands(gpu.launch_calls)
         << " kernel launches have no kernel recorded";
  }
  if (gpu.launch_calls_captured > 0) {
    out_ << "; " << WithThousands(gpu.launch_calls_captured) << " kernel launch"
         << (gpu.launch_calls_captured == 1 ? "" : "es") << " captured into CUDA graphs";
  }
  if (gpu.graph_launches > 0) {
    out_ << "; " << WithThousands(gpu.graph_launches) << " graph launch"
         << (gpu.graph_launches == 1 ? "" : "es") << " ran " << WithThousands(gpu.graph_kernels)
         << " kernels";
  }
  out_ << "\n";
  for (size_t i = 0; i < std::min<size_t>(3, gpu.kernels_by_time.size()); ++i) {
    const KernelTotal& kernel = gpu.kernels_by_time[i];
    out_ << (i == 0 ? "  top       " : "            ") << FormatDuration(kernel.total_ns) << " in "
         << WithThousands(kernel.count) << " x "
         << Shortened(session_.kernel_names[kernel.name_index], 80) << "\n";
  }
  for (const GpuDevice& device : gpu.devices) {
    const uint64_t span_ns = device.last_ns - device.first_ns;
    out_ << "  gpu idle  " << GpuDeviceName(device, gpu.devices) << " ran nothing "
         << FormatDuration(device.idle_ns()) << " ("
         << (span_ns == 0 ? 0 : device.idle_ns() * 100 / span_ns) << "%) of the "
         << FormatDuration(span_ns) << " from its first work to its last\n";
  }
}

// What the kernel recorder counted instead of recording one by one, when it counted any.
void TextReport::CountedLine() {
  uint64_t faults = 0, fault_ns = 0, spins = 0;
  for (const auto& [tid, thread] : session_.threads) {
    faults += thread.quick_page_faults;
    fault_ns += thread.quick_page_fault_ns;
  }
  for (const auto& [cpu, count] : session_.spin_contention_by_cpu) spins += count;
  if (faults == 0 && spins == 0) return;
  out_ << "  counted   ";
  if (faults > 0) {
    out_ << WithThousands(faults) << " page faults under "
         << FormatDuration(session_.quick_page_fault_limit_ns) << " (" << FormatDuration(fault_ns)
         << " in all)" << (spins > 0 ? ", " : "");
  }
  if (spins > 0) out_ << WithThousands(spins) << " contended spinning locks";
  out_ << ": not recorded one by one\n";
}

void TextReport::Header() {
  const SessionMeta& meta = session_.meta;
  out_ << "gprof-run report: " << session_.directory << "\n";
  if (!meta.command.empty()) {
    out_ << "  command   " << JoinCommand(meta.command);
    if (meta.root_pid != 0) out_ << "  (pid " << meta.root_pid << ")";
    out_ << "\n";
  }
  if (meta.exit_code || meta.exit_signal) {
    out_ << "  exit      "
         << (meta.exit_code ? "status " + std::to_string(*meta.exit_code)
                            : "killed by signal " + std::to_string(*meta.exit_signal));
    if (meta.end_monotonic_ns > meta.start_monotonic_ns && meta.start_monotonic_ns != 0) {
      out_ << " after " << FormatDuration(meta.end_monotonic_ns - meta.start_monotonic_ns);
    }
    out_ << "\n";
  }
  if (!meta.cut_short.empty()) out_ << "  CUT SHORT " << meta.cut_short_text << "\n";
  size_t processes = std::count_if(session_.processes.begin(), session_.processes.end(),
                                   [](const auto& p) { return p.first != 0; });
  out_ << "  recorded  " << processes << (processes == 1 ? " process, " : " processes, ")
       << session_.threads.size() << " threads, " << WithThousands(session_.api_calls.size())
       << " CUDA calls, " << WithThousands(session_.off_cpu.size()) << " off-CPU intervals, "
       << WithThousands(session_.futex_calls.size()) << " futex calls";
  // What only a kernel recorder that sees them records: said when there are some.
  const std::pair<size_t, const char*> kernel_facts[] = {
      {session_.futex_waitv_calls.size(), " futex_waitv calls"},
      {session_.lock_waits.size(), " kernel lock waits"},
      {session_.device_waits.size(), " device waits"},
      {session_.page_faults.size(), " slow page faults"},
      {session_.memory_map_calls.size(), " memory map calls"}};
  for (const auto& [count, what] : kernel_facts) {
    if (count > 0) out_ << ", " << WithThousands(count) << what;
  }
  if (!session_.gpu_activities.empty())
    out_ << ", " << WithThousands(session_.gpu_activities.size()) << " GPU activities";
  out_ << "\n";
  CountedLine();
  GpuLines();
  CaptureLines();
  if (std::string window = WindowText(session_); !window.empty())
    out_ << "  window    " << window << "\n";
  if (std::string cap = MaxSizeText(session_); !cap.empty()) {
    out_ << (session_.meta.max_size->stopped_at_monotonic_ns != 0 ? "  STOPPED   " : "  size      ")
         << cap << "\n";
  }
  if (meta.kernel_recording && meta.kernel_stack_min_ns > 0) {
    out_ << "  stacks    only for off-CPU intervals of " << FormatDuration(meta.kernel_stack_min_ns)
         << " or longer, a waker's only after a wait that long\n";
  }
  if (!meta.kernel_recording) {
    out_ << "  kernel    NOT recorded"
         << (meta.kernel_recording_note.empty() ? "" : ": " + meta.kernel_recording_note)
         << "\n            (calls below are timed, but not explained)\n";
  }
  uint64_t lost_total = 0;
  for (const auto& lost : session_.lost) lost_total += lost.count;
  for (const auto& stop : session_.recording_stops) {
    out_ << "  STOPPED   " << stop.file;
    if (stop.pid != 0) out_ << " (pid " << stop.pid << ")";
    if (meta.start_monotonic_ns != 0 && stop.time_ns >= meta.start_monotonic_ns) {
      out_ << " at +" << FormatDuration(stop.time_ns - meta.start_monotonic_ns);
    }
    out_ << ": " << stop.description << "; nothing after that is recorded in it";
    if (stop.records_lost > 0) out_ << " (" << WithThousands(stop.records_lost) << " records lost)";
    out_ << "\n";
  }
  UnrecordedLines();
  if (lost_total == 0 && session_.recording_stops.empty() &&
      session_.unrecorded_processes.empty()) {
    out_ << "  lost      nothing\n";
  } else {
    for (const auto& lost : session_.lost) {
      if (lost.count == 0) continue;
      out_ << "  LOST      " << WithThousands(lost.count) << " " << lost.what;
      // Where the kernel recorder counted per CPU: which CPUs overflowed.
      std::string by_cpu;
      for (const auto& [cpu, count] : lost.by_cpu) {
        if (cpu == kAllCpus || count == 0) continue;
        by_cpu += (by_cpu.empty() ? "" : ", ") + std::string("cpu ") + std::to_string(cpu) + ": " +
                  WithThousands(count);
      }
      if (!by_cpu.empty()) out_ << " (" << by_cpu << ")";
      out_ << "\n";
    }
  }
  for (const auto& diagnostic : session_.diagnostics) {
    out_ << "  damaged   " << diagnostic.file << " at offset " << diagnostic.offset << ": "
         << diagnostic.message << "\n";
  }
  for (const auto& message : session_.messages) out_ << "  note      " << message << "\n";

  size_t in_freezes = std::count_if(analysis_.blocked_calls.begin(), analysis_.blocked_calls.end(),
                                    [](const BlockedCall& b) { return b.freeze >= 0; });
  out_ << "\n"
       << analysis_.blocked_calls.size() << " CUDA calls took "
       << FormatDuration(analysis_.options.threshold_ns) << " or longer";
  if (!analysis_.freezes.empty()) {
    out_ << "; " << in_freezes << " of them in " << analysis_.freezes.size()
         << (analysis_.freezes.size() == 1 ? " freeze" : " freezes")
         << " (threads blocked together on one object)";
  }
  out_ << ".\n";
}

// The processes that loaded CUDA without the injected library: their calls are missing from
// everything below. A few lines at most; report.json lists them all.
void TextReport::UnrecordedLines() {
  constexpr size_t kListed = 8;
  const auto& processes = session_.unrecorded_processes;
  for (size_t i = 0; i < std::min(processes.size(), kListed); ++i) {
    const UnrecordedProcess& process = processes[i];
    out_ << "  UNRECORDED pid " << process.pid;
    if (!process.name.empty()) out_ << " (" << process.name << ")";
    out_ << " " << process.reason << "\n";
  }
  if (processes.size() > kListed) {
    out_ << "  UNRECORDED " << processes.size() - kListed
         << " more processes the same way (report.json lists them)\n";
  }
}

// How each process's CUDA calls were captured, processes captured alike on one line, and the
// clock offsets that moved their GPU times.
void TextReport::CaptureLines() {
  std::map<std::string, std::vector<uint32_t>> pids_by_capture;
  for (const auto& [pid, process] : session_.processes) {
    if (process.capture.mode != CaptureMode::kUnknown)
      pids_by_capture[CaptureText(process.capture)].push_back(pid);
  }
  for (const auto& [capture, pids] : pids_by_capture) {
    out_ << "  capture   " << capture << ": pid";
    if (pids.size() > 1) out_ << "s";
    const char* separator = " ";
    for (uint32_t pid : pids) {
      out_ << separator << pid;
      separator = ", ";
    }
    out_ << "\n";
  }
  for (const auto& [pid, process] : session_.processes) {
    std::string offset = ClockOffsetText(process);
    if (!offset.empty()) out_ << "  clock     " << offset << "\n";
  }
}

// "at cudaFree <- FreeLoop(int)+0x1c <- ...": the call's native stack, when it was recorded.
void TextReport::StackLine(const ApiCall& call, const char* indent) {
  const NativeStack* stack = session_.CallStackOf(call);
  if (stack == nullptr || stack->ips.empty()) return;
  out_ << indent << "at " << JoinFrames(CollapseFrameRepeats(NativeStackFrames(session_, *stack)))
       << "\n";
}

// "slept at __futex_abstimed_wait_common+0x... <- ...": where in user code the thread went to
// sleep, when the kernel recorder took its user stack.
void TextReport::UserStackLine(const Wait& wait) {
  std::vector<std::string> frames =
      UserStackFrames(session_, wait.pid, wait.user_stack_id, wait.start_ns);
  if (frames.empty()) return;
  out_ << "      slept at " << JoinFrames(CollapseFrameRepeats(frames)) << "\n";
}

// Freezes longest first, numbered in that order: the worst is what the reader came for.
void TextReport::Freezes() {
  std::vector<const Freeze*> ordered;
  for (const Freeze& freeze : analysis_.freezes) ordered.push_back(&freeze);
  std::stable_sort(ordered.begin(), ordered.end(), [](const Freeze* a, const Freeze* b) {
    return a->end_ns - a->start_ns > b->end_ns - b->start_ns;
  });
  size_t shown = std::min(ordered.size(), options_.max_listed);
  for (size_t i = 0; i < shown; ++i) {
    const Freeze& freeze = *ordered[i];
    if (freeze.holder && freeze.holder->call != nullptr) held_by_[freeze.holder->call] = i + 1;
    out_ << "\nFREEZE " << i + 1 << " at " << FormatOffset(session_, freeze.start_ns) << ", "
         << FormatDuration(freeze.end_ns - freeze.start_ns) << ": " << freeze.thread_count
         << " threads blocked on " << (IsLock(freeze.object) ? "one lock" : "one wait") << "\n";
    out_ << "  on       " << DescribeWaitObject(session_, freeze.object);
    // A kernel lock's description names its process when it has one.
    if (freeze.object.kind != WaitKind::kKernelLock) out_ << ", pid " << freeze.object.pid;
    out_ << "\n";
    FreezeHolder(freeze);
    const char* label = "  blocked  ";
    for (const FreezeMember& member : freeze.members) {
      const BlockedCall& blocked = analysis_.blocked_calls[member.blocked_call];
      out_ << label << Thread(blocked.call->tid) << " in " << Call(*blocked.call) << ": "
           << Breakdown(blocked);
      if (member.woken_by_tid != 0) {
        out_ << "; released by " << Thread(member.woken_by_tid);
        if (member.passed_on) out_ << ", who waited on it too and passed it on";
      }
      out_ << "\n";
      StackLine(*blocked.call, "             ");
      label = "           ";
    }
  }
  if (shown < analysis_.freezes.size()) {
    out_ << "\n(" << analysis_.freezes.size() - shown << " more freezes in report.json)\n";
  }
}

void TextReport::FreezeHolder(const Freeze& freeze) {
  if (!freeze.holder) {
    out_ << "  holder   unknown: no recorded thread released the waiters\n";
    return;
  }
  const HolderActivity& holder = *freeze.holder;
  out_ << "  holder   " << Thread(holder.tid) << " held it "
       << FormatDuration(holder.release_ns - holder.hold_start_ns) << " and released it at "
       << FormatOffset(session_, holder.release_ns);
  if (holder.call != nullptr) {
    out_ << ", inside " << Call(*holder.call) << "\n";
    StackLine(*holder.call, "             ");
  } else {
    out_ << ", outside any CUDA call\n";
  }
  HolderMeantime(holder);
  if (holder.gpu) {
    out_ << "  gpu      "
         << DescribeGpuDuring(session_, *holder.gpu, HolderGpuWindow(session_, holder)) << "\n";
  }
}

void TextReport::HolderMeantime(const HolderActivity& holder) {
  uint64_t span = holder.on_cpu_ns + holder.asleep_ns + holder.runnable_ns;
  if (span == 0) return;
  out_ << "  meantime ";
  if (holder.own_wait && holder.asleep_ns >= holder.on_cpu_ns) {
    out_ << "the holder slept " << FormatDuration(holder.asleep_ns) << " "
         << WhereAsleep(session_, *holder.own_wait);
    if (holder.own_waker_tid != 0 || !holder.own_waker_comm.empty()) {
      out_ << ", " << Waker(holder.own_waker_tid, holder.own_waker_comm, nullptr);
    }
    out_ << "; on CPU " << FormatDuration(holder.on_cpu_ns) << "\n";
  } else {
    out_ << "the holder was on CPU " << FormatDuration(holder.on_cpu_ns)
         << " (working or spinning while holding it)";
    if (holder.asleep_ns > 0) out_ << ", asleep " << FormatDuration(holder.asleep_ns);
    if (holder.runnable_ns > 0)
      out_ << ", waiting for a CPU " << FormatDuration(holder.runnable_ns);
    out_ << "\n";
  }
}

std::string TextReport::Breakdown(const BlockedCall& blocked) const {
  std::ostringstream text;
  if (blocked.main_object) {
    text << "asleep " << FormatDuration(blocked.main_object_ns) << " "
         << WhereAsleep(session_, *blocked.main_object);
    if (const Wait* longest = LongestWaitOn(blocked.waits, *blocked.main_object))
      text << " [" << WaitClassName(longest->wait_class) << "]";
    // The longest sleep on it decided the call: its lock's owner is the one to name.
    if (const Wait* longest = LongestWaitOn(blocked.waits, *blocked.main_object)) {
      std::string owner = LockOwnerText(session_, *longest);
      if (!owner.empty()) text << ", " << owner;
    }
    if (blocked.asleep_ns > blocked.main_object_ns) {
      text << " (+" << FormatDuration(blocked.asleep_ns - blocked.main_object_ns) << " elsewhere)";
    }
    text << ", ";
  }
  text << "on CPU " << FormatDuration(blocked.on_cpu_ns);
  if (blocked.runnable_ns > 0)
    text << ", waiting for a CPU " << FormatDuration(blocked.runnable_ns);
  return text.str();
}

void TextReport::OtherSlowCalls() {
  // Sorted by a copy of each duration: the calls are far apart in a session's records, which may
  // be in spill files (record_storage.h), and a sort reads its keys many times over.
  std::vector<std::pair<uint64_t, const BlockedCall*>> by_duration;
  for (const BlockedCall& blocked : analysis_.blocked_calls) {
    if (blocked.freeze < 0) by_duration.emplace_back(blocked.call->duration(), &blocked);
  }
  if (by_duration.empty()) return;
  std::stable_sort(by_duration.begin(), by_duration.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const BlockedCall*> others;
  for (const auto& [duration, blocked] : by_duration) others.push_back(blocked);
  size_t shown = std::min(others.size(), options_.max_listed);
  out_ << "\nSLOW CUDA CALLS not blocked in a freeze, longest first";
  if (shown < others.size())
    out_ << " (" << shown << " of " << others.size() << "; all in report.json)";
  out_ << "\n";
  for (size_t i = 0; i < shown; ++i) {
    const BlockedCall& blocked = *others[i];
    out_ << "  " << Thread(blocked.call->tid) << " in " << Call(*blocked.call) << ": "
         << Breakdown(blocked) << "\n";
    if (auto held = held_by_.find(blocked.call); held != held_by_.end()) {
      out_ << "      it held the lock of FREEZE " << held->second << " meanwhile\n";
    }
    // The wait that decided the call: the longest sleep on its main object.
    const Wait* longest =
        blocked.main_object ? LongestWaitOn(blocked.waits, *blocked.main_object) : nullptr;
    if (longest != nullptr && (longest->waker_tid != 0 || !longest->waker_comm.empty())) {
      out_ << "      " << Waker(longest->waker_tid, longest->waker_comm, longest->waker_call)
           << "\n";
    }
    if (longest != nullptr) UserStackLine(*longest);
    if (blocked.gpu)
      out_ << "      " << DescribeGpuDuring(session_, *blocked.gpu, "the call") << "\n";
    StackLine(*blocked.call, "      ");
  }
}

}  // namespace

std::string RenderTextReport(const Session& session, const Analysis& analysis,
                             const ReportOptions& options, const Diagnosis* diagnosis) {
  return TextReport(session, analysis, options, diagnosis).Render();
}

}  // namespace gprof::collector
