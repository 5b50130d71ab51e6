#include "collector/analysis/gpu_timeline.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace gprof::collector {
namespace {

// Orders by process and correlation id: each call's activities, and each activity's calls, are
// one run.
struct ByCorrelation {
  static std::pair<uint32_t, uint64_t> Key(const ApiCall* call) {
    return {call->pid, call->correlation_id};
  }
  static std::pair<uint32_t, uint64_t> Key(const GpuActivity* activity) {
    return {activity->pid, activity->correlation_id};
  }
  template <typename A, typename B>
  bool operator()(const A* a, const B* b) const {
    return Key(a) < Key(b);
  }
};

}  // namespace

GpuCorrelation::GpuCorrelation(const Session& session) {
  for (const ApiCall& call : session.api_calls) {
    if (call.correlation_id != 0) calls_.push_back(&call);
  }
  for (const GpuActivity& activity : session.gpu_activities) {
    if (activity.correlation_id != 0) activities_.push_back(&activity);
  }
  // Outermost first: the earliest to enter, the longest of those entered together.
  std::stable_sort(calls_.begin(), calls_.end(), [](const ApiCall* a, const ApiCall* b) {
    return std::make_tuple(a->pid, a->correlation_id, a->enter_ns, b->exit_ns) <
           std::make_tuple(b->pid, b->correlation_id, b->enter_ns, a->exit_ns);
  });
  std::stable_sort(activities_.begin(), activities_.end(), ByCorrelation{});  // keeps start order
}

std::span<const GpuActivity* const> GpuCorrelation::ActivitiesOf(const ApiCall& call) const {
  if (call.correlation_id == 0) return {};
  auto [first, last] =
      std::equal_range(activities_.begin(), activities_.end(), &call, ByCorrelation{});
  return {first, last};
}

const ApiCall* GpuCorrelation::LauncherOf(const GpuActivity& activity) const {
  return CallOf(activity.pid, activity.correlation_id);
}

const ApiCall* GpuCorrelation::CallOf(uint32_t pid, uint64_t correlation_id) const {
  if (correlation_id == 0) return nullptr;
  const std::pair<uint32_t, uint64_t> key{pid, correlation_id};
  auto first = std::partition_point(calls_.begin(), calls_.end(), [&](const ApiCall* call) {
    return ByCorrelation::Key(call) < key;
  });
  if (first == calls_.end() || ByCorrelation::Key(*first) != key) return nullptr;
  return *first;
}

GpuBusyTimeline::GpuBusyTimeline(const Session& session) {
  for (const auto& [pid, process] : session.processes) {
    if (process.capture.mode == CaptureMode::kCupti) recorded_pids_.insert(pid);
  }
  for (const GpuActivity& activity : session.gpu_activities) {
    recorded_pids_.insert(activity.pid);
    if (!activity.occupies_gpu()) continue;
    ProcessWork& process = processes_[activity.pid];
    uint64_t latest = process.max_end_ns.empty() ? 0 : process.max_end_ns.back();
    process.work.push_back(&activity);
    process.max_end_ns.push_back(std::max(latest, activity.end_ns));
    // Sorted by start, each activity either extends the last busy stretch or begins a new one.
    if (!process.busy.empty() && activity.start_ns <= process.busy.back().second) {
      process.busy.back().second = std::max(process.busy.back().second, activity.end_ns);
    } else {
      process.busy.emplace_back(activity.start_ns, activity.end_ns);
    }
  }
}

GpuUse GpuBusyTimeline::UseDuring(uint32_t pid, uint64_t start_ns, uint64_t end_ns) const {
  GpuUse use;
  auto found = processes_.find(pid);
  if (found == processes_.end() || end_ns <= start_ns) return use;
  const ProcessWork& process = found->second;

  auto stretch = std::partition_point(process.busy.begin(), process.busy.end(),
                                      [&](const auto& busy) { return busy.second <= start_ns; });
  for (; stretch != process.busy.end() && stretch->first < end_ns; ++stretch) {
    use.busy_ns += std::min(stretch->second, end_ns) - std::max(stretch->first, start_ns);
  }

  // Everything before `first` ended by start_ns; everything from the first start at end_ns on
  // begins after the interval.
  size_t first = std::partition_point(process.max_end_ns.begin(), process.max_end_ns.end(),
                                      [&](uint64_t end) { return end <= start_ns; }) -
                 process.max_end_ns.begin();
  for (size_t i = first; i < process.work.size() && process.work[i]->start_ns < end_ns; ++i) {
    const GpuActivity& activity = *process.work[i];
    uint64_t overlap_start = std::max(activity.start_ns, start_ns);
    uint64_t overlap_end = std::min(activity.end_ns, end_ns);
    if (overlap_end > overlap_start && overlap_end - overlap_start > use.longest_overlap_ns) {
      use.longest = &activity;
      use.longest_overlap_ns = overlap_end - overlap_start;
    }
  }
  return use;
}

