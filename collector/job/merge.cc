#include "collector/job/merge.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>

#include "collector/analysis/nccl_collectives.h"
#include "collector/analysis/wait_reader.h"
#include "collector/job/job_chains.h"
#include "collector/job/merge_writers.h"
#include "collector/job/session_summary.h"
#include "collector/job/session_messages.h"
#include "collector/model/record_storage.h"
#include "collector/model/value_format.h"
#include "collector/session/read_progress.h"
#include "collector/session/session_files.h"
#include "collector/session/session_reader.h"

namespace gprof::collector {
namespace {

// Records past the budget go to files in the output directory while the merge runs.
class SpillInto {
 public:
  SpillInto(int dir_fd, const std::string& directory, uint64_t budget_bytes) {
    RecordStorage::Configure(directory, budget_bytes != 0 ? budget_bytes : DefaultMemoryBudget(),
                             dir_fd);
  }
  ~SpillInto() { RecordStorage::Configure("", 0); }
  SpillInto(const SpillInto&) = delete;
  SpillInto& operator=(const SpillInto&) = delete;
};

// The session directories, each opened once for every pass: a pass reads what the first did. One
// directory given twice (under two names, or a link) would count its ranks and waits twice.
Expected<std::vector<FileDescriptor>> OpenAll(const std::vector<std::string>& directories) {
  std::vector<FileDescriptor> opened;
  std::map<std::pair<dev_t, ino_t>, size_t> seen;
  for (size_t i = 0; i < directories.size(); ++i) {
    auto dir = OpenSessionDirectory(directories[i]);
    if (!dir.ok()) return dir.status();
    struct stat info {};
    if (fstat(dir->get(), &info) != 0)
      return Status::FromErrno(errno, PrintableName(directories[i]) + ": " + strerror(errno));
    auto [first, added] = seen.emplace(std::make_pair(info.st_dev, info.st_ino), i);
    if (!added)
      return Status::Error(StatusCode::kInvalid,
                           PrintableName(directories[first->second]) + " and " +
                               PrintableName(directories[i]) +
                               " are one session directory: give each session once");
    opened.push_back(std::move(*dir));
  }
  return opened;
}

Expected<Session> Read(const MergedSession& merged, const MergeOptions& options) {
  ReadProgress progress(options.progress_fd);
  return ReadSession(merged.dir_fd, merged.directory, &progress);
}

// The first pass: each session's summary, and its damage said once. Read from the last to the
// first, so that the first, which the second pass starts with, is still held (`first`).
Expected<MergedJob> Summarize(const std::vector<std::string>& directories,
                              const std::vector<FileDescriptor>& opened,
                              const MergeOptions& options, std::vector<std::string>* warnings,
                              std::optional<Session>* first) {
  MergedJob job;
  job.sessions.resize(directories.size());
  std::vector<std::vector<std::string>> damage(directories.size());
  for (size_t i = directories.size(); i-- > 0;) {
    MergedSession& merged = job.sessions[i];
    merged.directory = directories[i];
    merged.dir_fd = opened[i].get();
    first->reset();
    auto session = Read(merged, options);
    if (!session.ok()) return session.status();
    for (const Diagnostic& diagnostic : session->diagnostics) {
      damage[i].push_back(diagnostic.file + " at offset " + std::to_string(diagnostic.offset) +
                          ": " + diagnostic.message);
    }
    if (session->meta.cut_short == "still_recording")
      damage[i].insert(damage[i].begin(),
                       PrintableName(directories[i]) +
                           ": gprof-run is still recording it: merged as far as written");
    merged.summary = Summarize(*session);
    first->emplace(std::move(*session));
  }
  for (const std::vector<std::string>& said : damage)
    warnings->insert(warnings->end(), said.begin(), said.end());
  // The trace's long-run guard over all the sessions: one length under which short waits are
  // only counted, the same for every rank.
  std::vector<TraceDetailCounts> counts;
  for (const MergedSession& merged : job.sessions) counts.push_back(merged.summary.trace_counts);
  uint64_t unused = 0;
  job.trace_detail_under_ns = TraceDetailFor(counts, kTraceMaxBytes, &unused);
  for (MergedSession& merged : job.sessions)
    TraceDetailFor({&merged.summary.trace_counts, 1}, kTraceMaxBytes, &merged.trace_full_bytes);
  std::vector<const Session*> sessions;
  std::vector<const SessionMeta*> metas;
  for (const MergedSession& merged : job.sessions) {
    sessions.push_back(&merged.summary.kept);
    metas.push_back(&merged.summary.kept.meta);
  }
  job.messages = MessagesBetween(sessions);
  std::vector<SessionClock> clocks = AlignClocks(metas, job.messages);
  for (size_t i = 0; i < job.sessions.size(); ++i) job.sessions[i].clock = clocks[i];
  return job;
}

// The late ranks' chains NCCL's collectives ask for (NcclRankWaits), answered as the second pass
// holds each session: NcclRankWaits is asked once to learn the questions, and again for the
// waits once every session has answered.
class NcclChains {
 public:
  NcclChains(const std::vector<JobSession>& views, const std::vector<NcclCollective>& collectives)
      : views_(views), collectives_(collectives) {
    NcclRankWaits(views_, collectives_, [&](int s, uint32_t tid, uint64_t start, uint64_t end) {
      answers_[{s, tid, start, end}];
      return std::vector<JobLink>();
    });
  }
  bool Asks(int s) const {
    auto next = answers_.lower_bound({s, 0, 0, 0});
    return next != answers_.end() && std::get<0>(next->first) == s;
  }
  void Answer(int s, const Session& session, const ChainFollower& follower) {
    for (auto it = answers_.lower_bound({s, 0, 0, 0});
         it != answers_.end() && std::get<0>(it->first) == s; ++it) {
      const auto& [unused, tid, start, end] = it->first;
      (void)unused;
      for (const ChainLink& link : follower.From(tid, start, end))
        it->second.push_back(Detached(session, s, link));
    }
  }
  std::vector<RankWait> Waits() const {
    return NcclRankWaits(views_, collectives_,
                         [&](int s, uint32_t tid, uint64_t start, uint64_t end) {
                           auto found = answers_.find({s, tid, start, end});
                           return found != answers_.end() ? found->second
                                                          : std::vector<JobLink>();
                         });
  }

