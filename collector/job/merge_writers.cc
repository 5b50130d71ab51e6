#include "collector/job/merge_writers.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collector/model/value_format.h"
#include "collector/writers/output_file.h"
#include "collector/writers/perfetto/merged_trace.h"
#include "collector/writers/report.h"
#include "collector/writers/report_html.h"
#include "collector/writers/report_ranks.h"

namespace gprof::collector {
namespace {

using nlohmann::json;

std::string SignedDuration(int64_t ns) {
  return (ns < 0 ? "-" : "+") + FormatDuration(static_cast<uint64_t>(ns < 0 ? -ns : ns));
}

// "rank 1", "ranks 0-3", "no rank": the ranks of a session's processes.
std::string RanksOf(const Session& session) {
  std::vector<int> ranks;
  for (const auto& [pid, process] : session.processes)
    if (auto rank = RankOfProcess(session, pid)) ranks.push_back(*rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string text = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ",") + std::to_string(ranks[i]);
  return text;
}

// A rank that processes of several sessions claim: sessions of two runs of a job (prof/r* over
// both) would have their ranks' waits mixed as if they were one run's. Said, not refused: a
// restarted rank is recorded anew. One line per rank, naming the sessions by number (as the
// report lists them), with their directories where `named`.
std::vector<std::string> RanksInSeveralSessions(const MergedJob& job, bool named) {
  std::map<int, std::vector<size_t>> sessions_of;
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const Session& session = job.sessions[i].summary.kept;
    std::set<int> ranks;
    for (const auto& [pid, process] : session.processes)
      if (auto rank = RankOfProcess(session, pid)) ranks.insert(*rank);
    for (int rank : ranks) sessions_of[rank].push_back(i);
  }
  std::vector<std::string> lines;
  for (const auto& [rank, sessions] : sessions_of) {
    if (sessions.size() < 2) continue;
    std::string line = "rank " + std::to_string(rank) + " is in " +
                       std::to_string(sessions.size()) + " sessions (";
    for (size_t k = 0; k < sessions.size(); ++k)
      line += (k == 0 ? "" : ", ") + std::to_string(sessions[k] + 1) +
              (named ? " " + PrintableName(job.sessions[sessions[k]].directory) : "");
    lines.push_back(line + "): taken for one run's; merge different runs' sessions apart");
  }
  return lines;
}

// The SUMMARY section of a session's report.txt, without its heading.
std::string SummaryOf(const std::string& text) {
  const size_t start = text.find("\nSUMMARY\n");
  if (start == std::string::npos) return "";
  const size_t from = start + 9;
  const size_t end = text.find("\n\n", from);
  return text.substr(from, end == std::string::npos ? std::string::npos : end - from + 1);
}

std::string ClockWords(const MergedSession& merged) {
  const SessionClock& clock = merged.clock;
  if (clock.how == "same boot")
    return clock.reference == 0 ? "the job's clock" : "the same boot's clock";
  std::string text = clock.how + ": " + SignedDuration(clock.offset_ns);
  if (clock.messages > 0)
    text += " (the messages moved it " + SignedDuration(clock.correction_ns) + ")";
  if (!clock.uncertainty_known) {
    return text + (clock.how.starts_with("REALTIME anchors")
                       ? ", off by as much as the hosts' wall clocks disagree (not recorded)"
                       : ", off by an unknown amount");
  }
  text += ", within " + FormatDuration(clock.uncertainty_ns);
  if (clock.messages == 0 && clock.how == "REALTIME anchors")
    text += " (the wall clocks' own error bounds, as each host's kernel keeps them)";
  return text;
}

}  // namespace

std::vector<JobSession> JobViews(const MergedJob& job) {
  std::vector<JobSession> views;
  std::map<std::string, int> clocks;  // by boot id: sessions of one boot share the kernel's clock
  for (const MergedSession& merged : job.sessions) {
    const std::string& boot = merged.summary.kept.meta.boot_id;
    const int clock = boot.empty() ? static_cast<int>(views.size()) + 1'000'000
                                   : clocks.try_emplace(boot, static_cast<int>(clocks.size()))
                                         .first->second;
    views.push_back({&merged.summary.kept, &merged.summary.stalls, merged.clock.offset_ns,
                     merged.clock.uncertainty_known ? merged.clock.uncertainty_ns : UINT64_MAX,
                     clock});
  }
  return views;
}

