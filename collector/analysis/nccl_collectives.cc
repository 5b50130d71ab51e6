#include "collector/analysis/nccl_collectives.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "inject/format/session_format.h"

namespace gprof::collector {

namespace {

// The collective an NCCL kernel's name says ("ncclDevKernel_AllReduce_Sum_f32_RING_LL":
// "AllReduce"), or "" for a kernel that is not NCCL's.
std::string NcclKernelFunc(const std::string& name) {
  for (std::string_view prefix : {"ncclDevKernel_", "ncclKernel_"}) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find('_', prefix.size());
    return name.substr(prefix.size(), end == std::string::npos ? end : end - prefix.size());
  }
  return "";
}

// A process's collectives as the GPU timeline shows them where the plugin told none: its NCCL
// kernels, each arriving when its launch call began, in the order they were launched.
std::vector<NcclEvent> CollectivesFromKernels(const Session& session,
                                              const std::set<uint32_t>& told,
                                              std::vector<std::string>* funcs) {
  std::vector<std::pair<const GpuActivity*, std::string>> kernels;
  for (const GpuActivity& activity : session.gpu_activities) {
    const auto* kernel = std::get_if<GpuKernel>(&activity.detail);
    if (kernel == nullptr || told.contains(activity.pid)) continue;
    std::string func = NcclKernelFunc(session.KernelName(*kernel));
    if (!func.empty()) kernels.emplace_back(&activity, std::move(func));
  }
  std::vector<NcclEvent> events;
  if (kernels.empty()) return events;  // no index of the calls for a session without NCCL
  std::map<std::pair<uint32_t, uint64_t>, const ApiCall*> launches;
  for (const ApiCall& call : session.api_calls)
    if (call.correlation_id != 0) launches[{call.pid, call.correlation_id}] = &call;
  for (auto& [kernel_activity, func] : kernels) {
    const GpuActivity& activity = *kernel_activity;
    auto launch = launches.find({activity.pid, activity.correlation_id});
    NcclEvent event;
    event.pid = activity.pid;
    // A kernel whose launch was not seen (launched before CUPTI started) keeps its place in the
    // order, without an arrival: sorted by its start on the GPU, its host time unknown (0).
    event.start_ns = activity.start_ns;
    if (launch != launches.end()) {
      event.tid = launch->second->tid;
      event.start_ns = launch->second->enter_ns;
      event.stop_ns = launch->second->exit_ns;
    }
    event.kind = static_cast<uint16_t>(format::NcclEventKind::kCollective);
    event.func = static_cast<uint32_t>(funcs->size());
    funcs->push_back(std::move(func));
    events.push_back(event);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const NcclEvent& a, const NcclEvent& b) { return a.start_ns < b.start_ns; });
  return events;
}

}  // namespace

std::vector<NcclEvent> NcclEventsOf(const Session& session, std::vector<std::string>* names) {
  std::set<uint32_t> told;  // processes the plugin told of collectives
  for (const NcclEvent& event : session.nccl_events)
    if (event.kind == static_cast<uint16_t>(format::NcclEventKind::kCollective))
      told.insert(event.pid);
  *names = session.nccl_names;
  std::vector<std::string> kernel_funcs;
  std::vector<NcclEvent> events = session.nccl_events;
  std::vector<NcclEvent> from_kernels = CollectivesFromKernels(session, told, &kernel_funcs);
  for (NcclEvent& event : from_kernels) {
    std::string& func = kernel_funcs[event.func];
    event.func = static_cast<uint32_t>(names->size());
    names->push_back(std::move(func));
    events.push_back(event);
  }
  return events;
}

