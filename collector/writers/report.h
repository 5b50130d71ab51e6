// The report: for every slow CUDA call, where its time went, who held it up, what the GPU was doing
// meanwhile and the call's native stack; threads that froze together as one freeze with one cause.
// Text for people (printed after a run), JSON for tools.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct ReportOptions {
  size_t max_listed = 20;  // freezes and slow calls printed in the text; the JSON has all
};

// The report opens with the diagnosis (a summary, then the causes); report.json carries it as
// "diagnosis".
std::string RenderTextReport(const Session& session, const Analysis& analysis,
                             const ReportOptions& options = {});
nlohmann::json RenderJsonReport(const Session& session, const Analysis& analysis);
// Takes report.json's text a block (up to 64 KiB) at a time.
using JsonOutput = std::function<void(std::string_view)>;
// RenderJsonReport's tree as json::dump(1, ' ', false, replace) writes it, without a newline at
// its end, onto `output`; the slow calls and the stalls, which grow with the session, are made
// one at a time, so that the tree is never held whole.
void WriteJsonReport(const Session& session, const Analysis& analysis, const JsonOutput& output);

}  // namespace gprof::collector
