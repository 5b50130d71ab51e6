// The collector's whole job in one call: session directory in, trace and reports out.
#pragma once

#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/model/record_storage.h"
#include "inject/shared/status.h"

namespace gprof::collector {

inline constexpr char kTraceFile[] = "trace.perfetto-trace";
inline constexpr char kTextReportFile[] = "report.txt";
inline constexpr char kJsonReportFile[] = "report.json";

struct CollectOptions {
  AnalysisOptions analysis;
  bool write_files = true;  // trace and reports into the session directory
  // Memory for the records (record_storage.h); past it they are held in files in the session
  // directory. 0: DefaultMemoryBudget().
  uint64_t memory_budget_bytes = 0;
  // The session directory, already open (gprof-run's own descriptor): then the directory's path
  // only names it in messages and is never opened. -1: the path is opened, once.
  int directory_fd = -1;
  // Where a line shows how far a long read of the session is (read_progress.h), when it is a
  // terminal; -1: nowhere.
  int progress_fd = 2;
  // session.json's contents, read instead of the file: gprof-run could not write it (a disk quota
  // left no room), and the report must still say how the run went. Empty: the file is read.
  std::string session_meta_text;
};

struct CollectResult {
  std::string text_report;
  std::vector<std::string> warnings;  // damaged input, files that could not be written
  std::vector<std::string> written;   // paths of the files written
  std::vector<Session::UnwrittenOutput> not_written;  // and those that could not be, and why
  RecordStorageStats storage;         // where the records were held
  uint64_t api_calls = 0;             // the CUDA calls the session holds
};

// Reads `directory`, explains it, writes trace.perfetto-trace, report.txt, report.json and
// report.html there.
// Fails only when nothing could be read; damage is reported in the result's warnings. Every file
// is opened relative to one descriptor of the directory (session_files.h).
Expected<CollectResult> Collect(const std::string& directory, const CollectOptions& options);

}  // namespace gprof::collector
