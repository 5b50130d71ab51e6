#include "collector/analysis/nccl_collectives.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "inject/format/session_format.h"

namespace gprof::collector {

namespace {

// The arrival that came last, by the job's clock.
const NcclArrival& LastArrival(const NcclCollective& collective) {
  const NcclArrival* last = &collective.arrivals.front();
  for (const NcclArrival& arrival : collective.arrivals)
    if (arrival.start_ns > last->start_ns) last = &arrival;
  return *last;
}

// Whether `arrival` is known to have come before `last`: by more than their clocks' uncertainty.
bool KnownEarlier(const std::vector<JobSession>& sessions, const NcclArrival& arrival,
                  const NcclArrival& last) {
  const uint64_t uncertainty =
      PairUncertainty(sessions[arrival.session], sessions[last.session]);
  return arrival.start_ns < last.start_ns &&
         (uncertainty == UINT64_MAX ? false : last.start_ns - arrival.start_ns > uncertainty);
}

// The collective an NCCL kernel's name says ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", with
// or without its demangled arguments: "AllReduce"; "ncclDevKernel_SendRecv(...)": "SendRecv"),
// or "" for a kernel that is not NCCL's.
std::string NcclKernelFunc(const std::string& name) {
  for (std::string_view prefix : {"ncclDevKernel_", "ncclKernel_"}) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find_first_of("_(", prefix.size());
    return name.substr(prefix.size(), end == std::string::npos ? end : end - prefix.size());
  }
  return "";
}

// An NCCL kernel of the GPU timeline, with the call that launched it (nullptr: launched before
// CUPTI started).
struct NcclKernel {
  const GpuActivity* activity = nullptr;
  std::string func;  // "AllReduce"
  const ApiCall* launch = nullptr;
};

// The session's NCCL kernels, by their start on the GPU.
std::vector<NcclKernel> NcclKernels(const Session& session) {
  std::vector<NcclKernel> kernels;
  for (const GpuActivity& activity : session.gpu_activities) {
    const auto* kernel = std::get_if<GpuKernel>(&activity.detail);
    if (kernel == nullptr) continue;
    std::string func = NcclKernelFunc(session.KernelName(*kernel));
    if (!func.empty()) kernels.push_back({&activity, std::move(func), nullptr});
  }
  if (kernels.empty()) return kernels;  // no index of the calls for a session without NCCL
  std::map<std::pair<uint32_t, uint64_t>, const ApiCall*> launches;
  for (const ApiCall& call : session.api_calls)
    if (call.correlation_id != 0) launches[{call.pid, call.correlation_id}] = &call;
  for (NcclKernel& kernel : kernels) {
    auto launch = launches.find({kernel.activity->pid, kernel.activity->correlation_id});
    if (launch != launches.end()) kernel.launch = launch->second;
  }
  return kernels;
}

// The GPU work of `kernel`'s process and device that ran longest between `from_ns` (its launch)
// and the kernel's start: what it waited behind. Looked for among the few hundred activities
// that started last before it.
const GpuActivity* QueuedBehind(const Session& session, const GpuActivity& kernel,
                                uint64_t from_ns) {
  constexpr int kLookBack = 512;
  const auto& all = session.gpu_activities;
  auto it = std::lower_bound(all.begin(), all.end(), kernel.start_ns,
                             [](const GpuActivity& a, uint64_t at) { return a.start_ns < at; });
  const GpuActivity* longest = nullptr;
  uint64_t longest_ns = 0;
  for (int seen = 0; it != all.begin() && seen < kLookBack; ++seen) {
    const GpuActivity& activity = *--it;
    if (&activity == &kernel || activity.pid != kernel.pid ||
        activity.device_id != kernel.device_id || !activity.occupies_gpu())
      continue;
    const uint64_t from = std::max(activity.start_ns, from_ns);
    const uint64_t to = std::min(activity.end_ns, kernel.start_ns);
    if (to > from && to - from > longest_ns) {
      longest = &activity;
      longest_ns = to - from;
    }
  }
  return longest;
}

// Session::nccl_names grown by the kernels' names, each once.
class NameTable {
 public:
  explicit NameTable(std::vector<std::string>* names) : names_(names) {
    for (size_t i = 0; i < names->size(); ++i)
      index_.try_emplace((*names)[i], static_cast<uint32_t>(i));
  }
  uint32_t Of(const std::string& name) {
    auto [it, inserted] = index_.try_emplace(name, static_cast<uint32_t>(names_->size()));
    if (inserted) names_->push_back(name);
    return it->second;
  }

