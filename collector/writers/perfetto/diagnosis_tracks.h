// The diagnosis in the trace (PerfettoOptions::diagnosis), written by WriteTrace
// (perfetto_writer.cc) from what the analysis found (collector/analysis/analysis.h).
#pragma once

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/track_registry.h"
#include "collector/writers/perfetto/vocabulary.h"

namespace gprof::collector::perfetto {

// The "diagnosis" tracks' slices (freezes, GPU gaps, the waits of lock cycles) and the "why"
// tracks' instants with the flows from each frozen or deadlocked wait to the thread behind it.
void WriteDiagnosisTracks(const Session& session, const Analysis& diagnosis, TrackRegistry& tracks,
                          PacketWriter& packets, StringInterner& interner,
                          const Vocabulary& vocabulary);

}  // namespace gprof::collector::perfetto
