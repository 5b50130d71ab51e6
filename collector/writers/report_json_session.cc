#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/report.h"
#include "collector/writers/report_json_parts.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector::report_json {

const char* CaptureModeName(CaptureMode mode) {
  switch (mode) {
    case CaptureMode::kCupti:
      return "cupti";
    case CaptureMode::kInterposition:
      return "interposition";
    case CaptureMode::kNone:
      return "none";
    case CaptureMode::kUnknown:
      break;
  }
  return "unknown";
}

json ProcessJson(const Session& session, const Process& process) {
  json offsets = json::array();
  for (const ClockOffset& offset : process.clock_offsets) {
    offsets.push_back({{"time_ns", offset.time_ns},
                       {"offset_ns", offset.offset_ns},
                       {"uncertainty_ns", offset.uncertainty_ns}});
  }
  json entry = {{"pid", process.pid},
                {"ppid", process.ppid},
                {"label", session.ProcessLabel(process.pid)},
                {"exe", process.exe},
                {"capture",
                 {{"mode", CaptureModeName(process.capture.mode)},
                  {"cupti_version", process.capture.cupti_version},
                  {"note", process.capture.note}}},
                {"clock_offsets", std::move(offsets)},
                {"dropped_records", process.dropped_records},
                {"gpu_dropped_records", process.gpu_dropped_records}};
  // Only in a job's processes (the launcher's variables set): other reports stay as they were.
  if (process.rank) {
    auto number = [](const std::optional<uint32_t>& value) {
      return value ? json(*value) : json(nullptr);
    };
    entry["rank"] = number(process.rank->rank);
    entry["local_rank"] = number(process.rank->local_rank);
    entry["world_size"] = number(process.rank->world_size);
    entry["rank_variable"] = process.rank->variable;
    if (process.rank->inferred) entry["rank_inferred"] = true;
  }
  return entry;
}

// --delay / --duration, or null when the whole run was recorded.
json WindowJson(const Session& session) {
  if (!session.meta.window) return nullptr;
  const SessionMeta::Window& window = *session.meta.window;
  return {{"delay_s", window.delay_s},
          {"duration_s", window.duration_s > 0 ? json(window.duration_s) : json(nullptr)},
          {"start_monotonic_ns", window.start_monotonic_ns},
          {"end_monotonic_ns",
           window.end_monotonic_ns != 0 ? json(window.end_monotonic_ns) : json(nullptr)},
          {"text", WindowText(session)}};
}

// --capture-range and its windows, or null without one.
json CaptureJson(const Session& session) {
  if (!session.meta.capture) return nullptr;
  const SessionMeta::Capture& capture = *session.meta.capture;
  json windows = json::array();
  for (size_t i = 0; i < capture.windows.size(); ++i) {
    const CaptureWindow& window = capture.windows[i];
    windows.push_back(
        {{"start_monotonic_ns", window.start_monotonic_ns},
         {"end_monotonic_ns",
          window.end_monotonic_ns != 0 ? json(window.end_monotonic_ns) : json(nullptr)},
         {"opened_by", window.opened_by},
         {"closed_by", window.closed_by},
         {"open_pid", window.open_pid},
         {"close_pid", window.close_pid},
         {"text", CaptureWindowText(session, i)}});
  }
  json flight = nullptr;
  if (const auto& kept = capture.flight) {
    auto [start, end] = FlightSpan(session);
    flight = {{"keep_ns", kept->keep_ns},
              {"freeze_trigger_ns", kept->freeze_ns},
              {"hang_trigger_ns", kept->hang_ns},
              {"ended_by", kept->ended_by},
              {"fired_monotonic_ns",
               kept->fired_monotonic_ns != 0 ? json(kept->fired_monotonic_ns) : json(nullptr)},
              {"duration_ns", kept->duration_ns},
              {"pid", kept->pid},
              {"tid", kept->tid},
              {"freeze_kind", kept->ended_by == "freeze" ? json(kept->freeze_kind) : json(nullptr)},
              {"threads", kept->threads},
              {"held_start_monotonic_ns", start},
              {"held_end_monotonic_ns", end},
              {"trimmed_chunks", session.trimmed_chunks},
              {"trimmed_bytes", session.trimmed_bytes},
              {"text", FlightText(session)}};
  }
  return {{"range", capture.range},
          {"flight", flight},
          {"windows", windows},
          {"refused_opens", capture.refused_opens},
          {"text", CaptureText(session)},
          {"after_text", CaptureTailText(session)}};
}

