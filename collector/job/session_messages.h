// What one session's threads sent another's: TCP transfers matched across sessions by their
// connection and the byte positions of the stream (both ends number the bytes of a direction
// alike), which bound how the sessions' clocks differ (clock_alignment.h) and carry a wait's chain
// from the reader that waited for the bytes into the sender's session (rank_waits.h).
#pragma once

#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/rank_waits.h"
#include "collector/job/clock_alignment.h"
#include "collector/model/model.h"

namespace gprof::collector {

// Every receive of one session whose bytes a send of another session queued.
std::vector<SessionMessage> MessagesBetween(const std::vector<const Session*>& sessions);

// The chains of the sessions' main threads' stalls (the waits a rank's can be); where one ends at
// a thread woken by bytes that arrived from
// another session (no thread of its own session ended the wait), it goes on in the sender's
// session: what held the sender up from the wait's start until it sent them, and so on.
std::vector<JobChain> ChainsAcrossSessions(const std::vector<JobSession>& sessions,
                                           const std::vector<const ChainFollower*>& followers,
                                           size_t max_links);

}  // namespace gprof::collector
