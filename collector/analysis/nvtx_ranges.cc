#include "collector/analysis/nvtx_ranges.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

uint64_t Overlap(uint64_t a_start, uint64_t a_end, uint64_t b_start, uint64_t b_end) {
  uint64_t start = std::max(a_start, b_start), end = std::min(a_end, b_end);
  return end > start ? end - start : 0;
}

uint64_t Middle(uint64_t start, uint64_t end) { return start + (end - start) / 2; }

// Of each thread, its sleeps (start to wake) in time order: disjoint, so their ends are in order.
std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> SleepsByThread(
    const Session& session) {
  std::unordered_map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> sleeps;
  for (const OffCpuInterval& interval : session.off_cpu) {
    if (interval.wake_ns == 0 || interval.wake_ns <= interval.start_ns) continue;  // preempted
    sleeps[interval.tid].emplace_back(interval.start_ns, interval.wake_ns);
  }
  return sleeps;
}

uint64_t AsleepDuring(const std::vector<std::pair<uint64_t, uint64_t>>& sleeps, uint64_t start_ns,
                      uint64_t end_ns) {
  auto first = std::lower_bound(sleeps.begin(), sleeps.end(), start_ns,
                                [](const std::pair<uint64_t, uint64_t>& sleep, uint64_t time) {
                                  return sleep.second <= time;
                                });
  uint64_t asleep = 0;
  for (auto it = first; it != sleeps.end() && it->first < end_ns; ++it)
    asleep += Overlap(it->first, it->second, start_ns, end_ns);
  return asleep;
}

std::vector<RangeTotals> TotalRanges(const Session& session, const Analysis& analysis) {
  const auto sleeps = SleepsByThread(session);
  std::map<std::pair<uint32_t, uint32_t>, RangeTotals> rows;  // by (domain, name)
  for (const NvtxRange& range : session.nvtx_ranges) {
    RangeTotals& row = rows[{range.domain, range.name}];
    row.name = range.name;
    row.domain = range.domain;
    row.count += 1;
    row.open += range.open;
    row.total_ns += range.end_ns - range.start_ns;
    if (auto thread = sleeps.find(range.tid); thread != sleeps.end())
      row.blocked_ns += AsleepDuring(thread->second, range.start_ns, range.end_ns);
    for (const GpuGap& gap : analysis.gaps) {
      if (gap.pid == range.pid)
        row.gpu_idle_ns += Overlap(gap.start_ns, gap.end_ns, range.start_ns, range.end_ns);
    }
  }
  std::vector<RangeTotals> table;
  for (auto& [key, row] : rows) table.push_back(row);
  std::stable_sort(table.begin(), table.end(), [](const RangeTotals& a, const RangeTotals& b) {
    return a.total_ns > b.total_ns;
  });
  return table;
}

}  // namespace

std::vector<uint32_t> RangesAt(const Session& session, uint32_t tid, uint64_t time_ns) {
  std::vector<uint32_t> open;
  const auto& ranges = session.nvtx_ranges;
  auto past = std::upper_bound(ranges.begin(), ranges.end(), time_ns,
                               [](uint64_t time, const NvtxRange& r) { return time < r.start_ns; });
  for (auto it = ranges.begin(); it != past; ++it) {
    if (it->tid == tid && it->end_ns > time_ns) open.push_back(uint32_t(it - ranges.begin()));
  }
  // Outermost first: the earlier start, and of two as early, the longer.
  std::stable_sort(open.begin(), open.end(), [&](uint32_t a, uint32_t b) {
    if (ranges[a].start_ns != ranges[b].start_ns) return ranges[a].start_ns < ranges[b].start_ns;
    return ranges[a].end_ns > ranges[b].end_ns;
  });
  return open;
}

void PlaceInRanges(const Session& session, Analysis& analysis) {
  if (session.nvtx_ranges.empty()) return;
  for (Freeze& freeze : analysis.freezes) {
    uint64_t middle = Middle(freeze.start_ns, freeze.end_ns);
    for (uint32_t tid : freeze.tids) {
      std::vector<uint32_t> ranges = RangesAt(session, tid, middle);
      freeze.nvtx_ranges.insert(freeze.nvtx_ranges.end(), ranges.begin(), ranges.end());
    }
  }
  for (BlockedCall& blocked : analysis.blocked_calls) {
    blocked.nvtx_ranges =
        RangesAt(session, blocked.call->tid, Middle(blocked.call->enter_ns, blocked.call->exit_ns));
  }
  for (GpuGap& gap : analysis.gaps) {
    // The thread the GPU waited for: the one that launched the work that ended the gap.
    uint32_t tid = gap.after_call != nullptr ? gap.after_call->tid
                   : gap.late_thread         ? gap.late_thread->tid
                                             : 0;
    if (tid != 0) gap.nvtx_ranges = RangesAt(session, tid, Middle(gap.start_ns, gap.end_ns));
  }
  for (Cause& cause : analysis.causes) {
    if (cause.longest_stall >= 0) {
      const Stall& stall = analysis.stalls[cause.longest_stall];
      uint64_t wake = stall.wait.start_ns + stall.asleep_ns();
      cause.nvtx_ranges = RangesAt(session, stall.tid, Middle(stall.wait.start_ns, wake));
    } else if (cause.longest_gap >= 0) {
      cause.nvtx_ranges = analysis.gaps[cause.longest_gap].nvtx_ranges;
    }
  }
  analysis.ranges = TotalRanges(session, analysis);
}

}  // namespace gprof::collector
