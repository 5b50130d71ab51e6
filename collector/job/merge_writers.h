// The merged job written: report.txt (the sessions and how their clocks were placed, the RANKS
// section, then each session's SUMMARY), report.json (the same facts, each session's whole
// report.json inside), report.html (report.txt as a page, linking session-N.html, each session's
// own page with its pictures) and the trace (each session's timeline on the job's clock, its
// processes named by rank).
#pragma once

#include <string>

#include "collector/job/merge.h"

namespace gprof::collector {

std::string RenderMergedText(const MergedJob& job, const std::string& out_directory);

// Writes the four files into `out_fd`; what could not be written is in the warnings.
Expected<MergeResult> WriteMergedJob(const MergedJob& job, const std::string& out_directory,
                                     int out_fd, MergeResult result);

}  // namespace gprof::collector
