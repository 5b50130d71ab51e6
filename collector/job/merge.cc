#include "collector/job/merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "collector/analysis/wait_reader.h"
#include "collector/job/merge_writers.h"
#include "collector/job/session_messages.h"
#include "collector/model/record_storage.h"
#include "collector/model/value_format.h"
#include "collector/session/read_progress.h"
#include "collector/session/session_files.h"
#include "collector/session/session_reader.h"
#include "collector/writers/perfetto/merged_trace.h"

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

Expected<MergedSession> ReadOne(const std::string& directory, const MergeOptions& options,
                                std::vector<std::string>* warnings) {
  auto dir = OpenSessionDirectory(directory);
  if (!dir.ok())
    return Status::Error(StatusCode::kNotFound,
                         PrintableName(directory) + ": no such session directory");
  MergedSession merged;
  merged.directory = directory;
  auto session = [&] {
    ReadProgress progress(options.progress_fd);
    return ReadSession(dir->get(), directory, &progress);
  }();
  if (!session.ok()) return session.status();
  merged.session = std::make_unique<Session>(std::move(*session));
  merged.waits = std::make_unique<WaitReader>(*merged.session);
  merged.analysis = Analyze(*merged.session, options.analysis, *merged.waits);
  for (const Diagnostic& diagnostic : merged.session->diagnostics) {
    warnings->push_back(diagnostic.file + " at offset " + std::to_string(diagnostic.offset) + ": " +
                        diagnostic.message);
  }
  return merged;
}

}  // namespace

Expected<MergedJob> ReadJob(const std::vector<std::string>& directories,
                            const MergeOptions& options, std::vector<std::string>* warnings) {
  MergedJob job;
  for (const std::string& directory : directories) {
    auto merged = ReadOne(directory, options, warnings);
    if (!merged.ok()) return merged.status();
    job.sessions.push_back(std::move(*merged));
  }
  // The trace's long-run guard over all the sessions: one length under which short waits are
  // only counted, the same for every rank.
  std::vector<Session*> mutable_sessions;
  for (MergedSession& merged : job.sessions) mutable_sessions.push_back(merged.session.get());
  ShareTraceDetail(mutable_sessions);
  std::vector<const Session*> sessions;
  std::vector<const SessionMeta*> metas;
  for (const MergedSession& merged : job.sessions) {
    sessions.push_back(merged.session.get());
    metas.push_back(&merged.session->meta);
  }
  job.messages = MessagesBetween(sessions);
  std::vector<SessionClock> clocks = AlignClocks(metas, job.messages);
  std::vector<JobSession> views;
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    job.sessions[i].clock = clocks[i];
    views.push_back(
        {job.sessions[i].session.get(), &job.sessions[i].analysis, clocks[i].offset_ns});
  }
  // Each session's waits stay indexed until the chains that cross sessions are followed.
  std::vector<std::unique_ptr<ChainFollower>> followers;
  std::vector<const ChainFollower*> follower_of;
  for (MergedSession& merged : job.sessions) {
    followers.push_back(
        std::make_unique<ChainFollower>(*merged.session, *merged.waits, options.analysis));
    follower_of.push_back(followers.back().get());
  }
  std::vector<JobChain> chains =
      ChainsAcrossSessions(views, follower_of, options.analysis.max_chain * 3);
  followers.clear();
  for (MergedSession& merged : job.sessions) merged.waits.reset();
  int world_size = 0;
  for (const Session* session : sessions) world_size = std::max(world_size, WorldSizeOf(*session));
  job.rank_waits = FindRankWaits(
      views, chains, [&](int s, uint32_t pid) { return RankOfProcess(*sessions[s], pid); },
      world_size);
  return job;
}

Expected<MergeResult> MergeSessions(const std::vector<std::string>& directories,
                                    const std::string& out_directory, int out_fd,
                                    const MergeOptions& options) {
  SpillInto spill(out_fd, out_directory, options.memory_budget_bytes);
  MergeResult result;
  auto job = ReadJob(directories, options, &result.warnings);
  if (!job.ok()) return job.status();
  return WriteMergedJob(*job, out_directory, out_fd, std::move(result));
}

}  // namespace gprof::collector
