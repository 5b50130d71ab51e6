#include "collector/writers/report_tables.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace gprof::collector {
namespace {

// The lower middle of `durations` (reordered).
uint64_t Median(std::vector<uint64_t>& durations) {
  if (durations.empty()) return 0;
  auto middle = durations.begin() + (durations.size() - 1) / 2;
  std::nth_element(durations.begin(), middle, durations.end());
  return *middle;
}

template <typename Row>
void SortByTotal(std::vector<Row>& rows) {
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
}

// Each thread's sleeps (not preemptions): [start, wake) in time order.
std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> SleepsByThread(
    const Session& session) {
  std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> sleeps;
  for (const OffCpuInterval& interval : session.off_cpu) {
    if (interval.state() == OffCpuState::kRunnable) continue;
    uint64_t end =
        interval.wake_ns != 0 ? std::min(interval.wake_ns, interval.end_ns) : interval.end_ns;
    if (end > interval.start_ns) sleeps[interval.tid].emplace_back(interval.start_ns, end);
  }
  // off_cpu is sorted by start, so each thread's list is too.
  return sleeps;
}

uint64_t SleptDuring(const std::vector<std::pair<uint64_t, uint64_t>>& sleeps, uint64_t start,
                     uint64_t end) {
  // Sleeps of one thread do not overlap: the first that ends after `start` is where to look.
  auto it = std::upper_bound(sleeps.begin(), sleeps.end(), start,
                             [](uint64_t t, const auto& sleep) { return t < sleep.second; });
  uint64_t total = 0;
  for (; it != sleeps.end() && it->first < end; ++it)
    total += std::min(end, it->second) - std::max(start, it->first);
  return total;
}

}  // namespace

std::vector<ApiCallRow> ApiCallTable(const Session& session) {
  const auto sleeps = SleepsByThread(session);
  const std::vector<std::pair<uint64_t, uint64_t>> none;
  std::vector<ApiCallRow> rows(session.api_names.size());
  std::vector<std::vector<uint64_t>> durations(session.api_names.size());
  for (const ApiCall& call : session.api_calls) {
    if (call.name_index >= rows.size() || call.exit_ns < call.enter_ns) continue;
    ApiCallRow& row = rows[call.name_index];
    const uint64_t duration = call.duration();
    ++row.count;
    row.total_ns += duration;
    row.max_ns = std::max(row.max_ns, duration);
    durations[call.name_index].push_back(duration);
    auto thread = sleeps.find(call.tid);
    row.blocked_ns +=
        SleptDuring(thread != sleeps.end() ? thread->second : none, call.enter_ns, call.exit_ns);
  }
  std::vector<ApiCallRow> table;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].count == 0) continue;
    rows[i].name = session.api_names[i];
    rows[i].median_ns = Median(durations[i]);
    table.push_back(std::move(rows[i]));
  }
  SortByTotal(table);
  return table;
}

std::vector<KernelRow> KernelTable(const Session& session) {
  std::map<uint32_t, std::vector<uint64_t>> by_name;
  for (const GpuActivity& activity : session.gpu_activities) {
    const auto* kernel = std::get_if<GpuKernel>(&activity.detail);
    if (kernel == nullptr || activity.end_ns < activity.start_ns) continue;
    by_name[kernel->name_index].push_back(activity.duration());
  }
  std::vector<KernelRow> table;
  for (auto& [name_index, durations] : by_name) {
    KernelRow row;
    row.name = name_index < session.kernel_names.size() ? session.kernel_names[name_index]
                                                        : "kernel " + std::to_string(name_index);
    row.count = durations.size();
    for (uint64_t duration : durations) {
      row.total_ns += duration;
      row.max_ns = std::max(row.max_ns, duration);
    }
    row.median_ns = Median(durations);
    table.push_back(std::move(row));
  }
  SortByTotal(table);
  return table;
}

}  // namespace gprof::collector
