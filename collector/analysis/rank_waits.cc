#include "collector/analysis/rank_waits.h"

#include <algorithm>
#include <map>

#include "collector/analysis/analysis.h"

namespace gprof::collector {
namespace {

// A rank's thread waiting for another rank: the chain reaches another rank's process.
std::optional<RankWait> WaitForAnotherRank(const std::vector<JobSession>& sessions,
                                           const JobChain& chain, const RankOf& rank_of) {
  const JobSession& job_session = sessions[chain.session];
  const Stall& stall = job_session.analysis->stalls[chain.stall];
  // A rank's time is its main thread's, where the training loop runs (its helper threads, gloo's
  // or a feeder's, wait for work by design); a process it forked (a DataLoader worker) is part of
  // it, no rank of its own.
  if (stall.profiler_tid != 0 || stall.tid != stall.pid ||
      !StartedAsRank(*job_session.session, stall.pid))
    return std::nullopt;
  std::optional<int> waiting = rank_of(chain.session, stall.pid);
  if (!waiting) return std::nullopt;
  // The deepest link in another rank: the rank that held the wait up.
  int late_at = -1;
  std::optional<int> late;
  for (size_t i = 0; i < chain.links.size(); ++i) {
    std::optional<int> rank = rank_of(chain.links[i].session, chain.links[i].link.pid);
    if (rank && *rank != *waiting) late_at = static_cast<int>(i), late = rank;
  }
  if (!late) return std::nullopt;
  // A chain that comes back into the waiting rank after it: the other rank was waiting for this
  // one's own data (an exchange's round trip), not late.
  for (size_t i = late_at + 1; i < chain.links.size(); ++i) {
    std::optional<int> rank = rank_of(chain.links[i].session, chain.links[i].link.pid);
    if (rank && *rank == *waiting) return std::nullopt;
  }
  RankWait wait;
  wait.waiting_rank = *waiting;
  wait.late_rank = *late;
  wait.session = chain.session;
  wait.stall = chain.stall;
  wait.tid = stall.tid;
  const uint64_t end = stall.wait.wake_ns != 0 ? stall.wait.wake_ns : stall.wait.end_ns;
  wait.start_ns =
      static_cast<uint64_t>(static_cast<int64_t>(stall.wait.start_ns) + job_session.offset_ns);
  wait.end_ns = static_cast<uint64_t>(static_cast<int64_t>(end) + job_session.offset_ns);
  // Why it was late: the chain's root when it lies in that rank, else the deepest link there.
  const JobLink& last = chain.links.back();
  std::optional<int> last_rank = rank_of(last.session, last.link.pid);
  wait.root = last_rank && *last_rank == *late ? last : chain.links[late_at];
  return wait;
}

// Each rank's overlapping waits made one, the longest of them standing for it; an NCCL
// collective's wait before any other (NCCL's record names the collective and the late rank's
// kernel; a host thread's chain through the same time only sees what its GPU's driver did).
std::vector<RankWait> OneWaitPerOverlap(std::vector<RankWait> waits) {
  std::stable_sort(waits.begin(), waits.end(), [](const RankWait& a, const RankWait& b) {
    return a.waiting_rank != b.waiting_rank ? a.waiting_rank < b.waiting_rank
                                            : a.start_ns < b.start_ns;
  });
  std::vector<RankWait> merged;
  for (const RankWait& wait : waits) {
    // Two NCCL collectives are two waits, however close: the earlier ends where the next began.
    if (!merged.empty() && merged.back().waiting_rank == wait.waiting_rank &&
        merged.back().nccl >= 0 && wait.nccl >= 0 && merged.back().nccl != wait.nccl &&
        wait.start_ns < merged.back().end_ns) {
      merged.back().end_ns = std::max(merged.back().start_ns, wait.start_ns);
      merged.push_back(wait);
      continue;
    }
    if (!merged.empty() && merged.back().waiting_rank == wait.waiting_rank &&
        wait.start_ns < merged.back().end_ns) {
      RankWait& into = merged.back();
      const uint64_t start = std::min(into.start_ns, wait.start_ns);
      const uint64_t end = std::max(into.end_ns, wait.end_ns);
      const int nccl = into.nccl >= 0 ? into.nccl : wait.nccl;
      const bool prefer = (wait.nccl >= 0) != (into.nccl >= 0)
                              ? wait.nccl >= 0
                              : wait.duration() > into.duration();
      if (prefer) into = wait;
      into.nccl = nccl;
      into.start_ns = start;
      into.end_ns = end;
      continue;
    }
    merged.push_back(wait);
  }
  std::stable_sort(merged.begin(), merged.end(),
                   [](const RankWait& a, const RankWait& b) { return a.start_ns < b.start_ns; });
  return merged;
}

// Waits of different ranks that overlap, each rank once: one collective. A rank waited for in it
// waits in it for no one, and no rank waits in it for one that waits: the waits of two steps that
// touch (one rank late in one, another in the next) are two collectives.
std::vector<Collective> GroupCollectives(const std::vector<RankWait>& waits) {
  std::vector<Collective> collectives;
  // By rank: the current collective has a wait of it, a wait for it.
  std::vector<bool> waiting_in, late_in;
  auto has = [](const std::vector<bool>& ranks, int rank) {
    return rank >= 0 && static_cast<size_t>(rank) < ranks.size() && ranks[rank];
  };
  auto add = [](std::vector<bool>& ranks, int rank) {
    if (rank < 0) return;
    if (ranks.size() <= static_cast<size_t>(rank)) ranks.resize(rank + 1, false);
    ranks[rank] = true;
  };
  for (size_t i = 0; i < waits.size(); ++i) {
    const RankWait& wait = waits[i];
    if (collectives.empty() || wait.start_ns >= collectives.back().end_ns ||
        has(waiting_in, wait.waiting_rank) || has(late_in, wait.waiting_rank) ||
        has(waiting_in, wait.late_rank)) {
      collectives.push_back({wait.start_ns, wait.end_ns, {}, 0, 0});
      waiting_in.assign(waiting_in.size(), false);
      late_in.assign(late_in.size(), false);
    }
    Collective& collective = collectives.back();
    collective.start_ns = std::min(collective.start_ns, wait.start_ns);
    collective.end_ns = std::max(collective.end_ns, wait.end_ns);
    collective.waits.push_back(static_cast<int>(i));
    add(waiting_in, wait.waiting_rank);
    add(late_in, wait.late_rank);
  }
  for (Collective& collective : collectives) {
    std::stable_sort(collective.waits.begin(), collective.waits.end(),
                     [&](int a, int b) { return waits[a].duration() > waits[b].duration(); });
    const RankWait& longest = waits[collective.waits.front()];
    for (int w : collective.waits)
      if (collective.nccl < 0) collective.nccl = waits[w].nccl;
    collective.late_rank = longest.late_rank;
    collective.late_ns = longest.duration();
  }
  std::stable_sort(collectives.begin(), collectives.end(),
                   [](const Collective& a, const Collective& b) { return a.late_ns > b.late_ns; });
  return collectives;
}

}  // namespace

std::optional<int> RankOfProcess(const Session& session, uint32_t pid) {
  auto process = session.processes.find(pid);
  if (process == session.processes.end() || !process->second.rank || !process->second.rank->rank)
    return std::nullopt;
  return static_cast<int>(*process->second.rank->rank);
}

bool StartedAsRank(const Session& session, uint32_t pid) {
  auto process = session.processes.find(pid);
  if (process == session.processes.end() || !process->second.rank) return false;
  auto parent = session.processes.find(process->second.ppid);
  return parent == session.processes.end() || parent->second.rank != process->second.rank;
}

int WorldSizeOf(const Session& session) {
  int world_size = 0;
  for (const auto& [pid, process] : session.processes) {
    if (process.rank && process.rank->world_size)
      world_size = std::max(world_size, static_cast<int>(*process.rank->world_size));
  }
  return world_size;
}

std::vector<JobChain> OwnChains(const std::vector<JobSession>& sessions) {
  std::vector<JobChain> chains;
  for (size_t s = 0; s < sessions.size(); ++s) {
    const std::vector<Stall>& stalls = sessions[s].analysis->stalls;
    for (size_t i = 0; i < stalls.size(); ++i) {
      // Only a process's main thread waits for a rank (WaitForAnotherRank): no other chain is
      // copied.
      if (stalls[i].chain.empty() || stalls[i].tid != stalls[i].pid) continue;
      JobChain chain{static_cast<int>(s), static_cast<int>(i), {}};
      for (const ChainLink& link : stalls[i].chain)
        chain.links.push_back({static_cast<int>(s), link});
      chains.push_back(std::move(chain));
    }
  }
  return chains;
}

RankWaits FindRankWaits(const std::vector<JobSession>& sessions,
                        const std::vector<JobChain>& chains, const RankOf& rank_of,
                        int world_size, std::vector<NcclCollective> nccl,
                        std::vector<RankWait> nccl_waits) {
  RankWaits result;
  result.nccl = std::move(nccl);
  std::vector<RankWait> found = std::move(nccl_waits);
  for (const JobChain& chain : chains) {
    if (chain.links.empty()) continue;
    if (auto wait = WaitForAnotherRank(sessions, chain, rank_of)) found.push_back(*wait);
  }
  result.waits = OneWaitPerOverlap(std::move(found));
  result.collectives = GroupCollectives(result.waits);
  std::map<int, RankTotals> totals;
  for (const RankWait& wait : result.waits) {
    RankTotals& waiting = totals[wait.waiting_rank];
    waiting.rank = wait.waiting_rank;
    waiting.waited_ns += wait.duration();
    ++waiting.waits;
    RankTotals& late = totals[wait.late_rank];
    late.rank = wait.late_rank;
    late.made_wait_ns += wait.duration();
    ++late.made_waits;
  }
  for (auto& [rank, total] : totals) result.ranks.push_back(total);
  std::stable_sort(result.ranks.begin(), result.ranks.end(),
                   [](const RankTotals& a, const RankTotals& b) {
                     return a.made_wait_ns != b.made_wait_ns ? a.made_wait_ns > b.made_wait_ns
                                                             : a.waited_ns < b.waited_ns;
                   });
  result.world_size = world_size;
  for (const RankTotals& total : result.ranks)
    result.world_size = std::max(result.world_size, total.rank + 1);
  return result;
}

}  // namespace gprof::collector