 private:
  std::vector<std::string>* names_;
  std::map<std::string, uint32_t> index_;
};

// Gives `event` its kernel: where it ran on the GPU, and what it waited behind there.
void PlaceOn(const Session& session, const NcclKernel& kernel, NcclEvent* event,
             NameTable& names) {
  const GpuActivity& activity = *kernel.activity;
  event->launch_ns = kernel.launch ? kernel.launch->enter_ns : 0;
  event->launch_end_ns = kernel.launch ? kernel.launch->exit_ns : 0;
  event->gpu_start_ns = activity.start_ns;
  event->gpu_end_ns = activity.end_ns;
  event->kernel = names.Of(session.KernelName(std::get<GpuKernel>(activity.detail)));
  if (kernel.launch == nullptr) return;
  if (const GpuActivity* behind = QueuedBehind(session, activity, kernel.launch->enter_ns)) {
    const auto* other = std::get_if<GpuKernel>(&behind->detail);
    event->queued_behind = names.Of(other != nullptr ? session.KernelName(*other)
                                    : std::holds_alternative<GpuMemcpy>(behind->detail)
                                        ? "a memory copy"
                                        : "a memset");
  }
}

// A process's collectives as the GPU timeline shows them where the plugin told none: its NCCL
// kernels, each arriving when its launch call began, in the order they were launched.
std::vector<NcclEvent> CollectivesFromKernels(const Session& session,
                                              const std::vector<NcclKernel>& kernels,
                                              const std::set<uint32_t>& told,
                                              NameTable& names) {
  std::vector<NcclEvent> events;
  for (const NcclKernel& kernel : kernels) {
    const GpuActivity& activity = *kernel.activity;
    // Sends and receives pair two ranks, not the communicator's: no collective of all by order.
    if (told.contains(activity.pid) || kernel.func == "SendRecv") continue;
    NcclEvent event;
    event.pid = activity.pid;
    // A kernel whose launch was not seen (launched before CUPTI started) keeps its place in the
    // order, without an arrival: sorted by its start on the GPU, its host time unknown (0).
    event.start_ns = activity.start_ns;
    if (kernel.launch != nullptr) {
      event.tid = kernel.launch->tid;
      event.start_ns = kernel.launch->enter_ns;
      event.stop_ns = kernel.launch->exit_ns;
    }
    event.kind = static_cast<uint16_t>(format::NcclEventKind::kCollective);
    event.func = names.Of(kernel.func);
    PlaceOn(session, kernel, &event, names);
    events.push_back(event);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const NcclEvent& a, const NcclEvent& b) { return a.start_ns < b.start_ns; });
  return events;
}

// The plugin's events given their kernels. NCCL launches a plan's kernel, then starts the events
// of all its collectives and sends and stops them, on the same thread (or, under graph capture,
// on CUDA's host-callback thread, which launches nothing): an event's kernel is the last NCCL
// kernel its thread launched since the previous event started; with none launched since, an
// event started while the previous one ran is of its plan and shares its kernel.
void PlacePluginEvents(const Session& session, const std::vector<NcclKernel>& kernels,
                       std::vector<NcclEvent>* events, NameTable& names) {
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const NcclKernel*>> launched_by;
  for (const NcclKernel& kernel : kernels)
    if (kernel.launch != nullptr)
      launched_by[{kernel.launch->pid, kernel.launch->tid}].push_back(&kernel);
  for (auto& [thread, launched] : launched_by)
    std::sort(launched.begin(), launched.end(), [](const NcclKernel* a, const NcclKernel* b) {
      return a->launch->enter_ns < b->launch->enter_ns;
    });
  std::map<std::pair<uint32_t, uint32_t>, std::vector<NcclEvent*>> by_thread;
  for (NcclEvent& event : *events)
    if (event.kind != static_cast<uint16_t>(format::NcclEventKind::kCommInit))
      by_thread[{event.pid, event.tid}].push_back(&event);
  for (auto& [thread, on_thread] : by_thread) {
    auto launches = launched_by.find(thread);
    if (launches == launched_by.end()) continue;
    const auto& launched = launches->second;
    std::stable_sort(on_thread.begin(), on_thread.end(),
                     [](const NcclEvent* a, const NcclEvent* b) { return a->start_ns < b->start_ns; });
    const NcclKernel* previous_kernel = nullptr;
    for (size_t i = 0; i < on_thread.size(); ++i) {
      NcclEvent& event = *on_thread[i];
      const NcclEvent* previous = i > 0 ? on_thread[i - 1] : nullptr;
      auto after = std::upper_bound(
          launched.begin(), launched.end(), event.start_ns,
          [](uint64_t at, const NcclKernel* k) { return at < k->launch->enter_ns; });
      const NcclKernel* kernel = nullptr;
      if (after != launched.begin() &&
          (previous == nullptr || (*std::prev(after))->launch->enter_ns >= previous->start_ns))
        kernel = *std::prev(after);
      else if (previous != nullptr && event.start_ns <= previous->stop_ns)
        kernel = previous_kernel;
      previous_kernel = kernel;
      if (kernel != nullptr) PlaceOn(session, *kernel, &event, names);
    }
  }
}

}  // namespace