namespace {

// The ranks' collectives as a picture (report_ranks.h), where a rank waited for another.
std::string CollectivesFigure(const RankWaits& waits) {
  std::string svg = RankWaitsSvg(waits);
  if (svg.empty()) return "";
  return "<h2>Collectives: who waited, who was late</h2>\n<p>Each collective in which a rank "
         "arrived last, the longest waits first: the late rank's lateness in red, each waiting "
         "rank's wait in blue, on the collective's own time scale (hover a bar for its "
         "figures).</p>\n" +
         svg + "\n";
}

std::string Dump(const json& value) {
  return value.dump(1, ' ', false, json::error_handler_t::replace);
}

// report.json of the job, streamed: its sessions (each with its own whole report.json as
// "report") as they are held, how their clocks were placed, and at the end the ranks' waits.
class MergedJson {
 public:
  MergedJson(int dir_fd, const std::string& shown) : shown_(shown) {
    auto file = CreateOutputFile(dir_fd, "report.json", shown);
    if (!file.ok()) {
      status_ = Status::Error(file.status().code(), "cannot write " + file.status().message());
      return;
    }
    file_ = std::move(*file);
    Put("{\n \"format\": \"gprof-run-merged-report\",\n \"version\": 1,\n \"sessions\": [");
  }

  void Add(size_t i, const MergedSession& merged, const Session& session,
           const Analysis& analysis) {
    if (!status_.ok()) return;
    const SessionMeta& meta = session.meta;
    json ranks = json::array();
    for (const auto& [pid, process] : session.processes) {
      if (!process.rank || !process.rank->rank) continue;
      const RankIdentity& rank = *process.rank;
      ranks.push_back({{"pid", pid},
                       {"rank", *rank.rank},
                       {"local_rank", rank.local_rank ? json(*rank.local_rank) : json(nullptr)},
                       {"world_size", rank.world_size ? json(*rank.world_size) : json(nullptr)}});
    }
    json head = {{"directory", PrintableName(merged.directory)},
                 {"host_name", meta.host_name},
                 {"boot_id", meta.boot_id},
                 {"ranks", std::move(ranks)},
                 {"clock",
                  {{"offset_ns", merged.clock.offset_ns},
                   {"uncertainty_ns", merged.clock.uncertainty_known
                                          ? json(merged.clock.uncertainty_ns)
                                          : json(nullptr)},
                   {"same_boot", merged.clock.same_boot},
                   {"how", merged.clock.how},
                   {"correction_ns", merged.clock.correction_ns},
                   {"messages", merged.clock.messages},
                   {"wall_error_known", merged.clock.wall_error_known}}}};
    std::string text = Dump(head);
    text.pop_back();  // the closing brace: the report follows
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    Put(i == 0 ? "\n" : ",\n");
    Put(text);
    Put(",\n \"report\": ");
    WriteJsonReport(session, analysis, [&](std::string_view block) { Put(block); });
    Put("\n}");
  }

  Status Finish(const MergedJob& job) {
    if (!status_.ok()) return status_;
    Put("\n ],\n \"messages\": " + std::to_string(job.messages.size()) + ",\n \"ranks\": ");
    Put(Dump(RankWaitsJson(JobViews(job), job.rank_waits)));
    Put("\n}\n");
    if (std::fclose(file_.release()) != 0 && error_ == 0) error_ = errno != 0 ? errno : EIO;
    if (error_ != 0)
      return Status::Error(StatusCode::kIo, "cannot write " + shown_ + ": " + WriteError(error_));
    return {};
  }

 private:
  void Put(std::string_view text) {
    if (error_ == 0 && std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size())
      error_ = errno != 0 ? errno : EIO;
  }

  std::string shown_;
  OutputFile file_{nullptr, &std::fclose};
  Status status_;
  int error_ = 0;
};

}  // namespace

std::string RenderMergedText(const MergedJob& job, const std::vector<std::string>& summaries,
                             const std::string& out_directory) {
  std::ostringstream out;
  out << "gprof-run merged report: " << PrintableName(out_directory) << "\n";
  out << "  sessions  " << job.sessions.size() << ", on the clock of the first:\n";
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    const SessionMeta& meta = merged.summary.kept.meta;
    out << "    " << i + 1 << ". " << PrintableName(merged.directory) << ": "
        << RanksOf(merged.summary.kept);
    if (!meta.host_name.empty()) out << ", host " << PrintableName(meta.host_name);
    if (meta.cut_short == "still_recording") out << ", still being recorded";
    out << "; " << ClockWords(merged) << "\n";
  }
  if (!job.messages.empty())
    out << "  messages  " << job.messages.size()
        << " TCP transfers between sessions matched by connection and byte position\n";
  for (const std::string& line : RanksInSeveralSessions(job, false))
    out << "  WARNING   " << line << "\n";
  std::string ranks = RankWaitsText(JobViews(job), job.rank_waits);
  out << (ranks.empty() ? "\nRANKS: no rank waited for another\n" : ranks);
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    out << "\nSESSION " << i + 1 << " (" << RanksOf(merged.summary.kept)
        << "): " << PrintableName(merged.directory) << "\n";
    const std::string& summary = i < summaries.size() ? summaries[i] : std::string();
    out << (summary.empty() ? "  nothing to explain\n" : summary);
  }
  return out.str();
}