// gprof-run -p: the running processes recorded and what ended it, or null for a launched command.
json AttachJson(const Session& session) {
  if (!session.meta.attach) return nullptr;
  const AttachedRecording& attach = *session.meta.attach;
  return {{"pids", attach.pids},
          {"processes", attach.processes},
          {"ended", attach.ended.empty() ? json(nullptr) : json(attach.ended)},
          {"text", AttachedText(session.meta)}};
}

// --max-size and what it cut, or null without a cap.
json MaxSizeJson(const Session& session) {
  if (!session.meta.max_size) return nullptr;
  const SessionMeta::MaxSize& cap = *session.meta.max_size;
  return {{"limit_bytes", cap.limit_bytes},
          {"used_bytes", cap.used_bytes},
          {"stopped", cap.stopped_at_monotonic_ns != 0},
          {"stopped_at_monotonic_ns",
           cap.stopped_at_monotonic_ns != 0 ? json(cap.stopped_at_monotonic_ns) : json(nullptr)},
          {"refused_records", cap.refused_records},
          {"refused_bytes", cap.refused_bytes},
          {"text", MaxSizeText(session)}};
}

// The processes that loaded CUDA without the injected library (unrecorded_processes.h).
json UnwrittenOutputsJson(const Session& session) {
  json outputs = json::array();
  for (const auto& output : session.outputs_not_written)
    outputs.push_back({{"file", output.file}, {"reason", output.reason}});
  return outputs;
}

json UnrecordedProcessesJson(const Session& session) {
  json processes = json::array();
  for (const UnrecordedProcess& process : session.unrecorded_processes) {
    processes.push_back(
        {{"pid", process.pid},
         {"name", process.name},
         {"cuda_library", process.cuda_library},
         {"seen_ns", process.seen_ns},
         {"forked_from", process.forked_from == 0 ? json(nullptr) : json(process.forked_from)},
         {"evidence", process.evidence},
         {"reason", process.reason}});
  }
  return processes;
}

// The Python interpreters of the processes, and what the record holds of their stacks.
// The kernel recorder's native stack copies: how many, and what unwinding them cost here.
json NativeStacksJson(const Session& session) {
  const NativeStackRecord& native = session.native;
  size_t cut_short = 0, truncated = 0, deepest = 0;
  for (const NativeStack& stack : native.stack_set) {
    cut_short += stack.cut_short.empty() ? 0 : 1;
    truncated += stack.cut_short.starts_with("truncated") ? 1 : 0;
    deepest = std::max(deepest, stack.ips.size());
  }
  return Object({{"samples", native.samples.size()},
                 {"wakers", native.wakers.size()},
                 {"distinct_stacks", native.stack_set.size()},
                 {"distinct_stacks_cut_short", cut_short},
                 {"distinct_stacks_truncated", truncated},  // deeper than the bytes copied
                 {"deepest_frames", deepest},
                 {"record_bytes", native.record_bytes},
                 {"unwound", native.unwound},
                 {"unwind_ns", native.unwind_ns}});
}

json PythonJson(const Session& session) {
  json processes = json::array();
  for (const auto& [pid, python] : session.python.processes) {
    const char* status = python.status == GPROF_PY_READABLE      ? "read"
                         : python.status == GPROF_PY_UNSUPPORTED ? "unsupported"
                                                                 : "no_layout";
    processes.push_back(Object({{"pid", pid},
                                {"version", PythonVersionName(python.version_hex)},
                                {"interpreter", python.path},
                                {"stacks", status},
                                {"why", python.why.empty() ? json(nullptr) : json(python.why)}}));
  }
  size_t unnamed = 0;
  for (const auto& [key, code] : session.python.codes) unnamed += code.error != 0;
  return Object({{"processes", std::move(processes)},
                 {"stacks", session.python.stacks.size()},
                 {"code_objects", session.python.codes.size()},
                 {"code_objects_not_read", unnamed}});
}

// What was lost, each with its count where known and per CPU.
json LostJson(const Session& session) {
  json lost = json::array();
  for (const auto& entry : session.lost) {
    json by_cpu = json::array();
    for (const auto& [cpu, count] : entry.by_cpu) {
      by_cpu.push_back({{"cpu", cpu == kAllCpus ? json(nullptr) : json(cpu)}, {"count", count}});
    }
    lost.push_back({{"what", entry.what},
                    {"count", entry.count_known ? json(entry.count) : json(nullptr)},
                    {"by_cpu", std::move(by_cpu)}});
  }
  return lost;
}

