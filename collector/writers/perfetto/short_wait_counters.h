// The counter tracks of short waits, written by WriteTrace (perfetto_writer.cc): those the kernel
// recorder counted (--count-under) and those the long-run guard left out of the trace's slices
// (TraceDetailFor, perfetto_writer.h).
#pragma once

#include "collector/model/model.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/track_registry.h"

namespace gprof::collector::perfetto {

// Short waits the kernel recorder counted (CountedWaits): per thread, counter tracks of how many
// (and how long, off-CPU) so far, stepping at the end of each counted period. Running totals, so
// that every wait counted is in the value whatever the periods; the UI's "rate" mode shows them
// per second.
void WriteCountedWaits(const Session& session, TrackRegistry& tracks, PacketWriter& packets);

}  // namespace gprof::collector::perfetto
