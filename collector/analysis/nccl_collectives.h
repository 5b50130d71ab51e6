// NCCL's collectives matched across ranks (docs/distributed.md, "NCCL"): the plugin's record of
// each rank's collective (Session::nccl_events) grouped by communicator, function and NCCL's
// sequence number (which counts each function's collectives apart) where the plugin had them,
// else by the order of each rank's collectives on the communicator; a process the plugin told
// nothing of gives its NCCL kernels of the GPU timeline instead (ncclDevKernel_AllReduce_...),
// matched by their order. NCCL starts a record just after launching the collective's kernel, on
// the launching thread: the record's kernel is the last NCCL kernel that thread launched. A rank
// arrives when that kernel starts on its GPU (else at the launch); an earlier rank's kernel
// waits for the last one's, so each rank waited from its arrival to the last's. Why the last was
// late: its GPU, where its kernel waited there behind other work most of that time; else its
// thread's chain until it launched the kernel (diagnosis.h's ChainFollower).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "collector/analysis/rank_waits.h"

namespace gprof::collector {

// A chain of `tid` in `session` over [start_ns, end_ns] of that session's clock.
using ChainOf = std::function<std::vector<JobLink>(int session, uint32_t tid, uint64_t start_ns,
                                                   uint64_t end_ns)>;

// A session's NCCL events as the matching reads them: the plugin's, then, for each process the
// plugin told no collective of, its NCCL kernels on the GPU timeline in launch order (no
// sequence number). Their `func` indexes `names`, the session's nccl_names and the kernels'.
std::vector<NcclEvent> NcclEventsOf(const Session& session, std::vector<std::string>* names);

// The job's NCCL collectives that two ranks or more took part in, by their first arrival.
std::vector<NcclCollective> MatchNcclCollectives(const std::vector<JobSession>& sessions,
                                                 const RankOf& rank_of);

// Each rank's wait for the last to arrive, with the last's chain's root as why (RankWait::nccl
// indexes `collectives`).
std::vector<RankWait> NcclRankWaits(const std::vector<JobSession>& sessions,
                                    const std::vector<NcclCollective>& collectives,
                                    const ChainOf& chain_of);

}  // namespace gprof::collector
