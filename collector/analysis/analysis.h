// The analysis of a session, one pipeline: every long sleep of every thread (a stall) with its
// class and the chain of threads that held it up to the root; stalls that share a cause grouped
// into causes, and those that overlapped into freezes (found once, for the stalls and the slow
// calls alike: freezes.h); every interval in which a GPU ran nothing,
// traced to the host thread it waited for; causes ranked by the GPU idle time, then the thread
// time, they explain. The slow CUDA calls are a view of the same waits (slow_calls.h). The
// writers say it all in words; nothing here does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/freezes.h"
#include "collector/analysis/gpu_summary.h"
#include "collector/analysis/nvtx_ranges.h"
#include "collector/analysis/rank_waits.h"
#include "collector/analysis/report_view.h"
#include "collector/analysis/slow_calls.h"
#include "collector/analysis/wait_reader.h"
#include "collector/model/model.h"

namespace gprof::collector {

// The one set of options of the analysis.
struct AnalysisOptions {
  uint64_t threshold_ns = 1'000'000;  // CUDA calls, and sleeps, at least this long are explained
  uint64_t gap_threshold_ns = 1'000'000;  // GPU idle intervals at least this long
  size_t max_chain = 10;                  // links followed from a wait to its root (a gloo
                                          // collective between two ranks takes 7)
};

struct Analysis {
  AnalysisOptions options;
  bool kernel_recorded = false;    // without the kernel's record no wait can be explained
  std::vector<Stall> stalls;       // in time order
  std::vector<Cause> causes;       // ranked: GPU idle explained, then blocked thread time
  // The thread the program's critical path starts from (critical_path.h); 0: none was found, and
  // no wait is known to be on it or off it.
  uint32_t critical_path_tid = 0;
  // Ranks of the job (processes started with RANK, SLURM_PROCID...) that waited for each other:
  // which, how long, and why the last to arrive was late (rank_waits.h). Empty without two ranks.
  RankWaits rank_waits;
  // The stalls' freezes in time order, then those only the slow calls saw (freezes.h).
  std::vector<Freeze> freezes;
  std::vector<int> freezes_by_number;  // into freezes: freeze 1 first (numbering.h)
  std::vector<GpuGap> gaps;        // in time order, of every GPU
  std::vector<GpuDevice> devices;  // the GPUs the gaps are on
  // Threads runnable the threshold or more, or whose waits were held up that long for want of a
  // CPU; by runnable time, longest first (those short_of_cpu are the CPU cause's threads).
  std::vector<CpuWait> cpu_waits;
  ProfilerCost profiler_cost;
  LockUsers lock_users;  // the user locks' libraries, for the one name the text gives each
  // The slow-call view.
  std::vector<BlockedCall> blocked_calls;  // slow calls, in time order
  GpuSummary gpu;
  // What the writers show, totalled once (report_view.h): the kernel recorder's counts, the GPU
  // gaps per GPU (as devices) and in all.
  CountedTotals counted;
  std::vector<GapTotals> gap_totals;
  GapTotals all_gaps;
  std::vector<RangeTotals> ranges;  // the RANGES table (nvtx_ranges.h), longest total first
  uint64_t slow_call_count() const { return blocked_calls.size(); }
};

Analysis Analyze(const Session& session, const AnalysisOptions& options);
// The same with an index of the session's waits made beforehand.
Analysis Analyze(const Session& session, const AnalysisOptions& options, const WaitReader& waits);

}  // namespace gprof::collector
