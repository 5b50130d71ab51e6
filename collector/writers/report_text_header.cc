#include <cerrno>
#include <cstring>
#include <map>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/report.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/report_text.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector::report_text {
namespace {

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
    case CaptureMode::kNone:  // the LOST line says why
      return "NONE, CUDA calls not recorded (see LOST)";
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

}  // namespace

// Which CPython each process runs and whether its frames are read: readable interpreters on one
// line each, every process that runs one gprof-run cannot read on a line of its own.
void TextReport::PythonLines() {
  std::map<std::pair<uint32_t, std::string>, std::vector<uint32_t>> readable;
  for (const auto& [pid, python] : session_.python.processes) {
    if (python.status == GPROF_PY_READABLE) {
      readable[{python.version_hex, python.path}].push_back(pid);
      continue;
    }
    out_ << "  python    pid " << pid << " runs Python " << PythonVersionName(python.version_hex)
         << " (" << python.path << "), whose frames gprof-run cannot read"
         << (python.why.empty() ? "" : " (" + python.why + ")") << ": native stacks only\n";
  }
  for (const auto& [interpreter, pids] : readable) {
    out_ << "  python    CPython " << PythonVersionName(interpreter.first) << " ("
         << interpreter.second << "): pid" << (pids.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < std::min<size_t>(pids.size(), 8); ++i)
      out_ << (i == 0 ? "" : ", ") << pids[i];
    if (pids.size() > 8) out_ << " and " << pids.size() - 8 << " more";
    out_ << "; Python stacks read\n";
  }
  std::map<int, size_t> not_read;
  for (const auto& [key, code] : session_.python.codes) {
    if (code.error != 0) ++not_read[code.error];
  }
  for (const auto& [error, count] : not_read) {
    out_ << "  python    " << count << " code object" << (count == 1 ? "" : "s") << " not read ("
         << (error == ESRCH    ? "the process had exited"
             : error == EFAULT ? "their memory was gone"
             : error == EINVAL ? "freed before gprof-run read them"
                               : strerror(error))
         << "): their frames are shown by address\n";
  }
}
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
}

// What the kernel recorder counted instead of recording one by one, when it counted any.
void TextReport::CountedLine() {
  const CountedTotals& counted = analysis_.counted;
  const uint64_t faults = counted.quick_page_faults, fault_ns = counted.quick_page_fault_ns,
                 spins = counted.spin_contentions;
  const CountedWaitTotals& waits = counted.waits;
  if (waits.off_cpu > 0 || waits.futex > 0) {
    out_ << "  counted   " << WithThousands(waits.off_cpu) << " off-CPU intervals ("
         << FormatDuration(waits.off_cpu_ns) << " in all) and " << WithThousands(waits.futex)
         << " futex calls (" << FormatDuration(waits.futex_ns) << ") under "
         << FormatDuration(session_.counted_waits_limit_ns)
         << ": per thread and reason, not recorded one by one (--count-under)\n";
  }
  if (session_.trace_detail_under_ns != 0) {
    out_ << "  trace     less detail: off-CPU intervals and futex calls under "
         << FormatDuration(session_.trace_detail_under_ns)
         << " only counted (counter tracks); at full detail it would take about "
         << session_.trace_full_bytes / 1'000'000 << " MB, more than the Perfetto UI opens well\n";
  }
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
    out_ << "  command   " << CommandLineText(meta.command, kCommandShownBytes);
    if (meta.root_pid != 0) out_ << "  (pid " << meta.root_pid << ")";
    out_ << "\n";
  }
  if (meta.attach) out_ << "  attached  " << AttachedText(meta) << "\n";
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
  const size_t processes = session_.RecordedProcessCount();
  out_ << "  recorded  " << processes << (processes == 1 ? " process, " : " processes, ")
       << session_.threads.size() << " threads, " << WithThousands(session_.api_calls.size())
       << " CUDA calls, " << WithThousands(session_.off_cpu.size()) << " off-CPU intervals, "
       << WithThousands(session_.futex_calls.size()) << " futex calls";
  // What only a kernel recorder that sees them records: said when there are some. A device
  // wait is one on a device file --device-prefix selects: an epoll wait names none (what it
  // watched is not read), so it is a poll, not a device wait.
  const size_t device_waits =
      std::count_if(session_.device_waits.begin(), session_.device_waits.end(),
                    [](const DeviceWait& wait) { return !wait.device.empty(); });
  const std::pair<size_t, const char*> kernel_facts[] = {
      {session_.futex_waitv_calls.size(), " futex_waitv calls"},
      {session_.lock_waits.size(), " kernel lock waits"},
      {device_waits, " device waits"},
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
  if (std::string flight = FlightHeldText(session_); !flight.empty()) {
    out_ << "  flight    " << flight << "\n";  // its one window is the span it held
    out_ << "  trigger   " << FlightEndText(session_) << "\n";
  } else if (std::string capture = CaptureText(session_); !capture.empty()) {
    out_ << "  range     " << capture << "\n";
    constexpr size_t kShownWindows = 20;  // the rest are in report.json and the trace
    size_t windows = session_.meta.capture->windows.size();
    for (size_t i = 0; i < std::min(windows, kShownWindows); ++i)
      out_ << "  window " << i + 1 << "  " << CaptureWindowText(session_, i) << "\n";
    if (windows > kShownWindows)
      out_ << "  ...       " << windows - kShownWindows
           << " more windows: report.json lists them\n";
    if (std::string tail = CaptureTailText(session_); !tail.empty())
      out_ << "  after     " << tail << "\n";
  }
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
         << "\n            (calls below are timed, but not explained, and have no Python "
            "stacks: those are read by the kernel recorder too)\n";
  }
  PythonLines();
  bool lost_any = false;
  for (const auto& lost : session_.lost) lost_any |= lost.Any();
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
  StillRunningLines();
  NestedLines();
  if (!lost_any && session_.recording_stops.empty() && session_.unrecorded_processes.empty() &&
      meta.running_at_end.empty() && meta.nested_sessions.empty()) {
    out_ << "  lost      nothing\n";
  } else {
    for (const auto& lost : session_.lost) {
      if (!lost.Any()) continue;
      out_ << "  LOST      " << lost.Text();
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
  for (const auto& output : session_.outputs_not_written)
    out_ << "  UNWRITTEN " << output.file << ": " << output.reason << "\n";
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

// The gprof-runs started inside the command: their calls are in their own sessions.
void TextReport::NestedLines() {
  for (const NestedSession& nested : session_.meta.nested_sessions)
    out_ << "  NESTED    " << NestedSessionText(nested) << "\n";
}

// The processes of the tree that outlived the command (its own process ended first): gprof-run
// stopped recording them then, and a file still open when the report was made may yet change.
void TextReport::StillRunningLines() {
  const SessionMeta& meta = session_.meta;
  for (const SessionMeta::Running& process : meta.running_at_end) {
    out_ << "  RUNNING   pid " << process.pid;
    if (auto thread = session_.threads.find(process.pid);
        thread != session_.threads.end() && !thread->second.name.empty()) {
      out_ << " (" << thread->second.name << ")";
    }
    out_ << " outlived the command: not recorded after";
    if (meta.end_monotonic_ns > meta.start_monotonic_ns && meta.start_monotonic_ns != 0) {
      out_ << " its end at +" << FormatDuration(meta.end_monotonic_ns - meta.start_monotonic_ns);
    } else {
      out_ << " its end";
    }
    if (process.still_writing) {
      out_ << "; its file inject-" << process.pid
           << "*.gpr was still open when this report was made and may change after it";
    }
    out_ << "\n";
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

}  // namespace gprof::collector::report_text
