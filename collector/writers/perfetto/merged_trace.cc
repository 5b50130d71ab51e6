// WriteMergedPerfettoTrace: each session's packets as WritePerfettoTrace writes them
// (session_packets.h), one after the other into one file, each session with its own sequence ids,
// track uuid salt, flow ids and time offset (SessionScope). Interned strings are per sequence, so
// each session keeps its own interners.
#include "collector/writers/perfetto/merged_trace.h"

#include <exception>
#include <vector>

#include "collector/writers/perfetto/session_packets.h"
#include "collector/writers/perfetto/trace_file.h"

namespace gprof::collector {

void ShareTraceDetail(std::span<Session* const> sessions, uint64_t max_bytes) {
  std::vector<const Session*> all(sessions.begin(), sessions.end());
  uint64_t unused = 0;
  const uint64_t under = TraceDetailFor(all, max_bytes, &unused);
  for (Session* session : sessions) {
    const Session* one[] = {session};
    TraceDetailFor(one, max_bytes, &session->trace_full_bytes);
    session->trace_detail_under_ns = under;
  }
}

Status WriteMergedPerfettoTrace(const std::vector<TraceSession>& sessions, int dir_fd,
                                const std::string& name, const std::string& path) {
  for (const TraceSession& part : sessions) {
    if (static_cast<int64_t>(part.session->meta.start_monotonic_ns) + part.offset_ns < 0) {
      return Status::Error(StatusCode::kInvalid, "cannot write Perfetto trace " + path +
                                                     ": session " + part.session->directory +
                                                     " would start before the job's clock");
    }
  }
  perfetto::TraceFile file(dir_fd, name, path);
  if (Status opened = file.Open(); !opened.ok()) return opened;
  // Exceptions stop at the module boundary; the only one expected here is running out of memory.
  try {
    perfetto::SessionEnd end{1, 0};
    for (size_t i = 0; i < sessions.size(); ++i) {
      const TraceSession& part = sessions[i];
      perfetto::SessionScope scope;
      scope.first_sequence_id = end.next_sequence_id;
      scope.clock_snapshot = i == 0;
      scope.placement.time_offset_ns = static_cast<uint64_t>(part.offset_ns);
      scope.placement.flow_id_offset = end.max_flow_id;
      scope.tracks.uuid_salt = uint64_t{i} << perfetto::kTrackUuidSaltShift;
      scope.tracks.label = part.label;
      end = perfetto::WriteSessionPackets(*part.session, part.analysis, file, scope);
    }
    return file.Close();
  } catch (const std::exception& error) {
    return Status::Error(StatusCode::kOutOfMemory,
                         "cannot write Perfetto trace " + path + ": " + error.what());
  }
}

}  // namespace gprof::collector
