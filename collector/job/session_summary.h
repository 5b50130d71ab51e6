// What the merge keeps of a session while it reads the others (merge.h): a Session that holds
// only what the steps across sessions read (its meta, processes and their ranks, threads, TCP
// transfers, NCCL events), the trace guard's counts, and a stand-in for its analysis whose main threads'
// stalls keep only who waited and when. The records, the index of waits and the analysis are
// let go with the session: the merge's memory is one session's and these.
#pragma once

#include <string>

#include "collector/analysis/analysis.h"
#include "collector/analysis/rank_waits.h"
#include "collector/model/model.h"
#include "collector/writers/perfetto/perfetto_writer.h"

namespace gprof::collector {

struct SessionSummary {
  Session kept;  // no records but its TCP transfers and NCCL events; nothing points elsewhere
  Analysis stalls;  // only stalls: each main thread's with its ids and wait times
  TraceDetailCounts trace_counts;
  uint64_t start_monotonic_ns = 0;  // session.json's (kept.meta's may be the first record's)
};

// The summary of a session as read (its analysis comes later: KeepStalls).
SessionSummary Summarize(const Session& session);

// The stalls of `analysis` that the ranks' waits read (rank_waits.h), at the same indices.
void KeepStalls(const Analysis& analysis, SessionSummary* summary);

// `link` of `session` without what points into the session, which will be let go, and with its
// words (DescribeLink) where it is in a rank's process (only such a link is a rank wait's root).
JobLink Detached(const Session& session, int session_index, const ChainLink& link);

}  // namespace gprof::collector
