// The diagnosis in the report: the ranked causes first (the fix worth making first on the first
// line), the GPU's idle gaps and why the host was late, the threads that froze together and why.
#pragma once

#include <string>

#include "diagnosis.h"
#include "model.h"

namespace gprof::collector {

// The text section, ending with a newline; `max_listed` bounds each list (the JSON has all).
std::string RenderDiagnosisText(const Session& session, const Diagnosis& diagnosis,
                                size_t max_listed);

}  // namespace gprof::collector
