// The collector's whole job in one call: session directory in, trace and reports out.
#pragma once

#include <string>
#include <vector>

#include "analysis.h"
#include "diagnosis.h"
#include "status.h"

namespace gprof::collector {

inline constexpr char kTraceFile[] = "trace.perfetto-trace";
inline constexpr char kTextReportFile[] = "report.txt";
inline constexpr char kJsonReportFile[] = "report.json";

struct CollectOptions {
  AnalysisOptions analysis;
  DiagnosisOptions diagnosis;  // its wait threshold is the analysis's
  bool write_files = true;     // trace and reports into the session directory
};

struct CollectResult {
  std::string text_report;
  std::vector<std::string> warnings;  // damaged input, files that could not be written
  std::vector<std::string> written;   // paths of the files written
};

// Reads `directory`, explains it, writes trace.perfetto-trace, report.txt and report.json there.
// Fails only when nothing could be read; damage is reported in the result's warnings.
Expected<CollectResult> Collect(const std::string& directory, const CollectOptions& options);

}  // namespace gprof::collector
