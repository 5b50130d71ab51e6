// Threads blocked at the same time on one thing: the freezes, found once over the analysis's waits.
// A freeze is seen two ways, one entry each: the stalls (waits of the threshold or more) that
// overlapped and had one cause, and the slow CUDA calls of several threads whose longest sleep was
// on one object at once, with the thread that held it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/slow_calls.h"
#include "collector/analysis/wait_reader.h"
#include "collector/analysis/waits.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;

// The slow CUDA calls blocked in a freeze: calls of several threads whose longest sleep was on
// `object` and overlapped, and the thread that held it.
struct CallsInFreeze {
  uint64_t start_ns = 0;  // the span of the calls' waits on `object`
  uint64_t end_ns = 0;
  std::vector<uint32_t> tids;  // the calls' threads, in order of the wait's start
  WaitObject object;
  std::vector<FreezeMember> members;  // one per blocked call, in order of the wait's start
  std::optional<HolderActivity> holder;
  size_t thread_count() const { return tids.size(); }
};

// Threads blocked at the same time with one cause.
struct Freeze {
  uint64_t start_ns = 0;  // of the stalls where they froze, else of the calls
  uint64_t end_ns = 0;
  std::vector<uint32_t> tids;  // the frozen threads, by first wait (of the calls where no stall)
  std::vector<int> stalls;     // their waits, into Analysis::stalls; empty: only calls saw it
  int cause = -1;              // into Analysis::causes
  std::optional<CallsInFreeze> calls;  // the slow calls blocked in it, where there were
  size_t number = 0;                   // in every output: 1 the longest (numbering.h)
  int longest_stall = -1;              // its longest wait, the one told (report_view.h); -1: none
  // The NVTX ranges its threads were in, each thread's outermost first (nvtx_ranges.h).
  std::vector<uint32_t> nvtx_ranges;
  // Seen in the stalls (the diagnosis's waits), not only in slow calls: those come first in
  // Analysis::freezes, and are the ones the diagnosis's writers picture.
  bool of_stalls() const { return !stalls.empty(); }
};

// The pipeline's freeze step, after the waits' diagnosis and the slow calls: fills
// analysis.freezes (the stalls' freezes in time order, then those only slow calls saw, in time
// order), each stall's, slow call's and cause's freezes.
void FindFreezes(const Session& session, const WaitReader& waits,
                 const GpuCorrelation& correlation, const GpuBusyTimeline& gpu_busy,
                 Analysis& analysis);

// How many of analysis.freezes the stalls saw: they come first.
size_t StallFreezes(const Analysis& analysis);

}  // namespace gprof::collector
