// What the writers show of the analysis, chosen here once so that every output shows the same and
// no writer decides: the long waits that were no cause, sorted into those the program waited for,
// the joins, those off its critical path and those no thread ended; which of a cause's or a
// freeze's waits is the one told; the totals of the counted waits and of the GPU gaps; the order
// lists are shown in. The writers only say them.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;
struct CpuWait;
struct GpuDevice;

// What the kernel recorder counted instead of recording one by one, in all and per thread.
struct CountedTotals {
  CountedWaitTotals waits;  // off-CPU intervals and futex calls under --count-under
  std::map<uint32_t, CountedWaitTotals> by_thread;
  uint64_t quick_page_faults = 0;
  uint64_t quick_page_fault_ns = 0;
  uint64_t spin_contentions = 0;
};
CountedTotals CountRecorderTotals(const Session& session);

// The GPU gaps of one GPU (or of all): how many, their idle time, the part a cause explains.
struct GapTotals {
  size_t gaps = 0;
  uint64_t idle_ns = 0;
  uint64_t explained_ns = 0;
};

// The pipeline's last step: the totals and choices below that are kept in the analysis
// (Analysis::counted, gap_totals, all_gaps; each cause's and freeze's told waits).
void MakeReportView(const Session& session, Analysis& analysis);

// The gaps of the GPU `device` is (one of GpuSummary::devices, or of Analysis::devices): those of
// every entry of Analysis::devices with its ordinal and UUID.
GapTotals GapTotalsOf(const Analysis& analysis, const GpuDevice& device);

// The long waits that were no cause and no cost of gprof-run's: a handoff (a condition variable,
// a join, a pipe or socket read, a child's exit) ended by another thread of the program, or one no
// thread of the program ended (a sleep, a timeout, I/O from outside). Indices into
// Analysis::stalls.
struct OtherLongWaits {
  bool path_known = false;  // the program's critical path was found
  // Handoffs on the path (all of them where it is unknown), then those off it; each longest first.
  std::vector<int> on_path;
  std::vector<int> off_path;
  // Joins through which the path went into the thread joined, in time order.
  std::vector<int> joins;
  // Those no thread ended, by class, each in time order: not the driver's poll or a handoff's
  // idle wait (IsIdleWait).
  std::map<WaitClass, std::vector<int>> unended;
  size_t handoffs() const { return on_path.size() + off_path.size() + joins.size(); }
};
OtherLongWaits FindOtherLongWaits(const Analysis& analysis);

// The time asleep of `stalls` (indices into Analysis::stalls), in all; the longest of them (the
// first of those as long), -1 when none.
uint64_t AsleepTotal(const Analysis& analysis, const std::vector<int>& stalls);
int LongestOf(const Analysis& analysis, const std::vector<int>& stalls);

// The GPU gaps, longest first (of two as long, the earlier).
std::vector<int> GapsLongestFirst(const Analysis& analysis);

// The freezes slow calls were blocked in, in the order of their calls (report.json's top-level
// "freezes"): indices into Analysis::freezes.
std::vector<int> FreezesOfCalls(const Analysis& analysis);

// The slow calls blocked in no freeze, longest first; how many were blocked in one.
std::vector<int> SlowCallsOutsideFreezes(const Analysis& analysis);
size_t SlowCallsInFreezes(const Analysis& analysis);

// The threads whose waits the lack of CPU made late (CpuWait::latency_sensitive), most delayed
// first.
std::vector<const CpuWait*> DelayedByCpu(const Analysis& analysis);

}  // namespace gprof::collector
