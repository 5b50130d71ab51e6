#include <algorithm>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnoser.h"

namespace gprof::collector::diagnosis {

uint64_t Diagnoser::ModuleLoadDuring(uint32_t tid, uint64_t start_ns, uint64_t end_ns) const {
  // CUPTI's overhead records, and the driver calls that load: the two overlap (a load inside a
  // call), so the union is what counts.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  auto add = [&](uint64_t from, uint64_t to) {
    from = std::max(from, start_ns);
    to = std::min(to, end_ns);
    if (to > from) spans.emplace_back(from, to);
  };
  if (auto loads = module_loads_.find(tid); loads != module_loads_.end()) {
    for (const ModuleLoad* load : loads->second) add(load->start_ns, load->end_ns);
  }
  for (const ApiCall* call : reader_.CallsDuring(tid, start_ns, end_ns)) {
    if (loading_call_names_[call->name_index]) add(call->enter_ns, call->exit_ns);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t total = 0, covered_ns = start_ns;
  for (const auto& [from, to] : spans) {
    if (to <= covered_ns) continue;
    total += to - std::max(from, covered_ns);
    covered_ns = to;
  }
  return total;
}

void Diagnoser::FindGpuGaps() {
  GpuDeviceTimeline timeline = FindGpuIdle(session_, analysis_.options.gap_threshold_ns);
  for (const GpuIdleInterval& idle : timeline.idle) {
    GpuGap gap;
    gap.device = idle.device;
    gap.pid = idle.after->pid;
    gap.device_id = idle.after->device_id;
    gap.stream_id = idle.after->stream_id;
    gap.start_ns = idle.start_ns;
    gap.end_ns = idle.end_ns;
    gap.before = idle.before;
    gap.after = idle.after;
    gap.before_call = correlation_.LauncherOf(*idle.before);
    gap.after_call = correlation_.LauncherOf(*idle.after);
    analysis_.gaps.push_back(gap);
  }
  analysis_.devices = std::move(timeline.devices);
  for (GpuGap& gap : analysis_.gaps) ExplainGap(gap);
}

void Diagnoser::ExplainGap(GpuGap& gap) {
  const ApiCall* launch = gap.after_call;
  if (launch == nullptr) return;  // no launching call recorded: nothing to follow
  int cause = -1;
  // The work is queued when its call returns: the host held it up until then, outside the call
  // (late to call) or inside it (blocked in it).
  const uint64_t queued_ns = std::min(launch->exit_ns, gap.end_ns);
  if (queued_ns <= gap.start_ns) {
    // Queued before the GPU went idle, started late: held on the GPU side (a host function or an
    // event its stream waited for, another process's work on a GPU CUPTI did not name).
    gap.gpu_side = true;
    cause = CauseFor("gpu", CauseOfKind(CauseKind::kGpuSide, WaitClass::kOther));
  } else {
    // The host launched it only after the GPU had gone idle: why was that thread late?
    gap.late_thread = MakeLink(launch->tid, gap.start_ns, queued_ns);
    uint64_t longest = 0;
    for (size_t i = 0; i < analysis_.stalls.size(); ++i) {
      const Stall& stall = analysis_.stalls[i];
      if (stall.tid != launch->tid || stall.wait.start_ns >= queued_ns) continue;
      uint64_t stall_end = stall.wait.wake_ns != 0 ? stall.wait.wake_ns : stall.wait.end_ns;
      if (stall_end <= gap.start_ns) continue;
      uint64_t overlap =
          std::min(stall_end, queued_ns) - std::max(stall.wait.start_ns, gap.start_ns);
      if (overlap > longest) {
        longest = overlap;
        gap.stall = static_cast<int>(i);
      }
    }
    const ChainLink& late = *gap.late_thread;
    gap.module_load_ns = ModuleLoadDuring(launch->tid, gap.start_ns, queued_ns);
    if (gap.stall >= 0 && analysis_.stalls[gap.stall].profiler_cost &&
        late.state == ChainLink::State::kAsleep) {
      // The thread slept in a wait gprof-run's own thread held up: gprof-run's cost.
      gap.profiler_cost = true;
      analysis_.profiler_cost.gpu_idle_ns += gap.duration();
      ++analysis_.profiler_cost.gaps;
      return;
    }
    if (gap.module_load_ns * 2 >= queued_ns - gap.start_ns) {
      // Most of the wait was the driver loading modules at their first use (a kernel's under
      // lazy loading, a whole library's under EAGER): a cause of its own, which warming up moves
      // out of the measured part of the run.
      Cause loading = CauseOfKind(CauseKind::kModuleLoad, WaitClass::kOther, launch->tid);
      loading.launch = launch;
      loading.loaded_in_launch =
          ModuleLoadDuring(launch->tid, launch->enter_ns, queued_ns) * 2 >= gap.module_load_ns;
      cause = CauseFor("module|" + std::to_string(launch->tid), std::move(loading));
      if (!analysis_.causes[cause].root) analysis_.causes[cause].root = late;
    } else if (gap.stall >= 0 && analysis_.stalls[gap.stall].cause >= 0 &&
               late.state == ChainLink::State::kAsleep) {
      cause = analysis_.stalls[gap.stall].cause;
    } else {
      // Not contention: the thread worked, lacked a CPU, or waited for something else (its input,
      // a sleep). One cause per late thread: the gaps it left add up; its root is the largest
      // gap's, followed through the wait to the thread that ended it when there is one.
      cause = CauseFor("host|" + std::to_string(launch->tid),
                       CauseOfKind(CauseKind::kLateHost, WaitClass::kOther, launch->tid));
      Cause& host = analysis_.causes[cause];
      uint64_t& largest = largest_gap_ns_[cause];
      if (gap.duration() > largest) {
        largest = gap.duration();
        const bool asleep = gap.stall >= 0 && late.state == ChainLink::State::kAsleep;
        host.root = asleep && !analysis_.stalls[gap.stall].chain.empty()
                        ? analysis_.stalls[gap.stall].chain.back()
                        : late;
      }
    }
  }
  gap.cause = cause;
  Cause& explained = analysis_.causes[cause];
  explained.gpu_idle_ns += gap.duration();
  explained.gaps.push_back(static_cast<int>(&gap - analysis_.gaps.data()));
}

}  // namespace gprof::collector::diagnosis
