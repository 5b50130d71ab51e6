// The "gprof-run" track, written by WriteTrace (perfetto_writer.cc).
#pragma once

#include "collector/model/model.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/track_registry.h"
#include "collector/writers/perfetto/vocabulary.h"

namespace gprof::collector::perfetto {

// What the trace is missing, as instants at the session's start: lost events, the readers'
// diagnostics, the injected library's messages, kernel recording off, the recording's window and
// where --max-size cut.
void WriteGprofRunEvents(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                         StringInterner& interner, const Vocabulary& vocabulary);

}  // namespace gprof::collector::perfetto
