// The "signals" tracks, written by WriteTrace (perfetto_writer.cc).
#pragma once

#include "collector/model/model.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/track_registry.h"
#include "collector/writers/perfetto/vocabulary.h"

namespace gprof::collector::perfetto {

// Signals generated for the tree's threads: instants on each one's "signals" track, in time order
// (the records are, on each CPU only).
void WriteSignals(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                  StringInterner& interner, const Vocabulary& vocabulary);

}  // namespace gprof::collector::perfetto
