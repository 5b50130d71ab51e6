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
#include "collector/writers/report_tables.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector {
namespace {

using nlohmann::json;

// An object from a braced list of fields, Object({{"key", value}, ...}). nlohmann's own braced
// lists make a two-element array and a heap string of each field before moving them into the
// object, about four allocations a field where this takes one or two; report.json's thousands of
// waits made that a good part of the collector's time. The same object either way (a repeated
// key keeps its first value). `value` is mutable so that it moves out of the list's const element.
struct Field {
  const char* key;
  mutable json value;
};
json Object(std::initializer_list<Field> fields) {
  json object = json::object();
  for (const Field& field : fields) object.emplace(field.key, std::move(field.value));
  return object;
}

json Optional(const std::optional<int>& value) { return value ? json(*value) : json(nullptr); }

json ThreadRef(const Session& session, uint32_t tid) {
  return Object({{"tid", tid}, {"name", session.ThreadName(tid)}, {"label", session.ThreadLabel(tid)}});
}

json PythonFrameJson(const PythonFrame& frame) {
  return Object({{"kind", "python"},
                 {"file", frame.named ? json(frame.file) : json(nullptr)},
                 {"line", frame.line ? json(*frame.line) : json(nullptr)},
                 {"function", frame.named ? json(frame.function) : json(nullptr)},
                 {"own_code", IsProgramFrame(frame)},
                 {"text", PythonFrameText(frame)},
                 {"code_object", FormatHex(frame.code)},
                 {"offset", frame.offset}});
}

// A Python stack the kernel recorder read, its frames named, innermost first; null if none.
json PythonStackJson(const Session& session, const PythonStack* stack,
                     ResolvedPythonStack* resolved = nullptr) {
  if (stack == nullptr) return nullptr;
  ResolvedPythonStack python = ResolvePythonStack(session, *stack);
  json frames = json::array();
  for (const PythonFrame& frame : python.frames) frames.push_back(PythonFrameJson(frame));
  json out = Object({{"tid", stack->tid},
                     {"time_ns", stack->time_ns},
                     {"frames", std::move(frames)},
                     {"incomplete", python.incomplete},
                     {"truncated", python.truncated}});
  if (resolved != nullptr) *resolved = std::move(python);
  return out;
}

json MergedStackJson(const std::vector<MergedFrame>& merged) {
  if (merged.empty()) return nullptr;
  json frames = json::array();
  for (const MergedFrame& frame : merged) {
    if (frame.python) {
      frames.push_back(PythonFrameJson(frame.python_frame));
    } else {
      json native = Object({{"kind", "native"}, {"text", frame.text}});
      if (!frame.module.empty()) native["module"] = frame.module;
      if (frame.address != 0) native["address"] = FormatHex(frame.address);
      frames.push_back(std::move(native));
    }
  }
  return frames;
}

// A user stack with the Python frames merged in at the eval loop (py-spy --native's view), or
// null when neither was recorded.
json UserAndPythonJson(const Session& session, uint32_t pid, int32_t stack_id, uint64_t time_ns,
                       const ResolvedPythonStack* python) {
  return MergedStackJson(MergeStacks(session, pid, stack_id, time_ns, python));
}

json CallJson(const Session& session, const ApiCall* call) {
  if (call == nullptr) return nullptr;
  json out = Object({{"api", session.ApiName(*call)},
                     {"tid", call->tid},
                     {"pid", call->pid},
                     {"enter_ns", call->enter_ns},
                     {"exit_ns", call->exit_ns},
                     {"duration_ns", call->duration()},
                     {"return_code", call->return_code}});
  if (call->flags & format::kApiCallHasStream) out["stream"] = FormatHex(call->stream);
  return out;
}

// The kind-specific fields of a GPU activity.
struct ActivityDetailJson {
  json operator()(const GpuKernel& kernel) const {
    return {{"kind", "kernel"},
            {"grid", kernel.grid},
            {"block", kernel.block},
            {"registers_per_thread", kernel.registers_per_thread},
            {"shared_memory_bytes", kernel.shared_memory_bytes}};
  }
  json operator()(const GpuMemcpy& copy) const {
    return {{"kind", "memcpy"},
            {"copy_kind", MemcpyKindName(copy.copy_kind)},
            {"bytes", copy.bytes},
            {"from", MemoryKindName(copy.src_kind)},
            {"to", MemoryKindName(copy.dst_kind)},
            {"async", copy.async}};
  }
  json operator()(const GpuMemset& memset) const {
    return {{"kind", "memset"},
            {"bytes", memset.bytes},
            {"value", memset.value},
            {"memory", MemoryKindName(memset.memory_kind)},
            {"async", memset.async}};
  }
  json operator()(const GpuSync& sync) const {
    return {
        {"kind", "synchronization"}, {"type", SyncTypeName(sync.type)}, {"event", sync.event_id}};
  }
};

json ActivityJson(const Session& session, const GpuActivity* activity) {
  if (activity == nullptr) return nullptr;
  json out = std::visit(ActivityDetailJson{}, activity->detail);
  out["name"] = GpuActivityName(session, *activity);
  out["pid"] = activity->pid;
  out["device"] = activity->device_id;
  out["context"] = activity->context_id;
  out["stream"] = activity->stream_id == kNoStream ? json(nullptr) : json(activity->stream_id);
  out["start_ns"] = activity->start_ns;
  out["end_ns"] = activity->end_ns;
  out["duration_ns"] = activity->duration();
  out["correlation_id"] = activity->correlation_id;
  if (activity->graph_id != 0) {
    out["graph_id"] = activity->graph_id;
    out["graph_node_id"] = activity->graph_node_id;
  }
  return out;
}

json GpuJson(const Session& session, const std::optional<GpuDuringCall>& gpu,
             const std::string& window) {
  if (!gpu) return nullptr;
  json own_work = json::array();
  for (const GpuActivity* activity : gpu->own_work)
    own_work.push_back(ActivityJson(session, activity));
  return Object(
      {{"window_ns", gpu->window_ns},
       {"busy_ns", gpu->busy_ns},
       {"busy_fraction", gpu->window_ns == 0 ? 0.0 : double(gpu->busy_ns) / gpu->window_ns},
       {"description", DescribeGpuDuring(session, *gpu, window)},
       {"main_activity", ActivityJson(session, gpu->main_activity)},
       {"main_overlap_ns", gpu->main_overlap_ns},
       {"main_launcher", CallJson(session, gpu->main_launcher)},
       {"own_work", std::move(own_work)}});
}

// Every frame of the native stack recorded at the call's exit, innermost first; null if none.
json NativeStackJson(const Session& session, const ApiCall* call) {
  const NativeStack* stack = call != nullptr ? session.CallStackOf(*call) : nullptr;
  if (stack == nullptr) return nullptr;
  return NativeStackFrames(session, *stack);
}

// The Python stack of a slow CUDA call (taken at its exit), and its native stack with it merged.
void AddCallPythonJson(const Session& session, const ApiCall* call, json* out) {
  const PythonStack* python =
      call != nullptr ? session.python.CudaCall(call->tid, call->enter_ns) : nullptr;
  ResolvedPythonStack resolved;
  (*out)["python_stack"] = PythonStackJson(session, python, &resolved);
  const NativeStack* native = call != nullptr ? session.CallStackOf(*call) : nullptr;
  std::vector<std::string> texts;
  if (native != nullptr) texts = NativeStackFrames(session, *native);
  (*out)["stack"] =
      MergedStackJson(MergeFrameTexts(texts, python != nullptr ? &resolved : nullptr));
}

const char* WaitKindName(WaitKind kind) {
  switch (kind) {
    case WaitKind::kFutex:
      return "futex";
    case WaitKind::kKernelLock:
      return "kernel_lock";
    case WaitKind::kDevice:
      return "device";
    case WaitKind::kPageFault:
      return "page_fault";
    case WaitKind::kKernelFunction:
      break;
  }
  return "kernel_function";
}

json ObjectJson(const Session& session, const std::optional<WaitObject>& object) {
  if (!object) return nullptr;
  json out = Object({{"kind", WaitKindName(object->kind)},
                     {"pid", object->pid},
                     {"kernel_function", object->kernel_function},
                     {"description", DescribeWaitObject(session, *object)}});
  switch (object->kind) {
    case WaitKind::kFutex:
      out["futex_address"] = FormatHex(object->address);
      out["location"] = DescribeAddress(session, object->pid, object->address, object->seen_ns);
      break;
    case WaitKind::kKernelLock:
      out["lock_address"] = FormatHex(object->address);
      out["lock_kind"] = LockKindName(object->lock_flags);
      out["mmap_lock"] = (object->lock_flags & GPROF_LOCK_MMAP_LOCK) != 0;
      break;
    case WaitKind::kDevice:
      out["call"] = DeviceCallName(object->device_call);
      out["device"] = object->device;
      break;
    case WaitKind::kPageFault:
      out["address"] = FormatHex(object->address);
      out["location"] = DescribeAddress(session, object->pid, object->address, object->seen_ns);
      break;
    case WaitKind::kKernelFunction:
      break;
  }
  return out;
}

json UserStackJson(const Session& session, uint32_t pid, int32_t stack_id, uint64_t time_ns) {
  std::vector<std::string> frames = UserStackFrames(session, pid, stack_id, time_ns);
  return frames.empty() ? json(nullptr) : json(std::move(frames));
}

// The repeated blocks of a stack UserStackJson made (FindFrameRepeats), which the text and the
// trace show once each: the stack keeps every frame. Null with the stack.
json FrameRepeatsJson(const json& stack) {
  if (!stack.is_array()) return nullptr;
  json repeats = json::array();
  for (const FrameRepeat& repeat : FindFrameRepeats(stack.get<std::vector<std::string>>())) {
    repeats.push_back(
        Object({{"first", repeat.first}, {"frames", repeat.length}, {"times", repeat.times}}));
  }
  return repeats;
}

json MemoryMapCallJson(const MemoryMapCall* call) {
  if (call == nullptr) return nullptr;
  return Object({{"syscall", MemorySyscallName(call->syscall)},
                 {"tid", call->tid},
                 {"address", FormatHex(call->address)},
                 {"length", call->length},
                 {"start_ns", call->start_ns},
                 {"end_ns", call->end_ns},
                 {"return", call->ret}});
}

json KernelLockJson(const Session& session, const Wait& wait) {
  const LockWait* lock = wait.kernel_lock;
  if (lock == nullptr) return nullptr;
  return Object({{"address", FormatHex(lock->lock_address)},
                 {"kind", LockKindName(lock->flags)},
                 {"mmap_lock", lock->is_mmap_lock()},
                 {"start_ns", lock->start_ns},
                 {"end_ns", lock->end_ns},
                 {"return", lock->ret},
                 {"owner_tid", lock->owner_tid},
                 {"owner_pid", lock->owner_pid},
                 {"owner", LockOwnerLabel(session, *lock)},
                 {"owner_inferred", lock->owner_inferred},
                 {"owner_hint_stale", wait.owner_hint_stale},
                 {"owner_memory_call", MemoryMapCallJson(wait.owner_memory_call)},
                 {"owner_call", CallJson(session, wait.owner_call)},
                 {"kernel_stack", session.KernelStack(lock->kstack_id)}});
}

json DeviceWaitJson(const DeviceWait* device) {
  if (device == nullptr) return nullptr;
  return Object({{"call", DeviceCallName(device->call)},
                 {"device", device->device},
                 {"fd", device->fd},
                 {"request", FormatHex(device->request)},
                 {"start_ns", device->start_ns},
                 {"end_ns", device->end_ns},
                 {"return", device->ret}});
}

json PageFaultJson(const Session& session, const PageFault* fault) {
  if (fault == nullptr) return nullptr;
  return Object(
      {{"address", FormatHex(fault->address)},
       {"location", DescribeAddress(session, fault->pid, fault->address, fault->start_ns)},
       {"write", fault->is_write()},
       {"major", fault->is_major()},
       {"flags", FormatHex(fault->flags)},
       {"result", FormatHex(fault->result)},
       {"start_ns", fault->start_ns},
       {"end_ns", fault->end_ns}});
}

json WaitFieldsJson(const Session& session, const Wait& wait) {
  ResolvedPythonStack waiter, waker;
  json python_stack = PythonStackJson(session, wait.python_stack, &waiter);
  json waker_python_stack = PythonStackJson(session, wait.waker_python_stack, &waker);
  return Object(
      {{"start_ns", wait.start_ns},
       {"wake_ns", wait.wake_ns},
       {"end_ns", wait.end_ns},
       {"asleep_ns", wait.state == OffCpuState::kRunnable ? 0 : wait.asleep_ns()},
       {"state", StateName(wait.state)},
       {"class", WaitClassName(wait.wait_class)},
       {"object", ObjectJson(session, wait.object)},
       {"kernel_stack", session.KernelStack(wait.kstack_id)},
       {"user_stack", UserStackJson(session, wait.pid, wait.user_stack_id, wait.start_ns)},
       {"kernel_lock", KernelLockJson(session, wait)},
       {"device_wait", DeviceWaitJson(wait.device_wait)},
       {"page_fault", PageFaultJson(session, wait.page_fault)},
       {"ended_by_exit", wait.ended_by_exit},
       {"exit_tid", wait.ended_by_exit ? json(wait.exit_tid) : json(nullptr)},
       {"waker_tid", wait.waker_tid},
       {"waker_comm", wait.waker_comm},
       {"waker_call", CallJson(session, wait.waker_call)},
       {"waker_user_stack",
        [&] {
          std::vector<std::string> frames =
              WakerStackFrames(session, wait.waker_native_stack, wait.waker_pid,
                               wait.waker_user_stack_id, wait.wake_ns);
          return frames.empty() ? json(nullptr) : json(std::move(frames));
        }()},
       {"python_stack", std::move(python_stack)},
       {"waker_python_stack", std::move(waker_python_stack)},
       {"stack", UserAndPythonJson(session, wait.pid, wait.user_stack_id, wait.start_ns,
                                   wait.python_stack != nullptr ? &waiter : nullptr)},
       {"waker_stack",
        UserAndPythonJson(session, wait.waker_pid, wait.waker_user_stack_id, wait.wake_ns,
                          wait.waker_python_stack != nullptr ? &waker : nullptr)}});
}

json WaitJson(const Session& session, const Wait& wait) {
  json out = WaitFieldsJson(session, wait);
  out["user_stack_repeats"] = FrameRepeatsJson(out["user_stack"]);
  out["waker_user_stack_repeats"] = FrameRepeatsJson(out["waker_user_stack"]);
  return out;
}

// `freeze_number`: the index of the freeze it was blocked in among the top level's freezes, or -1.
json BlockedCallJson(const Session& session, const BlockedCall& blocked, int freeze_number) {
  json waits = json::array();
  for (const Wait& wait : blocked.waits) waits.push_back(WaitJson(session, wait));
  json out = CallJson(session, blocked.call);
  out["thread"] = ThreadRef(session, blocked.call->tid)["name"];
  out["on_cpu_ns"] = blocked.on_cpu_ns;
  out["runnable_ns"] = blocked.runnable_ns;
  out["asleep_ns"] = blocked.asleep_ns;
  out["main_wait"] = ObjectJson(session, blocked.main_object);
  out["main_wait_ns"] = blocked.main_object_ns;
  out["freeze"] = freeze_number >= 0 ? json(freeze_number) : json(nullptr);
  out["waits"] = std::move(waits);
  out["gpu"] = GpuJson(session, blocked.gpu, "the call");
  out["native_stack"] = NativeStackJson(session, blocked.call);
  AddCallPythonJson(session, blocked.call, &out);
  return out;
}

json NativeFrameJson(const NativeFrame& frame) {
  return Object({{"function", frame.function},
                 {"module", frame.module},
                 {"source", frame.source.empty() ? json(nullptr) : json(frame.source)},
                 {"program", frame.program}});
}

// What a thread ran on CPU, from the samples: the hottest native frames and Python frame.
json OnCpuJson(const OnCpuActivity& ran) {
  return Object({{"native_samples", ran.native_total},
                 {"native_hottest_samples", ran.native_samples},
                 {"native_frames", [&] {
                    json frames = json::array();
                    for (const NativeFrame& frame : ran.frames)
                      frames.push_back(NativeFrameJson(frame));
                    return frames;
                  }()},
                 {"python_samples", ran.python_total},
                 {"python_hottest_samples", ran.python_samples},
                 {"python_frame", ran.python ? json(PythonFrameText(*ran.python)) : json(nullptr)},
                 {"text", OnCpuWords(ran)}});
}

json HolderJson(const Session& session, const std::optional<HolderActivity>& holder) {
  if (!holder) return nullptr;
  json out = ThreadRef(session, holder->tid);
  out["call"] = CallJson(session, holder->call);
  out["hold_start_ns"] = holder->hold_start_ns;
  out["release_ns"] = holder->release_ns;
  out["on_cpu_ns"] = holder->on_cpu_ns;
  out["asleep_ns"] = holder->asleep_ns;
  out["runnable_ns"] = holder->runnable_ns;
  out["on_cpu"] = OnCpuJson(holder->ran);
  out["own_wait"] = ObjectJson(session, holder->own_wait);
  out["own_waker_tid"] = holder->own_waker_tid;
  out["own_waker_comm"] = holder->own_waker_comm;
  out["slow_call"] = holder->blocked_call >= 0 ? json(holder->blocked_call) : json(nullptr);
  out["gpu"] = GpuJson(session, holder->gpu, HolderGpuWindow(session, *holder));
  out["native_stack"] = NativeStackJson(session, holder->call);
  AddCallPythonJson(session, holder->call, &out);
  return out;
}

json FreezeJson(const Session& session, const Analysis& analysis, const Freeze& numbered) {
  const CallsInFreeze& freeze = *numbered.calls;
  json members = json::array();
  for (const FreezeMember& member : freeze.members) {
    const BlockedCall& blocked = analysis.blocked_calls[member.blocked_call];
    json entry = ThreadRef(session, blocked.call->tid);
    entry["slow_call"] = member.blocked_call;
    entry["api"] = session.ApiName(*blocked.call);
    entry["duration_ns"] = blocked.call->duration();
    entry["woken_by_tid"] = member.woken_by_tid;
    entry["passed_on"] = member.passed_on;
    members.push_back(std::move(entry));
  }
  return Object({{"number", numbered.number},
                 {"start_ns", freeze.start_ns},
                 {"end_ns", freeze.end_ns},
                 {"duration_ns", freeze.end_ns - freeze.start_ns},
                 {"object", ObjectJson(session, freeze.object)},
                 {"thread_count", freeze.thread_count()},
                 {"members", std::move(members)},
                 {"holder", HolderJson(session, freeze.holder)}});
}

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

json SessionJson(const Session& session, const Analysis& analysis) {
  const SessionMeta& meta = session.meta;
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
  json stops = json::array();
  for (const auto& stop : session.recording_stops) {
    stops.push_back({{"file", stop.file},
                     {"pid", stop.pid == 0 ? json(nullptr) : json(stop.pid)},
                     {"time_ns", stop.time_ns},
                     {"cause", stop.cause},
                     {"description", stop.description},
                     {"records_lost", stop.records_lost}});
  }
  json nested = json::array();
  for (const NestedSession& session_there : meta.nested_sessions) {
    nested.push_back({{"pid", session_there.pid},
                      {"directory", session_there.directory},
                      {"calls", session_there.calls ? json(*session_there.calls) : json(nullptr)},
                      {"text", NestedSessionText(session_there)}});
  }
  json running = json::array();
  for (const auto& process : meta.running_at_end) {
    running.push_back({{"pid", process.pid}, {"still_writing", process.still_writing}});
  }
  json diagnostics = json::array();
  for (const auto& d : session.diagnostics) {
    diagnostics.push_back({{"file", d.file}, {"offset", d.offset}, {"message", d.message}});
  }
  json processes = json::array();
  for (const auto& [pid, process] : session.processes) processes.push_back(ProcessJson(session, process));
  json threads = json::array();
  const CountedTotals& counted = analysis.counted;
  const CountedWaitTotals& waits = counted.waits;
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
  json spins_by_cpu = json::array();
  for (const auto& [cpu, count] : session.spin_contention_by_cpu) {
    spins_by_cpu.push_back(
        {{"cpu", cpu == kAllCpus ? json(nullptr) : json(cpu)}, {"count", count}});
  }
  const uint64_t quick_faults = counted.quick_page_faults;
  const uint64_t quick_fault_ns = counted.quick_page_fault_ns;
  const uint64_t spins = counted.spin_contentions;
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
          {"max_size", MaxSizeJson(session)},
          {"counts",
           {{"processes", session.processes.size()},
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
            {"quick_page_faults", quick_faults},
            {"spin_lock_contentions", spins},
            {"short_off_cpu_intervals", waits.off_cpu},
            {"short_futex_calls", waits.futex}}},
          {"counted",
           {{"quick_page_faults",
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
              {"under_ns", session.counted_waits_limit_ns}}}}},
          {"lost", std::move(lost)},
          {"recording_stopped", std::move(stops)},
          {"unrecorded_processes", UnrecordedProcessesJson(session)},
          {"running_at_end", std::move(running)},
          {"nested_sessions", std::move(nested)},
          {"diagnostics", std::move(diagnostics)},
          {"messages", session.messages},
          {"outputs_not_written", UnwrittenOutputsJson(session)},
          {"processes", std::move(processes)},
          {"threads", std::move(threads)},
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

const char* LinkStateName(ChainLink::State state) {
  switch (state) {
    case ChainLink::State::kAsleep:
      return "asleep";
    case ChainLink::State::kOnCpu:
      return "on_cpu";
    case ChainLink::State::kRunnable:
      return "runnable";
    case ChainLink::State::kGpu:
      return "waiting_for_gpu";
    case ChainLink::State::kExited:
      return "exited";
  }
  return "unknown";
}

const char* LinkFoundAs(const ChainLink& link) {
  if (link.creator) return "creator";
  return link.owner ? "lock_owner" : "waker";
}

// The distinct Python stacks sampled on `tid` in [start, end), most often first, with their
// counts: what an on-CPU thread was running.
json PythonSamplesJson(const Session& session, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  constexpr size_t kShown = 3;
  std::vector<const PythonStack*> samples = session.python.Samples(tid, start_ns, end_ns);
  std::vector<std::pair<size_t, const PythonStack*>> counted;  // count, an example
  for (const PythonStack* sample : samples) {
    auto same = std::find_if(counted.begin(), counted.end(), [&](const auto& entry) {
      return entry.second->frames == sample->frames;
    });
    if (same == counted.end()) {
      counted.emplace_back(1, sample);
    } else {
      ++same->first;
    }
  }
  std::stable_sort(counted.begin(), counted.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  json out = json::array();
  for (size_t i = 0; i < std::min(kShown, counted.size()); ++i) {
    out.push_back(Object(
        {{"count", counted[i].first}, {"stack", PythonStackJson(session, counted[i].second)}}));
  }
  return Object({{"samples", samples.size()}, {"stacks", std::move(out)}});
}

json LinkJson(const Session& session, const ChainLink& link) {
  return Object(
      {{"thread", ThreadRef(session, link.tid)},
       {"found_as", LinkFoundAs(link)},
       {"released", link.released},
       {"created_ns", link.created_ns != 0 ? json(link.created_ns) : json(nullptr)},
       {"start_ns", link.start_ns},
       {"end_ns", link.end_ns},
       {"state", LinkStateName(link.state)},
       {"on_cpu_ns", link.on_cpu_ns},
       {"asleep_ns", link.asleep_ns},
       {"runnable_ns", link.runnable_ns},
       {"call", CallJson(session, link.call)},
       {"call_ns", link.call_ns},
       {"other_calls_ns", link.other_calls_ns},
       {"other_calls", link.other_calls},
       {"longest_other_call", CallJson(session, link.longest_other_call)},
       {"wait", link.wait ? WaitJson(session, *link.wait) : json(nullptr)},
       {"wait_class", link.wait ? json(WaitClassName(link.wait_class)) : json(nullptr)},
       {"gpu_activity", ActivityJson(session, link.gpu_activity)},
       {"memory_call", MemoryMapCallJson(link.memory_call)},
       {"on_cpu", link.state == ChainLink::State::kOnCpu ? OnCpuJson(link.ran) : json(nullptr)},
       {"python_samples", session.python.empty()
                              ? json(nullptr)
                              : PythonSamplesJson(session, link.tid, link.start_ns, link.end_ns)},
       {"text", DescribeLink(session, link)}});
}

json IndexOrNull(int index) { return index >= 0 ? json(index) : json(nullptr); }

json StallJson(const Session& session, const Stall& stall) {
  json chain = json::array();
  for (const ChainLink& link : stall.chain) chain.push_back(LinkJson(session, link));
  return Object({{"thread", ThreadRef(session, stall.tid)},
                 {"class", WaitClassName(stall.wait_class)},
                 {"wait", WaitJson(session, stall.wait)},
                 {"asleep_ns", stall.asleep_ns()},
                 {"call", CallJson(session, stall.call)},
                 {"chain", std::move(chain)},
                 {"deadlock_with",
                  stall.deadlock_tid != 0 ? ThreadRef(session, stall.deadlock_tid) : json(nullptr)},
                 {"profiler_thread",
                  stall.profiler_tid != 0 ? ThreadRef(session, stall.profiler_tid) : json(nullptr)},
                 {"profiler_cost", stall.profiler_cost},
                 {"on_critical_path", stall.on_critical_path},
                 {"joined_on_critical_path", stall.joined_on_critical_path},
                 {"cause", IndexOrNull(stall.cause)},
                 {"freeze", IndexOrNull(stall.freeze)}});
}

const char* CauseKindName(CauseKind kind) {
  switch (kind) {
    case CauseKind::kObject:
      return "object";
    case CauseKind::kCpu:
      return "cpu";
    case CauseKind::kGpuSide:
      return "gpu_side";
    case CauseKind::kModuleLoad:
      return "module_load";
    case CauseKind::kLateHost:
      return "late_host";
    case CauseKind::kHandoff:
      return "handoff";
  }
  return "object";
}

// The arrays that grow with the session (slow calls, stalls): filled, or left empty for
// WriteJsonReport to write an element at a time.
enum class Arrays : uint8_t { kFilled, kLeftEmpty };

json DiagnosisJson(const Session& session, const Analysis& diagnosis, Arrays arrays) {
  json causes = json::array();
  for (const Cause& cause : diagnosis.causes) {
    json threads = json::array();
    for (uint32_t tid : cause.tids) threads.push_back(ThreadRef(session, tid));
    causes.push_back(
        {{"class", WaitClassName(cause.wait_class)},
         {"label", CauseClassLabel(cause)},
         {"kind", CauseKindName(cause.kind)},
         {"identity", CauseIdentity(session, cause)},
         {"object",
          cause.wait_class == WaitClass::kCpu ? json(nullptr) : ObjectJson(session, cause.object)},
         {"holder", cause.holder_tid != 0 ? ThreadRef(session, cause.holder_tid) : json(nullptr)},
         {"root", cause.root ? LinkJson(session, *cause.root) : json(nullptr)},
         {"gpu_idle_ns", cause.gpu_idle_ns},
         {"blocked_ns", cause.blocked_ns},
         {"held_up_ns", cause.held_up_ns},
         {"longest_ns", cause.longest_ns},
         {"wait_count", cause.wait_count},
         {"threads", std::move(threads)},
         {"stalls", cause.stalls},
         {"freezes", cause.freezes},
         {"gaps", cause.gaps}});
  }
  json stalls = json::array();
  if (arrays == Arrays::kFilled) {
    for (const Stall& stall : diagnosis.stalls) stalls.push_back(StallJson(session, stall));
  }
  json freezes = json::array();
  for (const Freeze& freeze : diagnosis.freezes) {
    if (!freeze.of_stalls()) break;  // those only slow calls saw are the top level's
    json threads = json::array();
    for (uint32_t tid : freeze.tids) threads.push_back(ThreadRef(session, tid));
    freezes.push_back({{"number", freeze.number},
                       {"start_ns", freeze.start_ns},
                       {"end_ns", freeze.end_ns},
                       {"threads", std::move(threads)},
                       {"stalls", freeze.stalls},
                       {"cause", IndexOrNull(freeze.cause)}});
  }
  json gaps = json::array();
  for (const GpuGap& gap : diagnosis.gaps) {
    gaps.push_back(
        {{"pid", gap.pid},
         {"device", gap.device_id},
         {"device_index", gap.device},
         {"stream", gap.stream_id},
         {"start_ns", gap.start_ns},
         {"end_ns", gap.end_ns},
         {"before", ActivityJson(session, gap.before)},
         {"after", ActivityJson(session, gap.after)},
         {"before_call", CallJson(session, gap.before_call)},
         {"after_call", CallJson(session, gap.after_call)},
         {"late_thread", gap.late_thread ? LinkJson(session, *gap.late_thread) : json(nullptr)},
         {"stall", IndexOrNull(gap.stall)},
         {"module_load_ns", gap.module_load_ns},
         {"gpu_side", gap.gpu_side},
         {"profiler_cost", gap.profiler_cost},
         {"cause", IndexOrNull(gap.cause)}});
  }
  json cpu_waits = json::array();
  for (const CpuWait& wait : diagnosis.cpu_waits) {
    json held_up_by = json::array();
    for (const auto& [tid, ns] : wait.held_up_by)
      held_up_by.push_back({{"thread", ThreadRef(session, tid)}, {"runnable_ns", ns}});
    cpu_waits.push_back({{"thread", ThreadRef(session, wait.tid)},
                         {"runnable_ns", wait.runnable_ns},
                         {"life_ns", wait.life_ns},
                         {"after_wakeup_ns", wait.after_wakeup_ns},
                         {"longest_after_wakeup_ns", wait.longest_after_wakeup_ns},
                         {"wakeups", wait.wakeups},
                         {"awaited_ns", wait.awaited_ns},
                         {"held_up_ns", wait.held_up_ns},
                         {"held_up_by", std::move(held_up_by)},
                         {"short_of_cpu", wait.short_of_cpu},
                         {"latency_sensitive", wait.latency_sensitive}});
  }
  // Per GPU (in the order of gpu.devices): its idle time, the part in gaps, the part explained.
  json devices = json::array();
  for (size_t d = 0; d < diagnosis.devices.size(); ++d) {
    const GpuDevice& device = diagnosis.devices[d];
    const GapTotals& gaps = diagnosis.gap_totals[d];
    devices.push_back({{"device", device.ordinal},
                       {"name", GpuDeviceName(device, diagnosis.devices)},
                       {"idle_ns", device.idle_ns()},
                       {"gaps", gaps.gaps},
                       {"gap_idle_ns", gaps.idle_ns},
                       {"explained_idle_ns", gaps.explained_ns}});
  }
  // What gprof-run's own threads cost the program: never in the causes.
  const ProfilerCost& cost = diagnosis.profiler_cost;
  json profiler_threads = json::array();
  for (uint32_t tid : cost.tids) {
    // As the injected library said, or a thread one of them created.
    auto known = session.profiler_threads.find(tid);
    const char* role = "created_by_profiler";
    if (known != session.profiler_threads.end())
      role = known->second == ProfilerRole::kWriter  ? "writer"
             : known->second == ProfilerRole::kCupti ? "cupti"
                                                     : "other";
    profiler_threads.push_back({{"thread", ThreadRef(session, tid)}, {"role", role}});
  }
  std::string cost_text = DescribeProfilerCost(session, diagnosis);
  json profiler_cost = {
      {"threads", std::move(profiler_threads)},
      {"waits", cost.stalls.size()},
      {"stalls", cost.stalls},
      {"total_ns", cost.total_ns},
      {"longest_ns", cost.longest >= 0 ? diagnosis.stalls[cost.longest].asleep_ns() : 0},
      {"longest", IndexOrNull(cost.longest)},
      {"gpu_idle_ns", cost.gpu_idle_ns},
      {"gaps", cost.gaps},
      {"text", cost_text.empty() ? json(nullptr) : json(cost_text)}};
  return {{"kernel_recorded", diagnosis.kernel_recorded},
          {"wait_threshold_ns", diagnosis.options.threshold_ns},
          {"gap_threshold_ns", diagnosis.options.gap_threshold_ns},
          {"profiler_cost", std::move(profiler_cost)},
          {"devices", std::move(devices)},
          {"causes", std::move(causes)},
          {"freezes", std::move(freezes)},
          {"gaps", std::move(gaps)},
          {"cpu_waits", std::move(cpu_waits)},
          {"stalls", std::move(stalls)}};
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

// The top level's freezes are those slow calls were blocked in, in the order of their calls
// (report_view.h): `order` (into Analysis::freezes), and each freeze's place there (-1: none).
struct CallFreezes {
  std::vector<int> order;
  std::vector<int> number;
  int Of(const BlockedCall& blocked) const {
    return blocked.freeze >= 0 ? number[blocked.freeze] : -1;
  }
};

CallFreezes OrderCallFreezes(const Analysis& analysis) {
  CallFreezes freezes;
  freezes.order = FreezesOfCalls(analysis);
  freezes.number.assign(analysis.freezes.size(), -1);
  for (size_t i = 0; i < freezes.order.size(); ++i)
    freezes.number[freezes.order[i]] = static_cast<int>(i);
  return freezes;
}

json ReportJson(const Session& session, const Analysis& analysis, Arrays arrays,
                const CallFreezes& call_freezes) {
  json slow_calls = json::array();
  if (arrays == Arrays::kFilled) {
    for (const BlockedCall& blocked : analysis.blocked_calls)
      slow_calls.push_back(BlockedCallJson(session, blocked, call_freezes.Of(blocked)));
  }
  json freezes = json::array();
  for (int f : call_freezes.order)
    freezes.push_back(FreezeJson(session, analysis, analysis.freezes[f]));
  return {{"format", "gprof-run-report"},
          {"version", 1},
          {"session", SessionJson(session, analysis)},
          {"threshold_ns", analysis.options.threshold_ns},
          {"slow_calls", std::move(slow_calls)},
          {"freezes", std::move(freezes)},
          {"gpu", GpuSummaryJson(session, analysis.gpu)},
          {"tables", TablesJson(session)},
          {"diagnosis", DiagnosisJson(session, analysis, arrays)}};
}

// Writes json values as json::dump(1, ' ', false, replace) writes them, the same bytes, faster:
// strings of printable ASCII (nearly all of them) are copied as they are and numbers made with
// std::to_chars, into a block handed out whole. What needs more care (other strings, floating
// point) is a scalar, which dump() writes on one line whatever the indentation.
class JsonPrinter {
 public:
  explicit JsonPrinter(const JsonOutput& output) : output_(output) {}
  ~JsonPrinter() { Flush(); }

  void Dump(const json& value, unsigned indent) {
    switch (value.type()) {
      case json::value_t::object:
        return Object(value.get_ref<const json::object_t&>(), indent,
                      [&](const std::string&, const json& member) { Dump(member, indent + 1); });
      case json::value_t::array: {
        const json::array_t& array = value.get_ref<const json::array_t&>();
        return Array(array.size(), indent, [&](size_t i) { Dump(array[i], indent + 1); });
      }
      case json::value_t::string:
        return String(value.get_ref<const std::string&>(), &value);
      case json::value_t::boolean:
        return Append(value.get<bool>() ? "true" : "false");
      case json::value_t::number_integer:
        return Number(value.get<int64_t>());
      case json::value_t::number_unsigned:
        return Number(value.get<uint64_t>());
      case json::value_t::null:
        return Append("null");
      default:  // floating point, binary, discarded
        return Serialize(value);
    }
  }

  // An object's members, each key written here and its value by member(key, value), one level
  // deeper than `indent`.
  template <typename Member>
  void Object(const json::object_t& object, unsigned indent, Member member) {
    if (object.empty()) return Append("{}");
    Append("{\n");
    size_t left = object.size();
    for (const auto& [key, value] : object) {
      Indent(indent + 1);
      String(key, nullptr);
      Append(": ");
      member(key, value);
      if (--left != 0) Append(",\n");
    }
    Append("\n");
    Indent(indent);
    Append("}");
  }

  // An array of `count` elements, the i-th written by element(i), one level deeper than `indent`.
  template <typename Element>
  void Array(size_t count, unsigned indent, Element element) {
    if (count == 0) return Append("[]");
    Append("[\n");
    for (size_t i = 0; i < count; ++i) {
      Indent(indent + 1);
      element(i);
      if (i + 1 != count) Append(",\n");
    }
    Append("\n");
    Indent(indent);
    Append("]");
  }

  // Text written as it is.
  [[gnu::always_inline]] void Append(std::string_view text) {
    if (size_ + text.size() > kBlockBytes) [[unlikely]]
      return AppendLarge(text);
    std::memcpy(block_ + size_, text.data(), text.size());
    size_ += text.size();
  }

  void Indent(unsigned count) {
    while (count > 0) {
      unsigned now = std::min<unsigned>(count, kSpaces.size());
      Append(kSpaces.substr(0, now));
      count -= now;
    }
  }

  void Flush() {
    if (size_ != 0) output_(std::string_view(block_, size_));
    size_ = 0;
  }

 private:
  [[gnu::noinline]] void AppendLarge(std::string_view text) {
    Flush();
    if (text.size() > kBlockBytes) return output_(text);
    std::memcpy(block_, text.data(), text.size());
    size_ = text.size();
  }

  static constexpr size_t kBlockBytes = size_t{64} << 10;
  static constexpr std::string_view kSpaces = "                                ";

  // `value`: the json that holds `text`, or null for an object's key.
  void String(const std::string& text, const json* value) {
    for (char c : text) {
      if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') [[unlikely]]
        return Serialize(value != nullptr ? *value : json(text));
    }
    Append("\"");
    Append(text);
    Append("\"");
  }

  template <typename Integer>
  void Number(Integer number) {
    char text[24];
    auto [end, unused] = std::to_chars(text, text + sizeof(text), number);
    Append(std::string_view(text, static_cast<size_t>(end - text)));
  }

  void Serialize(const json& value) {
    Append(value.dump(1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace));
  }

  const JsonOutput& output_;
  char block_[kBlockBytes];
  size_t size_ = 0;
};

// Writes a report tree as JsonPrinter writes it, but the arrays named in `lazy` (empty in the tree)
// as their elements are made, one at a time.
class ReportWriter {
 public:
  struct LazyArray {
    std::string_view path;  // "/slow_calls", "/diagnosis/stalls"
    size_t count;
    std::function<json(size_t)> element;
  };

  ReportWriter(const JsonOutput& output, std::vector<LazyArray> lazy)
      : printer_(std::make_unique<JsonPrinter>(output)), lazy_(std::move(lazy)) {}

  void Write(const json& value, unsigned indent, const std::string& path) {
    for (const LazyArray& array : lazy_) {
      if (array.count != 0 && array.path == path) {
        return printer_->Array(array.count, indent,
                               [&](size_t i) { printer_->Dump(array.element(i), indent + 1); });
      }
    }
    if (!value.is_object() || !HoldsLazy(path)) return printer_->Dump(value, indent);
    printer_->Object(value.get_ref<const json::object_t&>(), indent,
                     [&](const std::string& key, const json& member) {
                       Write(member, indent + 1, path + "/" + key);
                     });
  }

  // Writes what is gathered onto the output.
  void Flush() { printer_->Flush(); }

 private:
  bool HoldsLazy(const std::string& path) const {
    for (const LazyArray& array : lazy_) {
      if (array.count != 0 && array.path.starts_with(path + "/")) return true;
    }
    return false;
  }

  std::unique_ptr<JsonPrinter> printer_;  // its block is large for the stack
  std::vector<LazyArray> lazy_;
};

}  // namespace

json RenderJsonReport(const Session& session, const Analysis& analysis) {
  return ReportJson(session, analysis, Arrays::kFilled, OrderCallFreezes(analysis));
}

void WriteJsonReport(const Session& session, const Analysis& analysis, const JsonOutput& output) {
  const CallFreezes call_freezes = OrderCallFreezes(analysis);
  std::vector<ReportWriter::LazyArray> lazy = {
      {"/slow_calls", analysis.blocked_calls.size(),
       [&](size_t i) {
         const BlockedCall& blocked = analysis.blocked_calls[i];
         return BlockedCallJson(session, blocked, call_freezes.Of(blocked));
       }},
      {"/diagnosis/stalls", analysis.stalls.size(),
       [&](size_t i) { return StallJson(session, analysis.stalls[i]); }}};
  ReportWriter writer(output, std::move(lazy));
  writer.Write(ReportJson(session, analysis, Arrays::kLeftEmpty, call_freezes), 0, "");
  writer.Flush();
}

}  // namespace gprof::collector
