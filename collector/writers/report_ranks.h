// The RANKS section of a report: each rank's time waiting for others and the time it made others
// wait, worst first, then the collectives in which one rank arrived last, the longest wait first,
// each with why that rank was late. The same words for one session and for a merged job.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collector/analysis/rank_waits.h"

namespace gprof::collector {

// Empty when no rank waited for another.
std::string RankWaitsText(const std::vector<JobSession>& sessions, const RankWaits& waits,
                          size_t collectives_shown = 5);

// The same facts for report.json: "ranks" (totals, worst first), "waits" and "collectives".
nlohmann::json RankWaitsJson(const std::vector<JobSession>& sessions, const RankWaits& waits);

// The collectives as a picture for report.html (an inline SVG, no script): one row per collective,
// the longest waits first as the text lists them, each rank's wait a bar on the row's own time
// scale and the rank that arrived last a red bar as long as it was late; each bar's <title> says
// it in words. Empty when no rank waited for another.
std::string RankWaitsSvg(const RankWaits& waits, size_t collectives_shown = 12);

// The session's own NCCL records (its profiler plugin's), each with the NCCL kernel its thread
// launched next on the GPU timeline, where there was one; null without any record.
nlohmann::json NcclRecordsJson(const Session& session);

// "rank 1".
std::string RankName(int rank);

}  // namespace gprof::collector
