// The chains of the sessions' main threads' stalls (the waits a rank's can be), followed across
// sessions while the merge holds one session at a time (merge.h). Where a chain ends at a thread
// woken by bytes that arrived from another session (no thread of its own session ended the
// wait), it goes on in the sender's session: what held the sender up from the wait's start until
// it sent them, and so on. What a chain asks of the sender's session waits until that session is
// held; everything else (which receive, which send, on which clock) is read from the summaries.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/analysis/rank_waits.h"
#include "collector/analysis/tcp_streams.h"
#include "collector/job/session_summary.h"

namespace gprof::collector {

class JobChains {
 public:
  // `summaries` (their TCP transfers and threads) must outlive this and stay where they are;
  // `offsets`: each session's clock to the job's.
  JobChains(std::vector<const SessionSummary*> summaries, const std::vector<int64_t>& offsets,
            size_t max_links);
  ~JobChains();
  JobChains(const JobChains&) = delete;
  JobChains& operator=(const JobChains&) = delete;

  // Session `s` is held with its analysis: its main threads' stalls start their chains.
  void Start(int s, const Session& session, const Analysis& analysis);
  // Whether a chain waits for session `s`, or for any.
  bool WaitsFor(int s) const;
  bool Waiting() const;
  // Session `s` is held: the chains that wait for it go on, until none does.
  void Answer(int s, const Session& session, const ChainFollower& follower);
  // The chains that have links, in the order their stalls were started; once none waits.
  std::vector<JobChain> Chains() &&;

 private:
  struct Pending;
  void Advance(Pending& pending);

  std::vector<const SessionSummary*> summaries_;
  std::vector<int64_t> offsets_;
  size_t max_links_;
  std::unique_ptr<TcpStreams> sends_;
  std::vector<std::unordered_map<uint32_t, std::vector<const TcpTransfer*>>> receives_;
  std::vector<Pending> chains_;
};

}  // namespace gprof::collector
