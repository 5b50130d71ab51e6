// The time-ordered merge of the session's records into the trace, called by WriteTrace
// (perfetto_writer.cc).
#pragma once

#include "collector/model/model.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/track_registry.h"
#include "collector/writers/perfetto/vocabulary.h"

namespace gprof::collector::perfetto {

// The slices, instants and flows of the session's record vectors (CUDA calls, off-CPU intervals,
// futex calls, the kernel track's records, GPU activities) on their threads', processes' and GPU
// streams' tracks, written in one pass in time order.
void WriteTimeline(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                   StringInterner& interner, CallstackInterner& callstacks,
                   const Vocabulary& vocabulary);

}  // namespace gprof::collector::perfetto
