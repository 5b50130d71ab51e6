// The job's view over its ranks: which rank waited for which, in each collective, and why the
// rank that arrived last was late. A view over the stalls the diagnosis found (diagnosis.h), of
// one session that recorded the whole job or of several merged (merge.h): a stall of a rank's
// thread whose chain goes into another rank's process waited for that rank; the deepest rank the
// chain reaches is the one that held it up, and the chain's root there is why.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/diagnosis.h"
#include "collector/model/model.h"

namespace gprof::collector {

struct Analysis;

// One session of the job with its analysis, and how its clock maps onto the job's.
struct JobSession {
  const Session* session = nullptr;
  const Analysis* analysis = nullptr;
  int64_t offset_ns = 0;  // job time = session time + offset_ns
  // How far offset_ns may be off (UINT64_MAX: unknown); sessions of one `clock` (one boot) share
  // one and are exact against each other.
  uint64_t uncertainty_ns = 0;
  int clock = 0;
};

// How far apart two sessions' times may be placed wrongly on the job's clock.
inline uint64_t PairUncertainty(const JobSession& a, const JobSession& b) {
  if (a.clock == b.clock) return 0;
  if (a.uncertainty_ns == UINT64_MAX || b.uncertainty_ns == UINT64_MAX) return UINT64_MAX;
  return a.uncertainty_ns + b.uncertainty_ns;
}

// A link of a chain in the session it lies in (a chain followed across sessions goes on in
// another: merge.h).
struct JobLink {
  int session = 0;
  ChainLink link;
  // DescribeLink's words for it, where its session is no longer held when they are written (the
  // merge reads one session at a time: its links point into nothing); empty: said from the session.
  std::string text;
  // A late rank whose NCCL kernel, launched by link.tid, waited on its GPU behind this work
  // (the longest of it) for link.start_ns to link.end_ns: its GPU was late, not its thread.
  std::string queued_behind;
};

// A stall's chain across the job's sessions: the stall's own chain, extended where it left its
// session (a TCP read whose data another session's thread sent).
struct JobChain {
  int session = 0;  // the stall's
  int stall = 0;    // into that session's Analysis::stalls
  std::vector<JobLink> links;
};

// A process's rank in the job (its environment's RANK, SLURM_PROCID...), when it has one.
using RankOf = std::function<std::optional<int>(int session, uint32_t pid)>;

// A rank's arrival at a collective, on the job's clock: when its NCCL kernel started on its GPU,
// where the GPU timeline has it; else when its thread launched the kernel (NCCL's event, just
// after the launch, stands for it where the launch is unknown).
struct NcclArrival {
  int session = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  int rank = 0;           // in the job (its RANK...), else in the communicator
  uint64_t start_ns = 0;  // the arrival
  uint64_t host_ns = 0;   // its thread's launch: start_ns less the time the kernel was queued
  std::string queued_behind;  // the GPU work its kernel waited behind longest, if any
};

// One NCCL collective, matched across ranks (nccl_collectives.h).
struct NcclCollective {
  uint64_t comm_hash = 0;
  // NCCL's (it numbers each function's collectives on a communicator apart), or the collective's
  // place among all of the communicator's (by order).
  uint64_t seq_number = 0;
  bool by_seq = false;      // matched by NCCL's sequence number; false: by order
  std::string func;         // "AllReduce"
  std::vector<NcclArrival> arrivals;  // by rank
  // Which rank came last is not known: one on another clock than the latest (merge, other
  // hosts) arrived closer to it than the two clocks can be placed. No wait in it is claimed.
  bool order_unknown = false;
};

// One wait of a rank that another rank ended.
struct RankWait {
  int waiting_rank = 0;
  int late_rank = 0;
  int session = 0;  // the waiting thread's, and its stall (-1: an NCCL collective's wait)
  int stall = 0;
  uint32_t tid = 0;
  uint64_t start_ns = 0;  // on the job's clock
  uint64_t end_ns = 0;
  std::optional<JobLink> root;  // the chain's root in the late rank: why it was late
  int nccl = -1;  // the NCCL collective it waited in (RankWaits::nccl), -1: none known
  uint64_t duration() const { return end_ns - start_ns; }
};

// Waits of several ranks that overlap, each rank once: one collective (or one exchange), in which
// `late_rank` arrived last and the others waited for it.
struct Collective {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  std::vector<int> waits;  // into RankWaits::waits, longest first
  int late_rank = 0;
  uint64_t late_ns = 0;  // the longest wait for it: how late it was
  int nccl = -1;         // the NCCL collective it was (RankWaits::nccl), -1: none known
};

struct RankTotals {
  int rank = 0;
  uint64_t waited_ns = 0;     // its threads waited for other ranks
  uint64_t made_wait_ns = 0;  // other ranks' threads waited for it
  size_t waits = 0, made_waits = 0;
};

struct RankWaits {
  std::vector<RankWait> waits;          // by start
  std::vector<Collective> collectives;  // the longest wait first
  std::vector<RankTotals> ranks;        // the rank that made others wait most first
  int world_size = 0;                   // the largest the processes were told, or the ranks seen
  std::vector<NcclCollective> nccl;     // NCCL's collectives matched across ranks
};


// A process's rank in the job, from the environment it was started with; the largest world size
// a process of the session was told (0: none).
std::optional<int> RankOfProcess(const Session& session, uint32_t pid);
int WorldSizeOf(const Session& session);
// Whether a launcher started the process as a rank (its rank differs from its parent's), not a
// process a rank forked (a DataLoader worker, which inherits its rank).
bool StartedAsRank(const Session& session, uint32_t pid);

// The ranks' waits for each other over `chains` (one per stall to look at; a session's stalls
// without one are taken with their own chains), and in NCCL's collectives, matched across
// ranks, with their waits (nccl_collectives.h).
RankWaits FindRankWaits(const std::vector<JobSession>& sessions,
                        const std::vector<JobChain>& chains, const RankOf& rank_of, int world_size,
                        std::vector<NcclCollective> nccl = {},
                        std::vector<RankWait> nccl_waits = {});

// The own chains of the stalls that may be a rank's waits (its main thread's), each in its session.
std::vector<JobChain> OwnChains(const std::vector<JobSession>& sessions);

}  // namespace gprof::collector
