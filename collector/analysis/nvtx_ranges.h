// The program's own words about where it was (NVTX ranges, docs/nvtx.md): the ranges each freeze,
// slow call, GPU gap and cause happened in, and the RANGES table (per name and domain: how often,
// how long, how much of it its thread slept, how much of it the GPU was idle). Facts only: the
// words are writers/words/sentences.h's (InRangesWords).
#pragma once

#include <cstdint>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;

// The ranges of one name in one domain, summed over their instances.
struct RangeTotals {
  uint32_t name = 0;    // Session::nvtx_strings
  uint32_t domain = 0;  // Session::nvtx_strings; 0: the default domain
  size_t count = 0;
  size_t open = 0;           // of them, still open when the recording ended
  uint64_t total_ns = 0;     // their durations
  uint64_t blocked_ns = 0;   // of it, their thread asleep (recorded off-CPU sleeps, not preemption)
  uint64_t gpu_idle_ns = 0;  // of it, their process's GPU idle in the GPU gaps (Analysis::gaps)
};

// The ranges open on thread `tid` at `time_ns`, outermost first: indices into
// Session::nvtx_ranges.
std::vector<uint32_t> RangesAt(const Session& session, uint32_t tid, uint64_t time_ns);

// The pipeline's NVTX step, after the freezes and gaps: each freeze's, slow call's, gap's and
// cause's ranges (nvtx_ranges fields), and Analysis::ranges, by total time, longest first.
void PlaceInRanges(const Session& session, Analysis& analysis);

}  // namespace gprof::collector
