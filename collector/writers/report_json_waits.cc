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

json ThreadRef(const Session& session, uint32_t tid) {
  return Object(
      {{"tid", tid}, {"name", session.ThreadName(tid)}, {"label", session.ThreadLabel(tid)}});
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
                     ResolvedPythonStack* resolved) {
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

json InRangesJson(const Session& session, const std::vector<uint32_t>& ranges) {
  if (ranges.empty()) return nullptr;
  json list = json::array();
  for (uint32_t index : ranges) {
    const NvtxRange& range = session.nvtx_ranges[index];
    list.push_back(Object({{"name", session.nvtx_strings[range.name]},
                           {"domain", session.nvtx_strings[range.domain]},
                           {"thread", ThreadRef(session, range.tid)},
                           {"start_ns", range.start_ns},
                           {"end_ns", range.end_ns}}));
  }
  return Object({{"text", InRangesWords(session, ranges)}, {"ranges", std::move(list)}});
}

json RangeTableJson(const Session& session, const Analysis& analysis) {
  json rows = json::array();
  for (const RangeTotals& range : analysis.ranges) {
    rows.push_back(Object({{"name", session.nvtx_strings[range.name]},
                           {"domain", session.nvtx_strings[range.domain]},
                           {"text", RangeName(session, range.name, range.domain)},
                           {"count", range.count},
                           {"open", range.open},
                           {"total_ns", range.total_ns},
                           {"blocked_ns", range.blocked_ns},
                           {"gpu_idle_ns", range.gpu_idle_ns}}));
  }
  return rows;
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
  out["nvtx"] = InRangesJson(session, blocked.nvtx_ranges);
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
                 {"native_frames",
                  [&] {
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
                 {"holder", HolderJson(session, freeze.holder)},
                 {"nvtx", InRangesJson(session, numbered.nvtx_ranges)}});
}

}  // namespace gprof::collector::report_json
