// `gprof-run dump`'s text: the deadlocks first, then the chains from waiters to roots, then the
// threads grouped by what they wait on (hundreds of threads in one screen).
#pragma once

#include <string>

#include "collector/live/dump_analysis.h"
#include "collector/live/proc_snapshot.h"

namespace gprof::collector {

std::string DumpText(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis);

}  // namespace gprof::collector
