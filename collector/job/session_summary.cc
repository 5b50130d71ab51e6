#include "collector/job/session_summary.h"

#include "collector/analysis/nccl_collectives.h"
#include "collector/model/value_format.h"
#include "collector/writers/words/diagnosis_sentences.h"

namespace gprof::collector {
namespace {

Wait DetachedWait(const Wait& wait) {
  Wait kept = wait;
  kept.waker_call = nullptr;
  kept.data_send = nullptr;
  return kept;
}

}  // namespace

SessionSummary Summarize(const Session& session) {
  SessionSummary summary;
  Session& kept = summary.kept;
  kept.directory = session.directory;
  kept.meta = session.meta;
  summary.start_monotonic_ns = session.meta.start_monotonic_ns;
  // FormatOffset's origin, which is the first record's without session.json's start.
  kept.meta.start_monotonic_ns = SessionOrigin(session);
  for (const auto& [pid, process] : session.processes) {
    Process& copy = kept.processes[pid];
    copy.pid = process.pid;
    copy.ppid = process.ppid;
    copy.exe = process.exe;
    copy.cmdline = process.cmdline;
    copy.rank = process.rank;
  }
  kept.threads = session.threads;
  kept.tcp_transfers = session.tcp_transfers;
  // NCCL's collectives are matched across sessions: the plugin's events, or the NCCL kernels
  // that stand in for them.
  kept.nccl_events = NcclEventsOf(session, &kept.nccl_names);
  summary.trace_counts = CountTraceDetail(session);
  return summary;
}

void KeepStalls(const Analysis& analysis, SessionSummary* summary) {
  std::vector<Stall>& stalls = summary->stalls.stalls;
  stalls.assign(analysis.stalls.size(), Stall{});
  for (size_t i = 0; i < stalls.size(); ++i) {
    const Stall& stall = analysis.stalls[i];
    if (stall.tid != stall.pid) continue;  // only a main thread's waits are a rank's
    stalls[i].pid = stall.pid;
    stalls[i].tid = stall.tid;
    stalls[i].profiler_tid = stall.profiler_tid;
    stalls[i].wait = DetachedWait(stall.wait);
  }
}

JobLink Detached(const Session& session, int session_index, const ChainLink& link) {
  // Only a link in a rank's process can be the root of a rank's wait: only its words are said.
  JobLink kept{session_index,
               {},
               RankOfProcess(session, link.pid) ? DescribeLink(session, link) : std::string()};
  ChainLink& copy = kept.link;
  copy.pid = link.pid;
  copy.tid = link.tid;
  copy.owner = link.owner;
  copy.released = link.released;
  copy.creator = link.creator;
  copy.created_ns = link.created_ns;
  copy.start_ns = link.start_ns;
  copy.end_ns = link.end_ns;
  copy.state = link.state;
  copy.on_cpu_ns = link.on_cpu_ns;
  copy.asleep_ns = link.asleep_ns;
  copy.runnable_ns = link.runnable_ns;
  copy.call_ns = link.call_ns;
  copy.other_calls_ns = link.other_calls_ns;
  copy.other_calls = link.other_calls;
  if (link.wait) copy.wait = DetachedWait(*link.wait);
  copy.wait_class = link.wait_class;
  return kept;
}

}  // namespace gprof::collector
