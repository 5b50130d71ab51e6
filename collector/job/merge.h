// `gprof-run merge`: several sessions of one job (one per rank, per host, or per process group)
// read and explained each as `report` does, put on one clock (clock_alignment.h), their waits for
// each other's ranks followed across sessions (rank_waits.h), and written as one report.txt,
// report.json, report.html and trace.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/rank_waits.h"
#include "collector/analysis/wait_reader.h"
#include "collector/job/clock_alignment.h"
#include "collector/model/model.h"
#include "inject/shared/status.h"

namespace gprof::collector {

struct MergeOptions {
  AnalysisOptions analysis;
  uint64_t memory_budget_bytes = 0;  // for all the sessions' records; 0: DefaultMemoryBudget()
  int progress_fd = 2;
};

// One merged session: read, explained, placed on the job's clock.
struct MergedSession {
  std::string directory;
  std::unique_ptr<Session> session;   // never moved: the analysis points into it
  std::unique_ptr<WaitReader> waits;  // while the merge follows chains across sessions
  Analysis analysis;
  SessionClock clock;
};

struct MergedJob {
  std::vector<MergedSession> sessions;
  std::vector<SessionMessage> messages;  // the TCP transfers between sessions
  RankWaits rank_waits;
};

struct MergeResult {
  std::string text_report;
  std::vector<std::string> warnings;  // damaged input, files that could not be written
  std::vector<std::string> written;   // paths of the files written
};

// Reads `directories` (each opened once, relative to nothing else), merges them, and writes the
// reports and trace into the directory `out_fd` (shown as `out_directory`), where records past the
// memory budget are spilled meanwhile. Fails when a session cannot be read at all.
Expected<MergeResult> MergeSessions(const std::vector<std::string>& directories,
                                    const std::string& out_directory, int out_fd,
                                    const MergeOptions& options);

// The merge's model, without writing anything (for tests and for the writers).
Expected<MergedJob> ReadJob(const std::vector<std::string>& directories,
                            const MergeOptions& options, std::vector<std::string>* warnings);

}  // namespace gprof::collector
