#include "collector/analysis/analysis.h"

#include <algorithm>
#include <set>

#include "collector/analysis/gpu_timeline.h"
#include "collector/analysis/nccl_collectives.h"
#include "collector/analysis/numbering.h"
#include "collector/analysis/report_view.h"

namespace gprof::collector {
Analysis Analyze(const Session& session, const AnalysisOptions& options) {
  return Analyze(session, options, WaitReader(session));
}

Analysis Analyze(const Session& session, const AnalysisOptions& options, const WaitReader& waits) {
  Analysis analysis;
  analysis.options = options;
  const GpuCorrelation correlation(session);
  const GpuBusyTimeline gpu_busy(session);
  DiagnoseWaits(session, waits, correlation, gpu_busy, analysis);
  ExplainSlowCalls(session, waits, correlation, gpu_busy, analysis);
  FindFreezes(session, waits, correlation, gpu_busy, analysis);
  analysis.gpu = SummarizeGpu(session, correlation);
  NumberCausesAndFreezes(analysis);
  MakeReportView(session, analysis);
  PlaceInRanges(session, analysis);
  // One session that recorded the whole job: its ranks are its processes. With fewer than two,
  // no rank can have waited for another here (a session of one rank: the merge's to say).
  std::set<int> ranks;
  for (const auto& [pid, process] : session.processes)
    if (auto rank = RankOfProcess(session, pid)) ranks.insert(*rank);
  const std::vector<JobSession> job = {{&session, &analysis, 0}};
  const RankOf rank_of = [&](int, uint32_t pid) { return RankOfProcess(session, pid); };
  std::vector<NcclCollective> nccl = MatchNcclCollectives(job, rank_of);
  if (ranks.size() >= 2 || !nccl.empty()) {
    std::vector<RankWait> nccl_waits;
    if (!nccl.empty()) {
      const ChainFollower follower(session, waits, options);
      nccl_waits = NcclRankWaits(job, nccl, [&](int, uint32_t tid, uint64_t start, uint64_t end) {
        std::vector<JobLink> links;
        for (const ChainLink& link : follower.From(tid, start, end)) links.push_back({0, link});
        return links;
      });
    }
    analysis.rank_waits = FindRankWaits(job, OwnChains(job), rank_of, WorldSizeOf(session),
                                        std::move(nccl), std::move(nccl_waits));
  }
  return analysis;
}

}  // namespace gprof::collector