struct MergedOutputs::State {
  const MergedJob& job;
  std::filesystem::path dir;
  std::string shown_directory;
  int out_fd;
  MergedJson json;
  MergedTraceWriter trace;
  Status trace_opened;
  std::vector<std::string> summaries;  // each session's SUMMARY section
  std::vector<Status> pages;           // session-N.html, as written
};

MergedOutputs::MergedOutputs(const MergedJob& job, const std::string& out_directory, int out_fd)
    : state_(new State{
          job,
          std::filesystem::path(out_directory),
          out_directory,
          out_fd,
          MergedJson(out_fd, (std::filesystem::path(out_directory) / "report.json").string()),
          MergedTraceWriter(
              out_fd, "trace.perfetto-trace",
              (std::filesystem::path(out_directory) / "trace.perfetto-trace").string()),
          {},
          {},
          {}}) {
  std::vector<int64_t> starts;
  for (const MergedSession& merged : job.sessions) {
    starts.push_back(static_cast<int64_t>(merged.summary.start_monotonic_ns) +
                     merged.clock.offset_ns);
  }
  state_->trace_opened = state_->trace.Open(starts);
}

MergedOutputs::~MergedOutputs() = default;

void MergedOutputs::Add(size_t i, const Session& session, const Analysis& analysis) {
  const MergedSession& merged = state_->job.sessions[i];
  const std::string text = RenderTextReport(session, analysis);
  state_->summaries.push_back(SummaryOf(text));
  state_->json.Add(i, merged, session, analysis);
  // Its own page (its pictures, as `report` writes them).
  const std::string name = "session-" + std::to_string(i + 1) + ".html";
  state_->pages.push_back(WriteTextFile(state_->out_fd, name, (state_->dir / name).string(),
                                        RenderHtmlReport(session, analysis, text)));
  std::string label = RanksOf(merged.summary.kept);
  if (label == "no rank") label = session.meta.host_name;
  state_->trace.Add({&session, &analysis, merged.clock.offset_ns, label});
}

Status MergedOutputs::Abandon(Status error) {
  State& state = *state_;
  (void)state.trace.Close();
  (void)state.json.Finish(state.job);
  for (const char* name : {"report.json", "trace.perfetto-trace"}) unlinkat(state.out_fd, name, 0);
  for (size_t i = 0; i < state.pages.size(); ++i)
    unlinkat(state.out_fd, ("session-" + std::to_string(i + 1) + ".html").c_str(), 0);
  return error;
}

MergeResult MergedOutputs::Finish(MergeResult result) {
  State& state = *state_;
  const MergedJob& job = state.job;
  const std::filesystem::path& dir = state.dir;
  result.text_report = RenderMergedText(job, state.summaries, state.shown_directory);
  for (std::string& line : RanksInSeveralSessions(job, true))
    result.warnings.push_back(std::move(line));
  auto note = [&](const std::string& name, const Status& status) {
    if (status.ok()) {
      result.written.push_back((dir / name).string());
    } else {
      result.warnings.push_back(status.message());
      unlinkat(state.out_fd, name.c_str(), 0);
    }
  };
  note("report.txt", WriteTextFile(state.out_fd, "report.txt", (dir / "report.txt").string(),
                                   result.text_report));
  note("report.json", state.json.Finish(job));
  // The job's page: the merged text, and a link to each session's.
  std::string links;
  for (size_t i = 0; i < state.pages.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    const std::string name = "session-" + std::to_string(i + 1) + ".html";
    note(name, state.pages[i]);
    if (state.pages[i].ok()) {
      links += "<li><a href=\"" + name + "\">session " + std::to_string(i + 1) +
               "</a>: " + EscapeHtml(RanksOf(merged.summary.kept)) + ", " +
               EscapeHtml(PrintableName(merged.directory)) + "</li>\n";
    }
  }
  note("report.html",
       WriteTextFile(state.out_fd, "report.html", (dir / "report.html").string(),
                     "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gprof-run "
                     "merged report</title></head>\n<body>\n<h1>gprof-run merged report</h1>\n"
                     "<ul class=\"sessions\">\n" +
                         links + "</ul>\n" + CollectivesFigure(job.rank_waits) + "<pre>" +
                         EscapeHtml(result.text_report) + "</pre>\n</body></html>\n"));
  note("trace.perfetto-trace", state.trace.Close());
  return result;
}

}  // namespace gprof::collector
