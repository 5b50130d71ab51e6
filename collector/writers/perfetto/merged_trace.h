// Several sessions in one Perfetto trace, for `gprof-run merge`: each session's timeline as
// WritePerfettoTrace (perfetto_writer.h) writes it alone, moved onto the job's clock, with tracks,
// packet sequences and flow arrows of its own, and its processes named with its label.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/writers/perfetto/perfetto_writer.h"
#include "inject/shared/status.h"

namespace gprof::collector {

struct TraceSession {
  const Session* session = nullptr;
  const Analysis* analysis = nullptr;  // as PerfettoOptions::diagnosis; null: no diagnosis tracks
  // Job time = session time + offset_ns: every timestamp of the session is moved by it (its
  // MONOTONIC and BOOTTIME; a REALTIME already agrees across hosts and is not).
  int64_t offset_ns = 0;
  // "rank 1", "host b": its processes are named "rank 1: python3", its "gprof-run" and
  // "diagnosis" tracks "rank 1: gprof-run". Empty: named as alone.
  std::string label;
};

// The long-run guard (TraceDetailFor) for the trace of `sessions` as a whole: sets each session's
// trace_detail_under_ns to one length for all (0: everything fits) and its trace_full_bytes to its
// own estimate. Call it before the reports, which state both, and before WriteMergedPerfettoTrace.
void ShareTraceDetail(std::span<Session* const> sessions, uint64_t max_bytes = kTraceMaxBytes);

// Writes `sessions`, in this order, into the file `name` of the directory `dir_fd` (output_file.h),
// shown as `path`. The trace's clock snapshot is the first session's, moved by its offset. With one
// session whose offset is 0 and label empty, the file is WritePerfettoTrace's byte for byte.
// Returns an error naming `path` when the file cannot be written. A session that would start
// before the job clock's 0 (its start_monotonic_ns + offset_ns < 0) moves every session later by
// as much, the clock snapshot with them: trace time = job time + that shift.
Status WriteMergedPerfettoTrace(const std::vector<TraceSession>& sessions, int dir_fd,
                                const std::string& name, const std::string& path);

// The same file made a session at a time, for sessions that are not all held at once (the merge
// reads them one by one): Open, Add each in order (the session need not outlive the call), Close.
// The first error is kept; what follows it is not written.
class MergedTraceWriter {
 public:
  MergedTraceWriter(int dir_fd, const std::string& name, const std::string& path);
  ~MergedTraceWriter();
  MergedTraceWriter(const MergedTraceWriter&) = delete;
  MergedTraceWriter& operator=(const MergedTraceWriter&) = delete;

  // `starts_ns`: each session's start_monotonic_ns + offset_ns, which set the shift (above).
  Status Open(const std::vector<int64_t>& starts_ns);
  void Add(const TraceSession& part);
  Status Close();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gprof::collector