// The files whose recording stopped early, and why.
json RecordingStopsJson(const Session& session) {
  json stops = json::array();
  for (const auto& stop : session.recording_stops) {
    stops.push_back({{"file", stop.file},
                     {"pid", stop.pid == 0 ? json(nullptr) : json(stop.pid)},
                     {"time_ns", stop.time_ns},
                     {"cause", stop.cause},
                     {"description", stop.description},
                     {"records_lost", stop.records_lost}});
  }
  return stops;
}

// The gprof-runs started inside the command.
json NestedSessionsJson(const Session& session) {
  json nested = json::array();
  for (const NestedSession& session_there : session.meta.nested_sessions) {
    nested.push_back({{"pid", session_there.pid},
                      {"directory", session_there.directory},
                      {"calls", session_there.calls ? json(*session_there.calls) : json(nullptr)},
                      {"text", NestedSessionText(session_there)}});
  }
  return nested;
}

// Every thread, with what the kernel recorder counted of it instead of recording one by one.
json ThreadsJson(const Session& session, const CountedTotals& counted) {
  json threads = json::array();
  const CountedWaitTotals none;
  for (const auto& [tid, thread] : session.threads) {
    auto python_name = session.python.thread_names.find(tid);
    auto of_thread = counted.by_thread.find(tid);
    const CountedWaitTotals& mine = of_thread != counted.by_thread.end() ? of_thread->second : none;
    threads.push_back({{"tid", tid},
                       {"pid", thread.pid},
                       {"name", thread.name},
                       {"python_name", python_name != session.python.thread_names.end()
                                           ? json(python_name->second)
                                           : json(nullptr)},
                       {"label", session.ThreadLabel(tid)},
                       {"quick_page_faults", thread.quick_page_faults},
                       {"quick_page_fault_ns", thread.quick_page_fault_ns},
                       {"short_off_cpu_intervals", mine.off_cpu},
                       {"short_off_cpu_ns", mine.off_cpu_ns},
                       {"short_futex_calls", mine.futex},
                       {"short_futex_ns", mine.futex_ns}});
  }
  return threads;
}

// What the kernel recorder counted instead of recording one by one.
json CountedJson(const Session& session, const CountedTotals& counted) {
  const uint64_t quick_faults = counted.quick_page_faults;
  const uint64_t quick_fault_ns = counted.quick_page_fault_ns;
  const uint64_t spins = counted.spin_contentions;
  const CountedWaitTotals& waits = counted.waits;
  json spins_by_cpu = json::array();
  for (const auto& [cpu, count] : session.spin_contention_by_cpu) {
    spins_by_cpu.push_back(
        {{"cpu", cpu == kAllCpus ? json(nullptr) : json(cpu)}, {"count", count}});
  }
  return {{"quick_page_faults",
           {{"count", quick_faults},
            {"total_ns", quick_fault_ns},
            {"under_ns", session.quick_page_fault_limit_ns}}},
          {"spin_lock_contentions", {{"count", spins}, {"by_cpu", std::move(spins_by_cpu)}}},
          {"short_off_cpu_intervals",
           {{"count", waits.off_cpu},
            {"total_ns", waits.off_cpu_ns},
            {"under_ns", session.counted_waits_limit_ns}}},
          {"short_futex_calls",
           {{"count", waits.futex},
            {"total_ns", waits.futex_ns},
            {"under_ns", session.counted_waits_limit_ns}}}};
}

