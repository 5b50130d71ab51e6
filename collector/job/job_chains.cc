#include "collector/job/job_chains.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

// The receive with which `tid` read what ended its wait: its first receive after the wake, and
// before `handed_on_ns` (when it woke the thread that waited for it, if it was a link: a socket
// thread reads, then signals) if that is given.
const TcpTransfer* ReceiveAfter(
    const std::unordered_map<uint32_t, std::vector<const TcpTransfer*>>& receives, uint32_t tid,
    const Wait& wait, uint64_t handed_on_ns) {
  constexpr uint64_t kReadSoonAfterNs = 5'000'000;  // it read what woke it as soon as it ran
  auto of = receives.find(tid);
  if (of == receives.end()) return nullptr;
  const uint64_t woke = wait.wake_ns != 0 ? wait.wake_ns : wait.end_ns;
  const uint64_t until = handed_on_ns != 0 ? handed_on_ns : wait.end_ns + kReadSoonAfterNs;
  for (const TcpTransfer* transfer : of->second) {
    if (transfer->start_ns >= woke && transfer->start_ns <= until) return transfer;
  }
  return nullptr;
}

bool EndedInItsSession(const Session& session, const Wait& wait) {
  return wait.waker_tid != 0 && session.threads.contains(wait.waker_tid);
}

int64_t ToSession(uint64_t time_ns, int64_t from_offset, int64_t to_offset) {
  return static_cast<int64_t>(time_ns) + from_offset - to_offset;
}

}  // namespace

// A chain and where it stands: `asks` the sender's session for its thread's window, or is done.
struct JobChains::Pending {
  JobChain chain;
  Wait stall_wait;  // the stall's own, where the chain has no link yet
  uint32_t stall_tid = 0;
  bool done = false;
  int asks = -1;  // the session whose answer it waits for
  uint32_t tid = 0;
  uint64_t start_ns = 0, end_ns = 0;
};

JobChains::JobChains(std::vector<const SessionSummary*> summaries,
                     const std::vector<int64_t>& offsets, size_t max_links)
    : summaries_(std::move(summaries)), offsets_(offsets), max_links_(max_links) {
  std::vector<TcpStreams::Source> sources;
  for (size_t s = 0; s < summaries_.size(); ++s)
    sources.push_back({&summaries_[s]->kept, s < offsets.size() ? offsets[s] : 0});
  sends_ = std::make_unique<TcpStreams>(sources);
  for (const SessionSummary* summary : summaries_) {
    auto& receives = receives_.emplace_back();
    for (const TcpTransfer& transfer : summary->kept.tcp_transfers)
      if (!transfer.is_send && transfer.bytes() != 0) receives[transfer.tid].push_back(&transfer);
  }
}

JobChains::~JobChains() = default;

void JobChains::Start(int s, const Session& session, const Analysis& analysis) {
  for (size_t i = 0; i < analysis.stalls.size(); ++i) {
    const Stall& stall = analysis.stalls[i];
    // Only a rank's main thread's waits can be a rank's wait for another (rank_waits.h): the
    // other stalls' chains are not followed, their links not described.
    if (stall.tid != stall.pid || stall.profiler_tid != 0 || !StartedAsRank(session, stall.pid) ||
        !RankOfProcess(session, stall.pid))
      continue;
    Pending pending;
    pending.chain = {s, static_cast<int>(i), {}};
    for (const ChainLink& link : stall.chain)
      pending.chain.links.push_back(Detached(session, s, link));
    pending.stall_wait = stall.wait;
    pending.stall_wait.waker_call = nullptr;
    pending.stall_wait.data_send = nullptr;
    pending.stall_tid = stall.tid;
    chains_.push_back(std::move(pending));
    Advance(chains_.back());
  }
}

// Where the chain ends asleep on bytes from elsewhere, it asks their sender's session.
void JobChains::Advance(Pending& pending) {
  JobChain& chain = pending.chain;
  pending.asks = -1;
  const int r = chain.session;
  const Wait* wait = &pending.stall_wait;
  uint32_t reader = pending.stall_tid;
  int at = r;
  if (chain.links.size() >= max_links_) {
    pending.done = true;
    return;
  }
  if (!chain.links.empty()) {
    const JobLink& last = chain.links.back();
    if (last.link.state != ChainLink::State::kAsleep || !last.link.wait) {
      pending.done = true;
      return;
    }
    wait = &*last.link.wait;
    reader = last.link.tid;
    at = last.session;
  }
  const Session& here = summaries_[at]->kept;
  const TcpTransfer* receive = nullptr;
  if (!EndedInItsSession(here, *wait)) {
    receive = sends_->ReceiveAfterWait(at, reader, wait->start_ns);
    if (receive == nullptr)
      receive = ReceiveAfter(receives_[at], reader, *wait,
                             chain.links.empty() ? 0 : chain.links.back().link.end_ns);
  }
  std::optional<TcpSendRef> sender;
  if (receive != nullptr) sender = sends_->SenderOf(at, *receive);
  if (!sender || static_cast<int>(sender->session) == at) {
    pending.done = true;
    return;
  }
  const int there = static_cast<int>(sender->session);
  const uint64_t since = pending.stall_wait.start_ns;  // on session r's clock
  const int64_t from = ToSession(since, offsets_[r], offsets_[there]);
  pending.asks = there;
  pending.tid = sender->send->tid;
  pending.start_ns = static_cast<uint64_t>(std::max<int64_t>(from, 0));
  pending.end_ns = std::max(pending.start_ns, sender->send->start_ns);
}

bool JobChains::WaitsFor(int s) const {
  return std::any_of(chains_.begin(), chains_.end(),
                     [&](const Pending& pending) { return !pending.done && pending.asks == s; });
}

bool JobChains::Waiting() const {
  return std::any_of(chains_.begin(), chains_.end(),
                     [](const Pending& pending) { return !pending.done; });
}

void JobChains::Answer(int s, const Session& session, const ChainFollower& follower) {
  // A chain that goes on from `s` asks another session (its sender is never in `s`).
  for (Pending& pending : chains_) {
    while (!pending.done && pending.asks == s) {
      std::vector<ChainLink> links = follower.From(pending.tid, pending.start_ns, pending.end_ns);
      if (links.empty()) {
        pending.done = true;
        break;
      }
      for (const ChainLink& link : links) {
        if (pending.chain.links.size() == max_links_) break;
        pending.chain.links.push_back(Detached(session, s, link));
      }
      Advance(pending);
    }
  }
}

std::vector<JobChain> JobChains::Chains() && {
  std::vector<JobChain> chains;
  for (Pending& pending : chains_)
    if (!pending.chain.links.empty()) chains.push_back(std::move(pending.chain));
  return chains;
}

}  // namespace gprof::collector