std::vector<NcclCollective> MatchNcclCollectives(const std::vector<JobSession>& sessions,
                                                 const RankOf& rank_of) {
  // (communicator, sequence number, matched by seq) -> the collective.
  std::map<std::tuple<uint64_t, uint64_t, bool>, NcclCollective> by_key;
  for (size_t s = 0; s < sessions.size(); ++s) {
    const Session& session = *sessions[s].session;
    // Without NCCL's number, a collective's place among its process's on the communicator.
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> next_place;
    std::vector<std::string> names;
    const std::vector<NcclEvent> events = NcclEventsOf(session, &names);
    for (const NcclEvent& event : events) {
      if (event.kind != static_cast<uint16_t>(format::NcclEventKind::kCollective)) continue;
      const bool by_seq = (event.flags & format::kNcclHasSeqNumber) != 0;
      const uint64_t comm = (event.flags & format::kNcclHasCommHash) != 0 ? event.comm_hash : 0;
      const uint64_t seq = by_seq ? event.seq_number : next_place[{event.pid, comm}]++;
      NcclCollective& collective = by_key[{comm, seq, by_seq}];
      collective.comm_hash = comm;
      collective.seq_number = seq;
      collective.by_seq = by_seq;
      if (collective.func.empty() && event.func < names.size()) collective.func = names[event.func];
      if (event.tid == 0) continue;  // its place kept, no arrival known
      std::optional<int> rank = rank_of(static_cast<int>(s), event.pid);
      NcclArrival arrival;
      arrival.session = static_cast<int>(s);
      arrival.pid = event.pid;
      arrival.tid = event.tid;
      arrival.rank = rank ? *rank : event.rank;
      arrival.start_ns =
          static_cast<uint64_t>(static_cast<int64_t>(event.start_ns) + sessions[s].offset_ns);
      arrival.stop_ns =
          static_cast<uint64_t>(static_cast<int64_t>(event.stop_ns) + sessions[s].offset_ns);
      // One arrival per rank: a second of the same rank (two sessions of one rank) is not kept.
      bool known = std::any_of(collective.arrivals.begin(), collective.arrivals.end(),
                               [&](const NcclArrival& a) { return a.rank == arrival.rank; });
      if (!known) collective.arrivals.push_back(arrival);
    }
  }
  std::vector<NcclCollective> collectives;
  for (auto& [key, collective] : by_key) {
    if (collective.arrivals.size() < 2) continue;
    std::sort(collective.arrivals.begin(), collective.arrivals.end(),
              [](const NcclArrival& a, const NcclArrival& b) { return a.rank < b.rank; });
    collectives.push_back(std::move(collective));
  }
  auto first = [](const NcclCollective& c) {
    uint64_t at = UINT64_MAX;
    for (const NcclArrival& a : c.arrivals) at = std::min(at, a.start_ns);
    return at;
  };
  std::stable_sort(
      collectives.begin(), collectives.end(),
      [&](const NcclCollective& a, const NcclCollective& b) { return first(a) < first(b); });
  return collectives;
}

std::vector<RankWait> NcclRankWaits(const std::vector<JobSession>& sessions,
                                    const std::vector<NcclCollective>& collectives,
                                    const ChainOf& chain_of) {
  std::vector<RankWait> waits;
  for (size_t c = 0; c < collectives.size(); ++c) {
    const NcclCollective& collective = collectives[c];
    const NcclArrival* last = &collective.arrivals.front();
    const NcclArrival* first = last;
    for (const NcclArrival& arrival : collective.arrivals) {
      if (arrival.start_ns > last->start_ns) last = &arrival;
      if (arrival.start_ns < first->start_ns) first = &arrival;
    }
    if (last->start_ns == first->start_ns) continue;
    // Why the last was late: its thread over the time it kept the first waiting.
    const JobSession& late_session = sessions[last->session];
    const auto local = [&](uint64_t job_ns) {
      return static_cast<uint64_t>(static_cast<int64_t>(job_ns) - late_session.offset_ns);
    };
    std::optional<JobLink> root;
    std::vector<JobLink> chain =
        chain_of(last->session, last->tid, local(first->start_ns), local(last->start_ns));
    if (!chain.empty()) root = chain.back();
    for (const NcclArrival& arrival : collective.arrivals) {
      if (&arrival == last || arrival.start_ns == last->start_ns) continue;
      RankWait wait;
      wait.waiting_rank = arrival.rank;
      wait.late_rank = last->rank;
      wait.session = arrival.session;
      wait.stall = -1;
      wait.tid = arrival.tid;
      wait.start_ns = arrival.start_ns;
      wait.end_ns = last->start_ns;
      wait.root = root;
      wait.nccl = static_cast<int>(c);
      waits.push_back(wait);
    }
  }
  return waits;
}

}  // namespace gprof::collector
