// `gprof-run dump --json FILE` and `--html FILE`: the snapshot and what it means, in the words of
// the text (words/dump_words.h). The JSON gives every thread (the text shows a large group's first
// only); the HTML page is the text itself, for a browser or a ticket.
#pragma once

#include <string>

#include "collector/live/dump_analysis.h"
#include "collector/live/proc_snapshot.h"

namespace gprof::collector {

std::string DumpJson(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis);
std::string DumpHtml(const live::Snapshot& snapshot, const live::DumpAnalysis& analysis);

}  // namespace gprof::collector
