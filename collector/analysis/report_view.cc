#include "collector/analysis/report_view.h"

#include <algorithm>
#include <utility>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

// The longest of `stalls` (the first of those as long) whose wait `pick` accepts; -1: none.
template <typename Pick>
int LongestWhere(const Analysis& analysis, const std::vector<int>& stalls, Pick pick) {
  int longest = -1;
  for (int s : stalls) {
    const Stall& stall = analysis.stalls[s];
    if (pick(stall) && (longest < 0 || stall.asleep_ns() > analysis.stalls[longest].asleep_ns()))
      longest = s;
  }
  return longest;
}

bool SameGpu(const GpuDevice& a, const GpuDevice& b) {
  return a.ordinal == b.ordinal && a.uuid == b.uuid;
}

}  // namespace

CountedTotals CountRecorderTotals(const Session& session) {
  CountedTotals totals;
  for (const CountedWaits& counted : session.counted_waits) {
    totals.waits.Add(counted);
    totals.by_thread[counted.tid].Add(counted);
  }
  for (const auto& [tid, thread] : session.threads) {
    totals.quick_page_faults += thread.quick_page_faults;
    totals.quick_page_fault_ns += thread.quick_page_fault_ns;
  }
  for (const auto& [cpu, count] : session.spin_contention_by_cpu) totals.spin_contentions += count;
  return totals;
}

void MakeReportView(const Session& session, Analysis& analysis) {
  analysis.counted = CountRecorderTotals(session);
  analysis.gap_totals.assign(analysis.devices.size(), {});
  analysis.all_gaps = {};
  for (const GpuGap& gap : analysis.gaps) {
    for (GapTotals* totals : {&analysis.gap_totals[gap.device], &analysis.all_gaps}) {
      ++totals->gaps;
      totals->idle_ns += gap.duration();
      if (gap.cause >= 0) totals->explained_ns += gap.duration();
    }
  }
  auto any = [](const Stall&) { return true; };
  for (Cause& cause : analysis.causes) {
    cause.longest_stall = LongestWhere(analysis, cause.stalls, any);
    // Where the holder released the longest wait it ended (a waiter that passed the lock on
    // released it too, but the holder is the one to read); else the longest wait's waker.
    cause.told_release = LongestWhere(analysis, cause.stalls, [&](const Stall& stall) {
      return stall.wait.waker_python_stack != nullptr && stall.wait.waker_tid == cause.holder_tid;
    });
    if (cause.told_release < 0) cause.told_release = cause.longest_stall;
    for (int g : cause.gaps) {
      if (cause.longest_gap < 0 ||
          analysis.gaps[g].duration() > analysis.gaps[cause.longest_gap].duration())
        cause.longest_gap = g;
    }
  }
  for (Freeze& freeze : analysis.freezes)
    freeze.longest_stall = LongestWhere(analysis, freeze.stalls, any);
}

GapTotals GapTotalsOf(const Analysis& analysis, const GpuDevice& device) {
  GapTotals totals;
  for (size_t d = 0; d < analysis.devices.size() && d < analysis.gap_totals.size(); ++d) {
    if (!SameGpu(analysis.devices[d], device)) continue;
    totals.gaps += analysis.gap_totals[d].gaps;
    totals.idle_ns += analysis.gap_totals[d].idle_ns;
    totals.explained_ns += analysis.gap_totals[d].explained_ns;
  }
  return totals;
}

OtherLongWaits FindOtherLongWaits(const Analysis& analysis) {
  OtherLongWaits waits;
  waits.path_known = analysis.critical_path_tid != 0;
  for (size_t s = 0; s < analysis.stalls.size(); ++s) {
    const Stall& stall = analysis.stalls[s];
    const int index = static_cast<int>(s);
    if (stall.cause >= 0 || stall.profiler_tid != 0) continue;  // a cause, or gprof-run's cost
    if (stall.chain.empty()) {
      if (!IsIdleWait(stall)) waits.unended[stall.wait_class].push_back(index);
    } else if (waits.path_known && stall.joined_on_critical_path) {
      waits.joins.push_back(index);
    } else if (waits.path_known && !stall.on_critical_path) {
      waits.off_path.push_back(index);
    } else {
      waits.on_path.push_back(index);
    }
  }
  auto longer = [&](int a, int b) {
    return analysis.stalls[a].asleep_ns() > analysis.stalls[b].asleep_ns();
  };
  std::stable_sort(waits.on_path.begin(), waits.on_path.end(), longer);
  std::stable_sort(waits.off_path.begin(), waits.off_path.end(), longer);
  return waits;
}

uint64_t AsleepTotal(const Analysis& analysis, const std::vector<int>& stalls) {
  uint64_t total_ns = 0;
  for (int s : stalls) total_ns += analysis.stalls[s].asleep_ns();
  return total_ns;
}

int LongestOf(const Analysis& analysis, const std::vector<int>& stalls) {
  return LongestWhere(analysis, stalls, [](const Stall&) { return true; });
}

std::vector<int> GapsLongestFirst(const Analysis& analysis) {
  std::vector<int> order(analysis.gaps.size());
  for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int>(g);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return analysis.gaps[a].duration() > analysis.gaps[b].duration();
  });
  return order;
}

std::vector<int> FreezesOfCalls(const Analysis& analysis) {
  std::vector<int> order;
  for (size_t f = 0; f < analysis.freezes.size(); ++f) {
    if (analysis.freezes[f].calls) order.push_back(static_cast<int>(f));
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return analysis.freezes[a].calls->start_ns < analysis.freezes[b].calls->start_ns;
  });
  return order;
}

std::vector<int> SlowCallsOutsideFreezes(const Analysis& analysis) {
  // Sorted by a copy of each duration: the calls are far apart in a session's records, which may
  // be in spill files (record_storage.h), and a sort reads its keys many times over.
  std::vector<std::pair<uint64_t, int>> by_duration;
  for (size_t i = 0; i < analysis.blocked_calls.size(); ++i) {
    const BlockedCall& blocked = analysis.blocked_calls[i];
    if (blocked.freeze < 0) by_duration.emplace_back(blocked.call->duration(), static_cast<int>(i));
  }
  std::stable_sort(by_duration.begin(), by_duration.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int> order;
  order.reserve(by_duration.size());
  for (const auto& [duration, index] : by_duration) order.push_back(index);
  return order;
}

size_t SlowCallsInFreezes(const Analysis& analysis) {
  return std::count_if(analysis.blocked_calls.begin(), analysis.blocked_calls.end(),
                       [](const BlockedCall& blocked) { return blocked.freeze >= 0; });
}

std::vector<const CpuWait*> DelayedByCpu(const Analysis& analysis) {
  std::vector<const CpuWait*> delayed;
  for (const CpuWait& wait : analysis.cpu_waits) {
    if (wait.latency_sensitive) delayed.push_back(&wait);
  }
  std::stable_sort(delayed.begin(), delayed.end(), [](const CpuWait* a, const CpuWait* b) {
    return a->delayed_ns() > b->delayed_ns();
  });
  return delayed;
}

}  // namespace gprof::collector