 private:
  const std::vector<JobSession>& views_;
  const std::vector<NcclCollective>& collectives_;
  std::map<std::tuple<int, uint32_t, uint64_t, uint64_t>, std::vector<JobLink>> answers_;
};

// A session's chains that another session's ask of it: read it again for them.
Status AnswerChains(size_t i, const MergedJob& job, const MergeOptions& options,
                    JobChains* chains) {
  auto session = Read(job.sessions[i], options);
  if (!session.ok()) return session.status();
  WaitReader waits(*session);
  ChainFollower follower(*session, waits, options.analysis);
  chains->Answer(static_cast<int>(i), *session, follower);
  return {};
}

}  // namespace

Expected<MergeResult> MergeSessions(const std::vector<std::string>& directories,
                                    const std::string& out_directory, int out_fd,
                                    const MergeOptions& options) {
  SpillInto spill(out_fd, out_directory, options.memory_budget_bytes);
  MergeResult result;
  auto opened = OpenAll(directories);
  if (!opened.ok()) return opened.status();
  std::optional<Session> held;  // the first session, read last in the first pass
  auto summarized = Summarize(directories, *opened, options, &result.warnings, &held);
  if (!summarized.ok()) return summarized.status();
  MergedJob& job = *summarized;
  std::vector<int64_t> offsets;
  for (const MergedSession& merged : job.sessions) offsets.push_back(merged.clock.offset_ns);
  std::vector<const SessionSummary*> summaries;
  for (const MergedSession& merged : job.sessions) summaries.push_back(&merged.summary);
  JobChains chains(std::move(summaries), offsets, options.analysis.max_chain * 3);
  // NCCL's collectives, matched from the summaries; what each late rank's thread did meanwhile
  // is asked of its session while the second pass holds it.
  const std::vector<JobSession> views = JobViews(job);
  const RankOf rank_of = [&](int s, uint32_t pid) {
    return RankOfProcess(job.sessions[s].summary.kept, pid);
  };
  std::vector<NcclCollective> nccl = MatchNcclCollectives(views, rank_of);
  NcclChains nccl_chains(views, nccl);
  MergedOutputs outputs(job, out_directory, out_fd);
  // The second pass: each session explained and written, its chains started, and those of the
  // sessions before it that ask it followed into it.
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    auto session = held ? Expected<Session>(std::move(*held)) : Read(job.sessions[i], options);
    held.reset();
    if (!session.ok()) return outputs.Abandon(session.status());
    Analysis analysis;
    {
      WaitReader waits(*session);  // its index is large: gone before the outputs are made
      analysis = Analyze(*session, options.analysis, waits);
      KeepStalls(analysis, &job.sessions[i].summary);
      chains.Start(static_cast<int>(i), *session, analysis);
      const bool chains_ask = chains.WaitsFor(static_cast<int>(i));
      const bool nccl_asks = nccl_chains.Asks(static_cast<int>(i));
      if (chains_ask || nccl_asks) {
        ChainFollower follower(*session, waits, options.analysis);
        if (chains_ask) chains.Answer(static_cast<int>(i), *session, follower);
        if (nccl_asks) nccl_chains.Answer(static_cast<int>(i), *session, follower);
      }
    }
    session->trace_detail_under_ns = job.trace_detail_under_ns;
    session->trace_full_bytes = job.sessions[i].trace_full_bytes;
    outputs.Add(i, *session, analysis);
  }
  // Later passes: the sessions that chains of later sessions went on into, read again.
  while (chains.Waiting()) {
    for (size_t i = 0; i < job.sessions.size(); ++i) {
      if (!chains.WaitsFor(static_cast<int>(i))) continue;
      if (Status answered = AnswerChains(i, job, options, &chains); !answered.ok())
        return outputs.Abandon(answered);
    }
  }
  int world_size = 0;
  for (const MergedSession& merged : job.sessions)
    world_size = std::max(world_size, WorldSizeOf(merged.summary.kept));
  std::vector<RankWait> nccl_waits = nccl_chains.Waits();
  job.rank_waits = FindRankWaits(views, std::move(chains).Chains(), rank_of, world_size,
                                 std::move(nccl), std::move(nccl_waits));
  return outputs.Finish(std::move(result));
}

}  // namespace gprof::collector