GpuDeviceTimeline FindGpuIdle(const Session& session, uint64_t min_idle_ns) {
  GpuDeviceTimeline timeline;
  std::map<std::string, size_t> by_uuid;
  std::map<std::pair<uint32_t, uint32_t>, size_t> by_ordinal;  // (pid, ordinal): an unnamed one
  struct Stretch {
    uint64_t start_ns = 0, end_ns = 0;  // the busy stretch that is open
    const GpuActivity* last = nullptr;  // the work that ends it so far
  };
  std::vector<Stretch> open;
  std::pair<uint32_t, uint32_t> cached_key{0, 0};
  size_t cached = SIZE_MAX;
  auto device_of = [&](const GpuActivity& activity) {
    const std::pair<uint32_t, uint32_t> key{activity.pid, activity.device_id};
    if (cached != SIZE_MAX && key == cached_key) return cached;
    std::string uuid;
    if (auto process = session.processes.find(activity.pid); process != session.processes.end()) {
      if (auto named = process->second.device_uuids.find(activity.device_id);
          named != process->second.device_uuids.end())
        uuid = named->second;
    }
    const size_t next = timeline.devices.size();
    const size_t index = uuid.empty() ? by_ordinal.try_emplace(key, next).first->second
                                      : by_uuid.try_emplace(uuid, next).first->second;
    if (index == next) {
      GpuDevice device;
      device.ordinal = activity.device_id;
      device.uuid = std::move(uuid);
      timeline.devices.push_back(std::move(device));
      open.emplace_back();
    }
    cached_key = key;
    cached = index;
    return cached;
  };
  // In start order, each device's work either extends its open busy stretch or, after an idle
  // interval, begins the next.
  for (const GpuActivity& activity : session.gpu_activities) {
    if (!activity.occupies_gpu()) continue;
    const size_t index = device_of(activity);
    GpuDevice& device = timeline.devices[index];
    Stretch& stretch = open[index];
    if (std::find(device.pids.begin(), device.pids.end(), activity.pid) == device.pids.end())
      device.pids.push_back(activity.pid);
    if (stretch.last == nullptr) {
      device.first_ns = activity.start_ns;
      stretch = {activity.start_ns, activity.end_ns, &activity};
    } else if (activity.start_ns > stretch.end_ns) {
      device.busy_ns += stretch.end_ns - stretch.start_ns;
      if (activity.start_ns - stretch.end_ns >= min_idle_ns)
        timeline.idle.push_back(
            {index, stretch.end_ns, activity.start_ns, stretch.last, &activity});
      stretch = {activity.start_ns, activity.end_ns, &activity};
    } else if (activity.end_ns > stretch.end_ns) {
      stretch.end_ns = activity.end_ns;
      stretch.last = &activity;
    }
  }
  for (size_t i = 0; i < open.size(); ++i) {
    timeline.devices[i].busy_ns += open[i].end_ns - open[i].start_ns;
    timeline.devices[i].last_ns = open[i].end_ns;
  }
  // GPU 0 before GPU 1; a process's own devices by its pid.
  std::vector<size_t> order(timeline.devices.size()), rank(order.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) {
    const GpuDevice& device = timeline.devices[i];
    return std::make_tuple(device.ordinal, device.uuid, device.pids.front());
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<GpuDevice> sorted;
  for (size_t i = 0; i < order.size(); ++i) {
    rank[order[i]] = i;
    sorted.push_back(std::move(timeline.devices[order[i]]));
  }
  timeline.devices = std::move(sorted);
  for (GpuIdleInterval& idle : timeline.idle) idle.device = rank[idle.device];
  std::stable_sort(
      timeline.idle.begin(), timeline.idle.end(),
      [](const GpuIdleInterval& a, const GpuIdleInterval& b) { return a.start_ns < b.start_ns; });
  return timeline;
}

}  // namespace gprof::collector
