// One session's packets onto a trace file: the whole trace of WritePerfettoTrace
// (perfetto_writer.h), or one session's part of WriteMergedPerfettoTrace's (merged_trace.h).
// Defined in perfetto_writer.cc.
#pragma once

#include <cstdint>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/trace_file.h"
#include "collector/writers/perfetto/track_registry.h"

namespace gprof::collector::perfetto {

// Where the session's packets go; the defaults make a trace of one session.
struct SessionScope {
  uint32_t first_sequence_id = 1;  // its metadata's sequence; its tracks' follow
  bool clock_snapshot = true;      // a trace has one: the first session's
  SessionPlacement placement;
  TrackScope tracks;
};

// What the next session's scope must start after.
struct SessionEnd {
  uint32_t next_sequence_id;
  uint64_t max_flow_id;
};

// `diagnosis`: PerfettoOptions::diagnosis. Leaves `file` open.
SessionEnd WriteSessionPackets(const Session& session, const Analysis* diagnosis, TraceFile& file,
                               const SessionScope& scope);

}  // namespace gprof::collector::perfetto
