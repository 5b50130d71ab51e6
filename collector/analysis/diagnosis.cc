#include "collector/analysis/diagnosis.h"

#include <string_view>

#include "collector/analysis/analysis.h"
#include "collector/analysis/critical_path.h"
#include "collector/analysis/diagnoser.h"
#include "inject/format/cuda_api_roles.h"

namespace gprof::collector::diagnosis {

namespace {

// Driver calls that load a module or resolve a kernel in one: under lazy loading, a kernel's
// first use loads its module inside them, and CUPTI's overhead records do not cover all of it.
bool LoadsModules(std::string_view name) {
  return format::HasCudaApiRole(name, format::kCudaLoadsModules);
}

}  // namespace

Diagnoser::Diagnoser(const Session& session, const WaitReader& reader,
                     const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                     Analysis& analysis)
    : session_(session),
      reader_(reader),
      correlation_(correlation),
      gpu_busy_(gpu_busy),
      analysis_(analysis) {
  analysis_.kernel_recorded = session.meta.kernel_recording;
  for (const TaskStart& start : session.task_starts) creator_of_[start.tid] = start.parent_tid;
  // gprof-run's own threads, and any they created (task_starts are in time order).
  for (const auto& [tid, role] : session.profiler_threads) ours_.insert(tid);
  for (const TaskStart& start : session.task_starts) {
    if (ours_.contains(start.parent_tid)) ours_.insert(start.tid);
  }
  analysis_.profiler_cost.tids.assign(ours_.begin(), ours_.end());
  for (const std::string& name : session.api_names)
    loading_call_names_.push_back(LoadsModules(name));
  // A load CUPTI did not name a thread for is its call's thread's.
  for (const ModuleLoad& load : session.module_loads) {
    uint32_t tid = load.tid;
    if (tid == 0) {
      const ApiCall* call = correlation_.CallOf(load.pid, load.correlation_id);
      if (call == nullptr) continue;
      tid = call->tid;
    }
    module_loads_[tid].push_back(&load);
  }
}

void Diagnoser::Run() {
  FindStalls();
  CountProfilerCost();
  GroupCauses();
  NameLocksByTheirUsers(session_, analysis_);
  NamePythonLocks(session_, analysis_);
  FindCpuStarvation();
  FindGpuGaps();
  Rank();
}

bool Diagnoser::WaitedForGpu(const Stall& stall) const {
  if (stall.call == nullptr || !gpu_busy_.Recorded(stall.pid)) return false;
  const uint64_t until = stall.wait.wake_ns != 0 ? stall.wait.wake_ns : stall.wait.end_ns;
  GpuUse use = gpu_busy_.UseDuring(stall.pid, stall.wait.start_ns, until);
  return use.busy_ns * 2 >= until - stall.wait.start_ns;
}

bool Diagnoser::EndedByTheDriver(const Stall& stall) const {
  if (stall.call == nullptr || !gpu_busy_.Recorded(stall.pid)) return false;
  const uint32_t waker = stall.wait.waker_tid;
  auto thread = session_.threads.find(waker);
  if (waker == 0 || waker == stall.tid || thread == session_.threads.end() ||
      thread->second.pid != stall.pid)
    return false;
  return reader_.CallsDuring(waker, 0, UINT64_MAX).empty();
}

void Diagnoser::FindStalls() {
  path_ = FindCriticalPath(session_, reader_, ours_);
  const CriticalPath& path = path_;
  analysis_.critical_path_tid = path.end_tid;
  // A wait for the GIL is a run of sleeps (WaitReader), some shorter than the threshold: in a
  // Python process every sleep is looked at, elsewhere only the long ones.
  auto looked_at = [&](const OffCpuInterval& interval) {
    if (interval.state() == OffCpuState::kRunnable) return false;
    const uint64_t asleep_until = interval.wake_ns != 0 ? interval.wake_ns : interval.end_ns;
    return asleep_until - interval.start_ns >= analysis_.options.threshold_ns ||
           session_.python.processes.contains(interval.pid);
  };
  for (const OffCpuInterval& interval : session_.off_cpu) {
    if (!looked_at(interval) || Ours(interval.tid)) continue;  // gprof-run's own waits are not the program's
    // A wait of several pieces is one stall, made at its first piece (or at the first looked at).
    const auto [first, last] = reader_.PiecesOf(interval);
    if (&session_.off_cpu[first] != &interval && looked_at(session_.off_cpu[first])) continue;
    const Wait& whole = reader_.WaitOf(interval);
    uint64_t asleep_until = whole.wake_ns != 0 ? whole.wake_ns : whole.end_ns;
    if (asleep_until - whole.start_ns < analysis_.options.threshold_ns) continue;
    Stall stall;
    stall.pid = interval.pid;
    stall.tid = interval.tid;
    stall.wait = reader_.MakeWait(interval, whole.start_ns, whole.end_ns);
    stall.wait_class = stall.wait.wait_class;
    stall.call = reader_.CallAt(interval.tid, whole.start_ns);
    // A wait inside a CUDA call while its process's GPU was busy most of it, or ended by a thread
    // of the driver, waited for the GPU: the GPU's time, not a handoff's.
    for (size_t piece = first; piece <= last; ++piece) {
      if (session_.off_cpu[piece].tid != interval.tid) continue;
      stall.on_critical_path |= path.Holds(session_, session_.off_cpu[piece]);
      stall.joined_on_critical_path |= path.joins.contains(piece);
    }
    stall.on_critical_path =
        stall.on_critical_path && !WaitedForGpu(stall) && !EndedByTheDriver(stall);
    FollowChain(stall);
    analysis_.stalls.push_back(std::move(stall));
  }
}

namespace {

// A futex in the injected library's own memory: its data, or its zero-filled .bss in the anonymous
// mapping just past them (the exit's wait for the writer's last flush).
bool InInjectedLibrary(const Session& session, const WaitObject& object) {
  if (object.kind != WaitKind::kFutex) return false;
  auto process = session.processes.find(object.pid);
  if (process == session.processes.end()) return false;
  const MapsSnapshot* maps = process->second.MapsHolding(object.address, object.seen_ns);
  if (maps == nullptr) return false;
  const Mapping* mapping = maps->Find(object.address);
  if (mapping == nullptr) return false;
  if (mapping->path.empty() && mapping != maps->mappings.data() &&
      (mapping - 1)->end == mapping->start)
    mapping = mapping - 1;
  std::string_view path = mapping->path;
  return path.substr(path.rfind('/') + 1).starts_with("libgprof_inject");
}

}  // namespace

// Every wait of the program's that gprof-run's own thread held up: a lock it held (the loader's,
// CUPTI's), or gprof-run's own signal the program waited for (the writer's last flush at exit).
// A wait it merely ended (a driver thread's condition, signalled by a flush the writer asked
// for) delayed nothing: it is no cost, and no cause either.
void Diagnoser::CountProfilerCost() {
  ProfilerCost& cost = analysis_.profiler_cost;
  for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
    Stall& stall = analysis_.stalls[i];
    if (stall.profiler_tid == 0) continue;
    if (!IsContention(stall.wait_class) && !InInjectedLibrary(session_, stall.wait.object))
      continue;
    stall.profiler_cost = true;
    cost.stalls.push_back(static_cast<int>(i));
    cost.total_ns += stall.asleep_ns();
    if (cost.longest < 0 || stall.asleep_ns() > analysis_.stalls[cost.longest].asleep_ns())
      cost.longest = static_cast<int>(i);
  }
}

}  // namespace gprof::collector::diagnosis

namespace gprof::collector {

void DiagnoseWaits(const Session& session, const WaitReader& waits,
                   const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                   Analysis& analysis) {
  diagnosis::Diagnoser(session, waits, correlation, gpu_busy, analysis).Run();
}

bool IsIdleWait(const Stall& stall) {
  if (stall.wait_class == WaitClass::kCondition) return true;
  const WaitObject& object = stall.wait.object;
  bool waits_for_events =
      object.device_call == DeviceCall::kPoll || object.device_call == DeviceCall::kEpoll;
  return stall.wait_class == WaitClass::kGpuDriver && waits_for_events && stall.call == nullptr;
}

bool IsCostlyHandoff(const Stall& stall) {
  if (IsContention(stall.wait_class) && !IsIdleWait(stall)) return false;
  if (!stall.on_critical_path || stall.wait.wake_ns == 0 || stall.wait.ended_by_exit) return false;
  return !stall.chain.empty() && !stall.chain.front().owner && !stall.chain.front().creator &&
         stall.chain.front().tid == stall.wait.waker_tid;
}

bool InDeadlock(const Stall& stall) {
  return stall.deadlock_tid != 0 && stall.deadlock_tid == stall.tid;
}

}  // namespace gprof::collector
