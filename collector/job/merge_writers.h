// The merged job written: report.txt (the sessions and how their clocks were placed, the RANKS
// section, then each session's SUMMARY), report.json (the same facts, each session's whole
// report.json inside), report.html (report.txt as a page, linking session-N.html, each session's
// own page with its pictures) and the trace (each session's timeline on the job's clock, its
// processes named by rank). Written as the merge goes: each session's part while it is held,
// the rest once the ranks' waits are known.
#pragma once

#include <memory>
#include <string>

#include "collector/job/merge.h"

namespace gprof::collector {

class MergedOutputs {
 public:
  // `job` (its sessions' summaries and clocks, its messages) must outlive this.
  MergedOutputs(const MergedJob& job, const std::string& out_directory, int out_fd);
  ~MergedOutputs();
  MergedOutputs(const MergedOutputs&) = delete;
  MergedOutputs& operator=(const MergedOutputs&) = delete;

  // Session `i`, held with its analysis (in order, each once): its part of report.json and of
  // the trace, its own page and its SUMMARY.
  void Add(size_t i, const Session& session, const Analysis& analysis);
  // The rest, once job.rank_waits is known: report.txt, report.json's end, report.html, the
  // trace's end. What could not be written is in the warnings.
  MergeResult Finish(MergeResult result);
  // A session could not be read again (changed since the first pass): the files begun are
  // removed, and `error` returned.
  Status Abandon(Status error);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string RenderMergedText(const MergedJob& job, const std::vector<std::string>& summaries,
                             const std::string& out_directory);

// The job's sessions as the analysis takes them: each on the job's clock, with how far it may be
// off and which share one clock (one boot).
std::vector<JobSession> JobViews(const MergedJob& job);

}  // namespace gprof::collector
