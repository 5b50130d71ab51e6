// One clock for the sessions of a job. Sessions of one boot share the kernel's CLOCK_MONOTONIC,
// which every recorder's times are in (a time namespace's offsets are taken off when recorded):
// they need no correction. Sessions of other boots (other hosts) are placed by their REALTIME
// anchors (pairs of CLOCK_REALTIME and the recording clock read at the session's start and end),
// then corrected from the recording itself: a byte is received after it was sent, so each TCP
// transfer between two hosts bounds the difference of their clocks from one side, and transfers
// both ways bound it from both. The correction and the uncertainty left are stated per host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collector/model/model.h"

namespace gprof::collector {

// A message from one session's thread to another session's: it was sent at `sent_ns` (the send's
// start, on the sender's clock) and its receiver was done reading it at `received_ns` (on the
// receiver's clock).
struct SessionMessage {
  int from = 0, to = 0;  // sessions
  uint64_t sent_ns = 0;
  uint64_t received_ns = 0;
};

struct SessionClock {
  int64_t offset_ns = 0;        // job time = session time + offset_ns
  uint64_t uncertainty_ns = 0;  // how far off it may still be
  int reference = 0;            // the session whose clock is the job's (the first of its boot)
  bool same_boot = true;        // it shares the reference's clock
  // What placed it: "same boot", "REALTIME anchors", "REALTIME anchors, corrected by N
  // messages", "no anchors" (its times are taken as they are).
  std::string how;
  int64_t correction_ns = 0;  // what the messages moved it by from the anchors' placement
  size_t messages = 0;
  // Placed by anchors: both sessions recorded their wall clock's error bound, which the
  // uncertainty then includes; false: it holds only the anchors' brackets.
  bool wall_error_known = false;
  // False where nothing bounds it: no anchors, or anchors without both wall clocks' error bounds,
  // and no messages both ways (uncertainty_ns is then meaningless).
  bool uncertainty_known = true;
};

// The clocks of `sessions` (their SessionMeta: boot id, anchors) on the first session's, given
// the messages between them.
std::vector<SessionClock> AlignClocks(const std::vector<const SessionMeta*>& sessions,
                                      const std::vector<SessionMessage>& messages);

}  // namespace gprof::collector
