// WritePerfettoTrace: the trace file (trace_file.h) gets the packets the packet writer
// (packet_writer.h) encodes, on the tracks of the track registry (track_registry.h) and with the
// strings and stacks of the interners (interners.h): first the processes and threads, then the
// "gprof-run" track (gprof_run_track.h), the session's records in time order (timeline_writer.h),
// signals (signal_track.h), the counters of short waits (short_wait_counters.h) and the diagnosis
// (diagnosis_tracks.h). TraceDetailFor, the long-run guard, is here too.
#include "collector/writers/perfetto/perfetto_writer.h"

#include <fcntl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "collector/writers/perfetto/diagnosis_tracks.h"
#include "collector/writers/perfetto/gprof_run_track.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/perfetto/packet_sequence.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/session_packets.h"
#include "collector/writers/perfetto/short_wait_counters.h"
#include "collector/writers/perfetto/signal_track.h"
#include "collector/writers/perfetto/timeline_writer.h"
#include "collector/writers/perfetto/trace_file.h"
#include "collector/writers/perfetto/track_registry.h"
#include "collector/writers/perfetto/vocabulary.h"

namespace gprof::collector {
namespace perfetto {

SessionEnd WriteSessionPackets(const Session& session, const Analysis* diagnosis, TraceFile& file,
                               const SessionScope& scope) {
  StringInterner interner;
  CallstackInterner callstacks(interner);
  Vocabulary vocabulary(interner);
  PacketWriter packets(file, interner, callstacks, scope.placement);
  Sequence metadata(scope.first_sequence_id);
  if (scope.clock_snapshot) packets.WriteClockSnapshot(metadata, session.meta);
  TrackRegistry tracks(session, packets, metadata, scope.tracks);
  tracks.DescribeModel();
  WriteGprofRunEvents(session, tracks, packets, interner, vocabulary);
  WriteTimeline(session, tracks, packets, interner, callstacks, vocabulary);
  WriteSignals(session, tracks, packets, interner, vocabulary);
  WriteCountedWaits(session, tracks, packets);
  if (diagnosis != nullptr)
    WriteDiagnosisTracks(session, *diagnosis, tracks, packets, interner, vocabulary);
  return SessionEnd{tracks.next_sequence_id(), packets.max_flow_id()};
}

}  // namespace perfetto

uint64_t TraceDetailFor(const Session& session, uint64_t max_bytes, uint64_t* full_bytes) {
  const Session* sessions[] = {&session};
  return TraceDetailFor(sessions, max_bytes, full_bytes);
}

uint64_t TraceDetailFor(std::span<const Session* const> sessions, uint64_t max_bytes,
                        uint64_t* full_bytes) {
  std::vector<TraceDetailCounts> counts;
  for (const Session* session : sessions) counts.push_back(CountTraceDetail(*session));
  return TraceDetailFor(counts, max_bytes, full_bytes);
}

TraceDetailCounts CountTraceDetail(const Session& session) {
  TraceDetailCounts counts;
  auto note = [&](uint64_t duration_ns) {
    uint64_t us = duration_ns / 1000;
    size_t bucket = 0;
    while (us != 0 && bucket < counts.shorter.size()) us >>= 1, ++bucket;
    if (bucket < counts.shorter.size()) ++counts.shorter[bucket];
  };
  for (const OffCpuInterval& interval : session.off_cpu) note(interval.duration());
  for (const FutexCall& call : session.futex_calls) note(call.duration());
  counts.records = session.off_cpu.size() + session.futex_calls.size() + session.api_calls.size() +
                   session.gpu_activities.size() + session.lock_waits.size() +
                   session.device_waits.size() + session.page_faults.size() +
                   session.memory_map_calls.size();
  return counts;
}

uint64_t TraceDetailFor(std::span<const TraceDetailCounts> sessions, uint64_t max_bytes,
                        uint64_t* full_bytes) {
  TraceDetailCounts all;
  for (const TraceDetailCounts& counts : sessions) {
    all.records += counts.records;
    for (size_t bucket = 0; bucket < all.shorter.size(); ++bucket)
      all.shorter[bucket] += counts.shorter[bucket];
  }
  *full_bytes = all.records * kTraceBytesPerRecord;
  if (*full_bytes <= max_bytes) return 0;
  uint64_t left = all.records;
  for (size_t bucket = 0; bucket < all.shorter.size(); ++bucket) {
    left -= all.shorter[bucket];  // those under 2^bucket us
    if (left * kTraceBytesPerRecord <= max_bytes || bucket + 1 == all.shorter.size())
      return (uint64_t{1} << bucket) * 1000;
  }
  return 0;
}

Status WritePerfettoTrace(const Session& session, const std::string& path,
                          const PerfettoOptions& options) {
  return WritePerfettoTrace(session, AT_FDCWD, path, path, options);
}

Status WritePerfettoTrace(const Session& session, int dir_fd, const std::string& name,
                          const std::string& path, const PerfettoOptions& options) {
  perfetto::TraceFile file(dir_fd, name, path);
  if (Status opened = file.Open(); !opened.ok()) return opened;
  // Exceptions stop at the module boundary; the only one expected here is running out of memory.
  try {
    perfetto::WriteSessionPackets(session, options.diagnosis, file, {});
    return file.Close();
  } catch (const std::exception& error) {
    return Status::Error(StatusCode::kOutOfMemory,
                         "cannot write Perfetto trace " + path + ": " + error.what());
  }
}

}  // namespace gprof::collector
