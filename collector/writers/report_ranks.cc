#include "collector/writers/report_ranks.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "collector/analysis/nccl_collectives.h"
#include "collector/model/value_format.h"
#include "inject/format/session_format.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/names.h"

namespace gprof::collector {

std::string RankName(int rank) { return "rank " + std::to_string(rank); }

namespace {

// Whether a rank of the job was numbered by the order its parent started it, no variable naming it.
bool RanksInferred(const std::vector<JobSession>& sessions) {
  for (const JobSession& job_session : sessions) {
    for (const auto& [pid, process] : job_session.session->processes) {
      if (process.rank && process.rank->inferred) return true;
    }
  }
  return false;
}

std::string WordsOf(const std::vector<JobSession>& sessions, const JobLink& link) {
  if (!link.text.empty()) return link.text;
  if (!link.queued_behind.empty()) {
    return QuotedThread(*sessions[link.session].session, link.link.tid) +
           " had launched its NCCL kernel, which waited " +
           FormatDuration(link.link.end_ns - link.link.start_ns) +
           " on its GPU behind " + ShortCppName(link.queued_behind) + " [GPU busy]";
  }
  return DescribeLink(*sessions[link.session].session, link.link);
}

// The oldest profiler interface a communicator of the job's NCCL used (0: no plugin events).
int OldestNcclInterface(const std::vector<JobSession>& sessions) {
  int oldest = 0;
  for (const JobSession& job_session : sessions) {
    for (const NcclEvent& event : job_session.session->nccl_events) {
      if (event.kind == static_cast<uint16_t>(format::NcclEventKind::kCommInit) &&
          (oldest == 0 || event.version < oldest))
        oldest = event.version;
    }
  }
  return oldest;
}

// How NCCL's collectives were told apart across ranks, in words; "" without any.
std::string NcclMatchingText(const std::vector<JobSession>& sessions, const RankWaits& waits) {
  std::ostringstream out;
  if (OldestNcclInterface(sessions) == 1) {
    out << "  NCCL: its profiler plugin interface is v1 (NCCL 2.23), which gprof-run does not read"
        << (waits.nccl.empty() ? ": its collectives are not matched across ranks\n" : "\n");
  }
  size_t by_seq = 0;
  for (const NcclCollective& collective : waits.nccl) by_seq += collective.by_seq ? 1 : 0;
  const size_t by_order = waits.nccl.size() - by_seq;
  if (by_seq != 0)
    out << "  NCCL: " << by_seq << " collective" << (by_seq == 1 ? "" : "s")
        << " matched across ranks by communicator and NCCL's sequence number (its profiler "
           "plugin)\n";
  if (by_order != 0)
    out << "  NCCL: " << by_order << " collective" << (by_order == 1 ? "" : "s")
        << " matched across ranks by their order on each rank (NCCL told no sequence numbers: "
           "its kernels on the GPU timeline, or its plugin's records)\n";
  const size_t unknown = std::count_if(waits.nccl.begin(), waits.nccl.end(),
                                       [](const NcclCollective& c) { return c.order_unknown; });
  if (unknown != 0)
    out << "  NCCL: in " << unknown << " collective" << (unknown == 1 ? "" : "s")
        << ", ranks on other hosts arrived closer together than their clocks are aligned "
           "(the sessions' clocks, above): who came first there is not known, and those waits are "
           "not counted\n";
  return out.str();
}

// The user's own NCCL profiler plugin that gprof-run's chained, where a session had one: the
// one NCCL_PROFILER_PLUGIN named, else the one the plugin says it loaded as NCCL would unasked
// (libnccl-profiler.so).
std::string NcclChainText(const std::vector<JobSession>& sessions) {
  for (const JobSession& job_session : sessions) {
    const Session& session = *job_session.session;
    std::string name = session.meta.nccl_plugin;
    bool failed = false, chained = false;
    for (const NcclEvent& event : session.nccl_events) {
      if (event.kind != static_cast<uint16_t>(format::NcclEventKind::kCommInit)) continue;
      chained |= (event.flags & format::kNcclChained) != 0;
      failed |= (event.flags & format::kNcclChainFailed) != 0;
      if (name.empty() && event.func < session.nccl_names.size())
        name = session.nccl_names[event.func];
    }
    if (name.empty()) continue;
    if (chained)
      return "  NCCL: the program's own profiler plugin (" + name +
             ") was chained: it got every event it asked for\n";
    if (failed)
      return "  NCCL: the program's own profiler plugin (" + name +
             ") could not be chained (not found, or no interface version NCCL asked for)\n";
  }
  return "";
}

std::string NcclCollectiveText(const NcclCollective& collective) {
  std::ostringstream out;
  out << "NCCL " << (collective.func.empty() ? "collective" : collective.func);
  if (collective.by_seq) out << " #" << collective.seq_number;
  else out << " (the " << collective.seq_number + 1 << "th on its communicator)";
  if (collective.comm_hash != 0) out << " on communicator " << std::hex << collective.comm_hash;
  return out.str();
}

}  // namespace

std::string RankWaitsText(const std::vector<JobSession>& sessions, const RankWaits& waits,
                          size_t collectives_shown) {
  if (waits.waits.empty()) return "";
  std::ostringstream out;
  const RankTotals& worst = waits.ranks.front();
  out << "\nRANKS: " << waits.world_size << " ranks; " << RankName(worst.rank)
      << " made the others wait most: " << FormatDuration(worst.made_wait_ns) << " in "
      << worst.made_waits << " wait" << (worst.made_waits == 1 ? "" : "s") << "\n";
  if (RanksInferred(sessions)) {
    out << "  (no launcher variable named the ranks: each is numbered by the order in which their\n"
           "  parent started them, as torch.multiprocessing.spawn starts rank 0 first)\n";
  }
  out << NcclMatchingText(sessions, waits) << NcclChainText(sessions);
  out << "  rank      waited for others   made others wait\n";
  for (const RankTotals& rank : waits.ranks) {
    std::string name = RankName(rank.rank);
    out << "  " << name << std::string(name.size() < 10 ? 10 - name.size() : 1, ' ');
    std::string waited = FormatDuration(rank.waited_ns) + " (" + std::to_string(rank.waits) + ")";
    out << waited << std::string(waited.size() < 20 ? 20 - waited.size() : 1, ' ')
        << FormatDuration(rank.made_wait_ns) << " (" << rank.made_waits << ")\n";
  }
  const size_t shown = std::min(collectives_shown, waits.collectives.size());
  out << "  " << waits.collectives.size() << " collective"
      << (waits.collectives.size() == 1 ? "" : "s")
      << " or exchanges in which a rank arrived last; the longest waits:\n";
  for (size_t i = 0; i < shown; ++i) {
    const Collective& collective = waits.collectives[i];
    const RankWait& longest = waits.waits[collective.waits.front()];
    const JobSession& waiting = sessions[longest.session];
    out << "    at "
        << FormatOffset(
               *waiting.session,
               static_cast<uint64_t>(static_cast<int64_t>(longest.start_ns) - waiting.offset_ns))
        << ": " << RankName(collective.late_rank) << " arrived last, "
        << FormatDuration(collective.late_ns) << " late";
    if (collective.nccl >= 0) out << " to " << NcclCollectiveText(waits.nccl[collective.nccl]);
    out << "; ";
    for (size_t w = 0; w < collective.waits.size(); ++w) {
      const RankWait& wait = waits.waits[collective.waits[w]];
      out << (w == 0 ? "" : ", ") << RankName(wait.waiting_rank) << " waited "
          << FormatDuration(wait.duration());
    }
    out << "\n";
    if (longest.root) {
      out << "      why: " << WordsOf(sessions, *longest.root) << "\n";
    }
  }
  return out.str();
}

std::string RankWaitsSvg(const RankWaits& waits, size_t collectives_shown) {
  if (waits.collectives.empty()) return "";
  constexpr int kLabel = 150, kBars = 560, kBar = 12, kGap = 4, kRowGap = 14;
  const size_t shown = std::min(collectives_shown, waits.collectives.size());
  std::ostringstream rows;
  int y = 4;
  for (size_t i = 0; i < shown; ++i) {
    const Collective& collective = waits.collectives[i];
    // The row's time scale: from its first wait's start to its last wait's end, or as long as
    // the late rank was late if that is longer.
    const uint64_t span = std::max<uint64_t>(
        std::max(collective.end_ns - collective.start_ns, collective.late_ns), 1);
    auto x = [&](uint64_t offset_ns) {
      return kLabel + static_cast<int>(static_cast<double>(offset_ns) * kBars / span);
    };
    const std::string late_words = RankName(collective.late_rank) + " arrived last, " +
                                   FormatDuration(collective.late_ns) + " late";
    rows << "<g class=\"collective\" data-late-rank=\"" << collective.late_rank << "\">";
    rows << "<text x=\"4\" y=\"" << y + kBar - 2 << "\" font-size=\"11\">" << i + 1 << ". "
         << RankName(collective.late_rank) << " late</text>";
    rows << "<rect class=\"late\" x=\"" << kLabel << "\" y=\"" << y << "\" width=\""
         << std::max(1, x(collective.late_ns) - kLabel) << "\" height=\"" << kBar
         << "\" fill=\"#d62728\"><title>" << late_words << "</title></rect>";
    y += kBar + kGap;
    for (int index : collective.waits) {
      const RankWait& wait = waits.waits[index];
      const std::string words = RankName(wait.waiting_rank) + " waited " +
                                FormatDuration(wait.duration()) + " for " +
                                RankName(wait.late_rank);
      const int from = x(wait.start_ns - collective.start_ns);
      rows << "<text x=\"14\" y=\"" << y + kBar - 2 << "\" font-size=\"11\">"
           << RankName(wait.waiting_rank) << "</text>";
      rows << "<rect class=\"wait\" data-rank=\"" << wait.waiting_rank << "\" x=\"" << from
           << "\" y=\"" << y << "\" width=\""
           << std::max(1, x(wait.end_ns - collective.start_ns) - from) << "\" height=\"" << kBar
           << "\" fill=\"#1f77b4\"><title>" << words << "</title></rect>";
      y += kBar + kGap;
    }
    rows << "</g>";
    y += kRowGap - kGap;
  }
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"ranks\" width=\"" << kLabel + kBars + 10
      << "\" height=\"" << y << "\">" << rows.str() << "</svg>";
  return out.str();
}

nlohmann::json NcclRecordsJson(const Session& session) {
  using nlohmann::json;
  if (session.nccl_events.empty()) return nullptr;
  constexpr size_t kMaxRecords = 5000;
  // The plugin's events with their kernels (NcclEventsOf adds, after them, the kernels that stand
  // for a process the plugin told nothing of: not records).
  std::vector<std::string> names;
  std::vector<NcclEvent> events = NcclEventsOf(session, &names);
  events.resize(session.nccl_events.size());
  const auto name = [&](uint32_t index) { return index < names.size() ? names[index] : ""; };
  json records = json::array();
  int interface = 0;
  for (const NcclEvent& event : events) {
    if (event.kind == static_cast<uint16_t>(format::NcclEventKind::kCommInit)) {
      interface = std::max<int>(interface, event.version);
      continue;
    }
    if (records.size() >= kMaxRecords) break;
    json kernel = nullptr;
    if (event.kernel != NcclEvent::kNoName) {
      kernel = {{"name", name(event.kernel)},
                {"launch_ns", event.launch_ns != 0 ? json(event.launch_ns) : json()},
                {"launch_end_ns", event.launch_ns != 0 ? json(event.launch_end_ns) : json()},
                {"start_ns", event.gpu_start_ns},
                {"end_ns", event.gpu_end_ns},
                {"queued_behind", event.queued_behind != NcclEvent::kNoName
                                      ? json(name(event.queued_behind))
                                      : json()}};
    }
    records.push_back(
        {{"pid", event.pid},
         {"tid", event.tid},
         {"kind", event.kind == static_cast<uint16_t>(format::NcclEventKind::kP2p) ? "p2p"
                                                                                  : "collective"},
         {"func", name(event.func)},
         {"rank", event.rank},
         {"n_ranks", event.n_ranks},
         {"peer", event.kind == static_cast<uint16_t>(format::NcclEventKind::kP2p)
                      ? json(event.peer)
                      : json()},
         {"comm_hash", (event.flags & format::kNcclHasCommHash) ? json(event.comm_hash) : json()},
         {"seq_number",
          (event.flags & format::kNcclHasSeqNumber) ? json(event.seq_number) : json()},
         {"count", event.count},
         {"start_ns", event.start_ns},
         {"stop_ns", event.stop_ns},
         {"kernel", std::move(kernel)}});
  }
  const size_t total = std::count_if(
      session.nccl_events.begin(), session.nccl_events.end(), [](const NcclEvent& event) {
        return event.kind != static_cast<uint16_t>(format::NcclEventKind::kCommInit);
      });
  return {{"interface", interface},
          {"records_total", total},
          {"records", std::move(records)}};
}

nlohmann::json RankWaitsJson(const std::vector<JobSession>& sessions, const RankWaits& waits) {
  using nlohmann::json;
  json ranks = json::array(), all_waits = json::array(), collectives = json::array();
  for (const RankTotals& rank : waits.ranks) {
    ranks.push_back({{"rank", rank.rank},
                     {"waited_ns", rank.waited_ns},
                     {"waits", rank.waits},
                     {"made_wait_ns", rank.made_wait_ns},
                     {"made_waits", rank.made_waits}});
  }
  for (const RankWait& wait : waits.waits) {
    json root = nullptr;
    if (wait.root) {
      root = {{"session", wait.root->session},
              {"pid", wait.root->link.pid},
              {"tid", wait.root->link.tid},
              {"text", WordsOf(sessions, *wait.root)}};
    }
    all_waits.push_back({{"waiting_rank", wait.waiting_rank},
                         {"late_rank", wait.late_rank},
                         {"session", wait.session},
                         {"stall", wait.stall},
                         {"tid", wait.tid},
                         {"start_ns", wait.start_ns},
                         {"end_ns", wait.end_ns},
                         {"nccl", wait.nccl >= 0 ? json(wait.nccl) : json(nullptr)},
                         {"root", std::move(root)}});
  }
  for (const Collective& collective : waits.collectives) {
    collectives.push_back({{"start_ns", collective.start_ns},
                           {"end_ns", collective.end_ns},
                           {"late_rank", collective.late_rank},
                           {"late_ns", collective.late_ns},
                           {"nccl", collective.nccl >= 0 ? json(collective.nccl) : json(nullptr)},
                           {"waits", collective.waits}});
  }
  json nccl = json::array();
  for (const NcclCollective& collective : waits.nccl) {
    json arrivals = json::array();
    for (const NcclArrival& arrival : collective.arrivals) {
      arrivals.push_back({{"rank", arrival.rank},
                          {"session", arrival.session},
                          {"pid", arrival.pid},
                          {"tid", arrival.tid},
                          {"start_ns", arrival.start_ns},
                          {"launch_ns", arrival.host_ns},
                          {"queued_behind", arrival.queued_behind.empty()
                                                ? json()
                                                : json(arrival.queued_behind)}});
    }
    nccl.push_back({{"func", collective.func},
                    {"comm_hash", collective.comm_hash},
                    {"seq_number", collective.seq_number},
                    {"matched_by", collective.by_seq ? "sequence_number" : "order"},
                    {"order_unknown", collective.order_unknown},
                    {"arrivals", std::move(arrivals)}});
  }
  return {{"world_size", waits.world_size},
          {"ranks_inferred", RanksInferred(sessions)},
          {"ranks", std::move(ranks)},
          {"waits", std::move(all_waits)},
          {"collectives", std::move(collectives)},
          {"nccl_collectives", std::move(nccl)},
          {"nccl_interface", OldestNcclInterface(sessions)}};
}

}  // namespace gprof::collector
