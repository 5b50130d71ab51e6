// `gprof-run merge`: several sessions of one job (one per rank, per host, or per process group)
// read and explained each as `report` does, put on one clock (clock_alignment.h), their waits for
// each other's ranks followed across sessions (rank_waits.h, job_chains.h), and written as one
// report.txt, report.json, report.html and trace.
//
// One session is held at a time, so that the merge's memory is one session's, as `report`'s is,
// and a summary of each (session_summary.h). A first pass reads each for what the steps across
// sessions need: its TCP transfers (which place the clocks), its ranks, the trace guard's counts.
// A second reads each again, explains it, writes its part of every output and starts its main
// threads' chains; a chain that goes on in a session already let go waits for a later pass, which
// reads only the sessions asked.
#pragma once

#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/rank_waits.h"
#include "collector/job/clock_alignment.h"
#include "collector/job/session_summary.h"
#include "inject/shared/status.h"

namespace gprof::collector {

struct MergeOptions {
  AnalysisOptions analysis;
  uint64_t memory_budget_bytes = 0;  // for the merge's records; 0: DefaultMemoryBudget()
  int progress_fd = 2;
};

// What the merge keeps of one session: its summary, placed on the job's clock.
struct MergedSession {
  std::string directory;
  int dir_fd = -1;  // opened once, read in each pass
  SessionSummary summary;
  SessionClock clock;
  uint64_t trace_full_bytes = 0;  // its own trace at full detail (the guard's estimate)
};

struct MergedJob {
  std::vector<MergedSession> sessions;
  std::vector<SessionMessage> messages;  // the TCP transfers between sessions
  uint64_t trace_detail_under_ns = 0;    // the long-run guard, for the trace as a whole
  RankWaits rank_waits;
};

struct MergeResult {
  std::string text_report;
  std::vector<std::string> warnings;  // damaged input, files that could not be written
  std::vector<std::string> written;   // paths of the files written
};

// Reads `directories` (each opened once, relative to nothing else), merges them, and
// writes the reports and trace into the directory `out_fd` (shown as `out_directory`), where
// records past the memory budget are spilled meanwhile. Fails when a session cannot be read.
Expected<MergeResult> MergeSessions(const std::vector<std::string>& directories,
                                    const std::string& out_directory, int out_fd,
                                    const MergeOptions& options);

}  // namespace gprof::collector
