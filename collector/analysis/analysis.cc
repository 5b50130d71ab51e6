#include "collector/analysis/analysis.h"

#include <algorithm>

#include "collector/analysis/gpu_timeline.h"

namespace gprof::collector {
namespace {

// A freeze of slow calls is the stall freeze that overlaps it with a wait on its object (the
// first such one not already taken): one freeze, seen from both sides.
void MatchFreezes(Analysis& analysis) {
  for (size_t c = 0; c < analysis.call_freezes.size(); ++c) {
    Freeze& calls = analysis.call_freezes[c];
    for (size_t s = 0; s < analysis.freezes.size(); ++s) {
      Freeze& stalls = analysis.freezes[s];
      if (stalls.start_ns >= calls.end_ns || calls.start_ns >= stalls.end_ns) continue;
      const bool on_object = std::any_of(stalls.stalls.begin(), stalls.stalls.end(), [&](int i) {
        return analysis.stalls[i].wait.object == calls.object;
      });
      if (on_object && stalls.same < 0) {
        calls.same = static_cast<int>(s);
        stalls.same = static_cast<int>(c);
        break;
      }
    }
  }
}

}  // namespace

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
  MatchFreezes(analysis);
  analysis.gpu = SummarizeGpu(session, correlation);
  return analysis;
}

}  // namespace gprof::collector
