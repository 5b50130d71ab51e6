// `gprof-run dump`'s text: the deadlocks first, then the chains from waiters to roots, then the
// threads grouped by what they wait on (hundreds of threads in one screen).
#pragma once

#include <string>

#include "collector/live/dump_analysis.h"
#include "collector/live/proc_snapshot.h"

namespace gprof::collector {

std::string DumpText(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis);

// What `thread` waits on, in words: "futex 0x7f12 FUTEX_WAIT_PRIVATE", "read fd 5 (pipe:[12])".
std::string DescribeWait(const live::ThreadSnapshot& thread);

}  // namespace gprof::collector