json SessionJson(const Session& session, const Analysis& analysis) {
  const SessionMeta& meta = session.meta;
  const CountedTotals& counted = analysis.counted;
  const CountedWaitTotals& waits = counted.waits;
  json running = json::array();
  for (const auto& process : meta.running_at_end) {
    running.push_back({{"pid", process.pid}, {"still_writing", process.still_writing}});
  }
  json diagnostics = json::array();
  for (const auto& d : session.diagnostics) {
    diagnostics.push_back({{"file", d.file}, {"offset", d.offset}, {"message", d.message}});
  }
  json processes = json::array();
  for (const auto& [pid, process] : session.processes)
    processes.push_back(ProcessJson(session, process));
  return {{"directory", session.directory},
          {"command", meta.command},
          {"root_pid", meta.root_pid},
          {"start_monotonic_ns", meta.start_monotonic_ns},
          {"end_monotonic_ns", meta.end_monotonic_ns},
          {"exit_code", Optional(meta.exit_code)},
          {"exit_signal", Optional(meta.exit_signal)},
          {"cut_short", meta.cut_short.empty() ? json(nullptr)
                                               : json{{"cause", meta.cut_short},
                                                      {"description", meta.cut_short_text}}},
          {"kernel_recording", meta.kernel_recording},
          {"kernel_recording_note", meta.kernel_recording_note},
          {"kernel_stack_min_ns", meta.kernel_stack_min_ns},
          {"trace_detail", session.trace_detail_under_ns == 0
                               ? json(nullptr)
                               : json{{"counted_under_ns", session.trace_detail_under_ns},
                                      {"full_detail_bytes_estimate", session.trace_full_bytes}}},
          {"window", WindowJson(session)},
          {"capture", CaptureJson(session)},
          {"attach", AttachJson(session)},
          {"max_size", MaxSizeJson(session)},
          {"counts",
           {{"processes", session.RecordedProcessCount()},
            {"threads", session.threads.size()},
            {"cuda_calls", session.api_calls.size()},
            {"off_cpu_intervals", session.off_cpu.size()},
            {"futex_calls", session.futex_calls.size()},
            {"futex_waitv_calls", session.futex_waitv_calls.size()},
            {"kernel_lock_waits", session.lock_waits.size()},
            {"device_waits", session.device_waits.size()},
            {"slow_page_faults", session.page_faults.size()},
            {"memory_map_calls", session.memory_map_calls.size()},
            {"gpu_activities", session.gpu_activities.size()},
            {"quick_page_faults", counted.quick_page_faults},
            {"spin_lock_contentions", counted.spin_contentions},
            {"short_off_cpu_intervals", waits.off_cpu},
            {"short_futex_calls", waits.futex}}},
          {"counted", CountedJson(session, counted)},
          {"lost", LostJson(session)},
          {"recording_stopped", RecordingStopsJson(session)},
          {"unrecorded_processes", UnrecordedProcessesJson(session)},
          {"running_at_end", std::move(running)},
          {"nested_sessions", NestedSessionsJson(session)},
          {"diagnostics", std::move(diagnostics)},
          {"messages", session.messages},
          {"outputs_not_written", UnwrittenOutputsJson(session)},
          {"processes", std::move(processes)},
          {"threads", ThreadsJson(session, counted)},
          {"python", PythonJson(session)},
          {"native_stacks", NativeStacksJson(session)}};
}

json GpuSummaryJson(const Session& session, const GpuSummary& gpu) {
  json kernels = json::array();
  for (const KernelTotal& kernel : gpu.kernels_by_time) {
    kernels.push_back({{"name", session.kernel_names[kernel.name_index]},
                       {"count", kernel.count},
                       {"total_ns", kernel.total_ns}});
  }
  json devices = json::array();
  for (const GpuDevice& device : gpu.devices) {
    devices.push_back({{"device", device.ordinal},
                       {"uuid", device.uuid.empty() ? json(nullptr) : json(device.uuid)},
                       {"name", GpuDeviceName(device, gpu.devices)},
                       {"pids", device.pids},
                       {"first_ns", device.first_ns},
                       {"last_ns", device.last_ns},
                       {"busy_ns", device.busy_ns},
                       {"idle_ns", device.idle_ns()}});
  }
  return {{"kernels_total", gpu.kernels},
          {"copies", gpu.copies},
          {"memsets", gpu.memsets},
          {"synchronizations", gpu.synchronizations},
          {"launch_calls", gpu.launch_calls},
          {"launch_calls_with_kernel", gpu.launch_calls_with_kernel},
          {"launch_calls_captured", gpu.launch_calls_captured},
          {"graph_launches", gpu.graph_launches},
          {"graph_kernels", gpu.graph_kernels},
          {"kernels", std::move(kernels)},
          {"devices", std::move(devices)}};
}

// The tables of report.txt, every row: CUDA API calls and GPU kernels by name.
json TablesJson(const Session& session) {
  json calls = json::array();
  for (const ApiCallRow& row : ApiCallTable(session)) {
    calls.push_back({{"name", row.name},
                     {"count", row.count},
                     {"total_ns", row.total_ns},
                     {"median_ns", row.median_ns},
                     {"max_ns", row.max_ns},
                     {"blocked_ns", row.blocked_ns}});
  }
  json kernels = json::array();
  for (const KernelRow& row : KernelTable(session)) {
    kernels.push_back({{"name", row.name},
                       {"count", row.count},
                       {"total_ns", row.total_ns},
                       {"median_ns", row.median_ns},
                       {"max_ns", row.max_ns}});
  }
  return {{"cuda_api_calls", std::move(calls)}, {"gpu_kernels", std::move(kernels)}};
}

}  // namespace gprof::collector::report_json
