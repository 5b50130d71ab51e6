#include "collector/analysis/slow_calls.h"

#include <algorithm>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
const Wait* LongestWaitOn(const std::vector<Wait>& waits, const WaitObject& object) {
  const Wait* longest = nullptr;
  for (const Wait& wait : waits) {
    if (wait.object == object && (longest == nullptr || wait.asleep_ns() > longest->asleep_ns())) {
      longest = &wait;
    }
  }
  return longest;
}

// The object a thread slept on longest among `waits`, and for how long.
std::pair<std::optional<WaitObject>, uint64_t> LongestWaitObject(const std::vector<Wait>& waits) {
  std::vector<std::pair<const WaitObject*, uint64_t>> totals;
  for (const Wait& wait : waits) {
    if (wait.state == OffCpuState::kRunnable) continue;
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& total) { return *total.first == wait.object; });
    if (it == totals.end()) {
      totals.emplace_back(&wait.object, wait.asleep_ns());
    } else {
      it->second += wait.asleep_ns();
    }
  }
  if (totals.empty()) return {std::nullopt, 0};
  auto longest = std::max_element(totals.begin(), totals.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  return {*longest->first, longest->second};
}

std::optional<GpuDuringCall> GpuDuring(const GpuCorrelation& correlation,
                                       const GpuBusyTimeline& gpu_busy, uint32_t pid,
                                       uint64_t start, uint64_t end, const ApiCall* call) {
  if (!gpu_busy.Recorded(pid)) return std::nullopt;
  GpuUse use = gpu_busy.UseDuring(pid, start, end);
  GpuDuringCall gpu;
  gpu.window_ns = end - start;
  gpu.busy_ns = use.busy_ns;
  gpu.main_activity = use.longest;
  gpu.main_overlap_ns = use.longest_overlap_ns;
  if (use.longest != nullptr) gpu.main_launcher = correlation.LauncherOf(*use.longest);
  if (call != nullptr) {
    for (const GpuActivity* activity : correlation.ActivitiesOf(*call)) {
      if (activity->occupies_gpu()) gpu.own_work.push_back(activity);
    }
  }
  return gpu;
}

void ExplainSlowCalls(const Session& session, const WaitReader& waits,
                      const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                      Analysis& analysis) {
  for (const ApiCall& call : session.api_calls) {
    if (call.duration() < analysis.options.threshold_ns) continue;
    TimeSplit split = waits.Split(call.tid, call.enter_ns, call.exit_ns);
    BlockedCall blocked;
    blocked.call = &call;
    blocked.on_cpu_ns = split.on_cpu_ns;
    blocked.runnable_ns = split.runnable_ns;
    blocked.asleep_ns = split.asleep_ns;
    blocked.waits = std::move(split.waits);
    std::tie(blocked.main_object, blocked.main_object_ns) = LongestWaitObject(blocked.waits);
    if (blocked.main_object) {
      if (const Wait* main = LongestWaitOn(blocked.waits, *blocked.main_object))
        blocked.main_wait = static_cast<int>(main - blocked.waits.data());
    }
    blocked.gpu = GpuDuring(correlation, gpu_busy, call.pid, call.enter_ns, call.exit_ns, &call);
    analysis.blocked_calls.push_back(std::move(blocked));
  }
}

}  // namespace gprof::collector
