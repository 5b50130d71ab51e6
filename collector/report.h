// The report: for every slow CUDA call, where its time went, who held it up, what the GPU was doing
// meanwhile and the call's native stack; threads that froze together as one freeze with one cause.
// Text for people (printed after a run), JSON for tools.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis.h"
#include "diagnosis.h"
#include "model.h"

namespace gprof::collector {

struct ReportOptions {
  size_t max_listed = 20;  // freezes and slow calls printed in the text; the JSON has all
};

// With a diagnosis, the report opens with it (report_diagnosis.h) and report.json carries it as
// "diagnosis".
std::string RenderTextReport(const Session& session, const Analysis& analysis,
                             const ReportOptions& options = {},
                             const Diagnosis* diagnosis = nullptr);
nlohmann::json RenderJsonReport(const Session& session, const Analysis& analysis,
                                const Diagnosis* diagnosis = nullptr);
// RenderJsonReport's tree as json::dump(1, ' ', false, replace) writes it, without a newline at
// its end, onto `output`; the slow calls and the stalls, which grow with the session, are made
// one at a time, so that the tree is never held whole.
void WriteJsonReport(const Session& session, const Analysis& analysis, const Diagnosis* diagnosis,
                     nlohmann::detail::output_adapter_t<char> output);

}  // namespace gprof::collector
