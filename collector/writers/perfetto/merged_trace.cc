// WriteMergedPerfettoTrace: each session's packets as WritePerfettoTrace writes them
// (session_packets.h), one after the other into one file, each session with its own sequence ids,
// track uuid salt, flow ids and time offset (SessionScope). Interned strings are per sequence, so
// each session keeps its own interners.
#include "collector/writers/perfetto/merged_trace.h"

#include <algorithm>
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

struct MergedTraceWriter::State {
  perfetto::TraceFile file;
  std::string path;
  Status status;
  bool open = false;
  size_t added = 0;
  perfetto::SessionEnd end{1, 0};
  int64_t shift_ns = 0;  // added to every session's offset
};

MergedTraceWriter::MergedTraceWriter(int dir_fd, const std::string& name, const std::string& path)
    : state_(new State{perfetto::TraceFile(dir_fd, name, path), path}) {}

MergedTraceWriter::~MergedTraceWriter() = default;

Status MergedTraceWriter::Open(const std::vector<int64_t>& starts_ns) {
  // A session placed before the job clock's 0 (another host's, recorded before the first
  // session's host booted) moves every session as much later: a trace's times are unsigned.
  for (int64_t start : starts_ns) state_->shift_ns = std::max(state_->shift_ns, -start);
  state_->status = state_->file.Open();
  state_->open = state_->status.ok();
  return state_->status;
}

void MergedTraceWriter::Add(const TraceSession& part) {
  const size_t i = state_->added++;
  if (!state_->open || !state_->status.ok()) return;
  // Exceptions stop at the module boundary; the only one expected here is running out of memory.
  try {
    perfetto::SessionScope scope;
    scope.first_sequence_id = state_->end.next_sequence_id;
    scope.clock_snapshot = i == 0;
    scope.placement.time_offset_ns = static_cast<uint64_t>(part.offset_ns + state_->shift_ns);
    scope.placement.flow_id_offset = state_->end.max_flow_id;
    scope.tracks.uuid_salt = uint64_t{i} << perfetto::kTrackUuidSaltShift;
    scope.tracks.label = part.label;
    state_->end = perfetto::WriteSessionPackets(*part.session, part.analysis, state_->file, scope);
  } catch (const std::exception& error) {
    state_->status =
        Status::Error(StatusCode::kOutOfMemory,
                      "cannot write Perfetto trace " + state_->path + ": " + error.what());
  }
}

Status MergedTraceWriter::Close() {
  if (!state_->open) return state_->status;
  state_->open = false;
  Status closed = state_->file.Close();
  return state_->status.ok() ? closed : state_->status;
}

Status WriteMergedPerfettoTrace(const std::vector<TraceSession>& sessions, int dir_fd,
                                const std::string& name, const std::string& path) {
  std::vector<int64_t> starts;
  for (const TraceSession& part : sessions)
    starts.push_back(static_cast<int64_t>(part.session->meta.start_monotonic_ns) + part.offset_ns);
  MergedTraceWriter writer(dir_fd, name, path);
  if (Status opened = writer.Open(starts); !opened.ok()) return opened;
  for (const TraceSession& part : sessions) writer.Add(part);
  return writer.Close();
}

}  // namespace gprof::collector
