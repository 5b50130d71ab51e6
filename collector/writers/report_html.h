// report.html: the report as one self-contained page that any browser opens offline: the summary,
// the tables of CUDA calls and GPU kernels, and for each top cause, freeze and GPU gap a picture
// of the threads involved on one time axis (inline SVG, no script), with the report's words
// beside it. A Content-Security-Policy of default-src 'none' keeps the page from loading
// anything, so a name in it can never make the browser reach the network.
#pragma once

#include <string>
#include <string_view>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"

namespace gprof::collector {

inline constexpr char kHtmlReportFile[] = "report.html";

struct HtmlReportOptions {
  size_t max_causes = 8;       // causes pictured; all are listed in the summary
  size_t max_freezes = 8;      // the longest
  size_t max_gaps = 8;         // the longest
  size_t max_table_rows = 25;  // rows of each table (report.json has all)
};

// The page; `text_report` (report.txt) is kept whole at its end, folded.
// `text` with HTML's special characters escaped, for an element's text or an attribute.
std::string EscapeHtml(std::string_view text);

std::string RenderHtmlReport(const Session& session, const Analysis& analysis,
                             std::string_view text_report, const HtmlReportOptions& options = {});

}  // namespace gprof::collector