std::vector<NcclEvent> NcclEventsOf(const Session& session, std::vector<std::string>* names) {
  std::set<uint32_t> told;  // processes the plugin told of collectives
  for (const NcclEvent& event : session.nccl_events)
    if (event.kind == static_cast<uint16_t>(format::NcclEventKind::kCollective))
      told.insert(event.pid);
  *names = session.nccl_names;
  std::vector<NcclEvent> events = session.nccl_events;
  const std::vector<NcclKernel> kernels = NcclKernels(session);
  if (kernels.empty()) return events;
  NameTable table(names);
  PlacePluginEvents(session, kernels, &events, table);
  std::vector<NcclEvent> from_kernels = CollectivesFromKernels(session, kernels, told, table);
  events.insert(events.end(), from_kernels.begin(), from_kernels.end());
  return events;
}

std::vector<NcclCollective> MatchNcclCollectives(const std::vector<JobSession>& sessions,
                                                 const RankOf& rank_of) {
  // (communicator, function, sequence number, matched by seq) -> the collective. NCCL numbers
  // each function's collectives apart (comm->seqNumber[func]); by order, the function is "".
  std::map<std::tuple<uint64_t, std::string, uint64_t, bool>, NcclCollective> by_key;
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
      const std::string func = event.func < names.size() ? names[event.func] : "";
      NcclCollective& collective = by_key[{comm, by_seq ? func : "", seq, by_seq}];
      collective.comm_hash = comm;
      collective.seq_number = seq;
      collective.by_seq = by_seq;
      if (collective.func.empty()) collective.func = func;
      if (event.tid == 0) continue;  // its place kept, no arrival known
      std::optional<int> rank = rank_of(static_cast<int>(s), event.pid);
      NcclArrival arrival;
      arrival.session = static_cast<int>(s);
      arrival.pid = event.pid;
      arrival.tid = event.tid;
      arrival.rank = rank ? *rank : event.rank;
      const auto on_job_clock = [&](uint64_t ns) {
        return static_cast<uint64_t>(static_cast<int64_t>(ns) + sessions[s].offset_ns);
      };
      arrival.host_ns = on_job_clock(event.launch_ns != 0 ? event.launch_ns : event.start_ns);
      arrival.start_ns = arrival.host_ns;
      if (event.gpu_start_ns != 0)
        arrival.start_ns = std::max(arrival.start_ns, on_job_clock(event.gpu_start_ns));
      if (event.queued_behind < names.size()) arrival.queued_behind = names[event.queued_behind];
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
    // Which came last is not known where an arrival that may have (not known to be earlier than
    // the latest) is on another clock than the latest.
    const NcclArrival& last = LastArrival(collective);
    for (const NcclArrival& arrival : collective.arrivals)
      if (!KnownEarlier(sessions, arrival, last) &&
          sessions[arrival.session].clock != sessions[last.session].clock)
        collective.order_unknown = true;
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
    // Only the waits of ranks known to have arrived before the last (by more than their
    // clocks' uncertainty) are claimed, and none where which came last is not known.
    if (collective.order_unknown) continue;
    const NcclArrival* last = &LastArrival(collective);
    const NcclArrival* first = nullptr;
    for (const NcclArrival& arrival : collective.arrivals)
      if (KnownEarlier(sessions, arrival, *last) &&
          (first == nullptr || arrival.start_ns < first->start_ns))
        first = &arrival;
    if (first == nullptr) continue;
    const JobSession& late_session = sessions[last->session];
    const auto local = [&](uint64_t job_ns) {
      return static_cast<uint64_t>(static_cast<int64_t>(job_ns) - late_session.offset_ns);
    };
    std::optional<JobLink> root;
    // Why the last was late: its GPU, where its kernel waited there behind other work for half
    // the time it kept the first waiting or more; else its thread until it launched the kernel.
    const uint64_t late_ns = last->start_ns - first->start_ns;
    const uint64_t queued_ns = last->start_ns - last->host_ns;
    if (!last->queued_behind.empty() && queued_ns * 2 >= late_ns) {
      JobLink gpu{last->session, {}, "", last->queued_behind};
      gpu.link.pid = last->pid;
      gpu.link.tid = last->tid;
      gpu.link.state = ChainLink::State::kGpu;
      gpu.link.start_ns = local(last->host_ns);
      gpu.link.end_ns = local(last->start_ns);
      root = std::move(gpu);
    } else if (last->host_ns > first->start_ns) {
      std::vector<JobLink> chain =
          chain_of(last->session, last->tid, local(first->start_ns), local(last->host_ns));
      if (!chain.empty()) root = chain.back();
    }
    for (const NcclArrival& arrival : collective.arrivals) {
      if (!KnownEarlier(sessions, arrival, *last)) continue;
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
