// What one session's threads sent another's: TCP transfers matched across sessions by their
// connection and the byte positions of the stream (both ends number the bytes of a direction
// alike), which bound how the sessions' clocks differ (clock_alignment.h). The same matching
// carries a wait's chain into the sender's session (job_chains.h).
#pragma once

#include <vector>

#include "collector/job/clock_alignment.h"
#include "collector/model/model.h"

namespace gprof::collector {

// Every receive of one session whose bytes a send of another session queued.
std::vector<SessionMessage> MessagesBetween(const std::vector<const Session*>& sessions);

}  // namespace gprof::collector
