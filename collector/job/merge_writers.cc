#include "collector/job/merge_writers.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
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
  text += ", within " + FormatDuration(clock.uncertainty_ns);
  return text;
}

std::vector<JobSession> Views(const MergedJob& job) {
  std::vector<JobSession> views;
  for (const MergedSession& merged : job.sessions)
    views.push_back({merged.session.get(), &merged.analysis, merged.clock.offset_ns});
  return views;
}

// report.json of the job: its sessions (each with its own whole report.json as "report"), how
// their clocks were placed, and the ranks' waits; streamed, a session's report at a time.
Status WriteMergedJson(const MergedJob& job, int dir_fd, const std::string& shown) {
  auto file = CreateOutputFile(dir_fd, "report.json", shown);
  if (!file.ok())
    return Status::Error(file.status().code(), "cannot write " + file.status().message());
  bool written = true;
  auto put = [&](std::string_view text) {
    written &= std::fwrite(text.data(), 1, text.size(), file->get()) == text.size();
  };
  auto dump = [](const json& value) {
    return value.dump(1, ' ', false, json::error_handler_t::replace);
  };
  put("{\n \"format\": \"gprof-run-merged-report\",\n \"version\": 1,\n \"sessions\": [");
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    const SessionMeta& meta = merged.session->meta;
    json ranks = json::array();
    for (const auto& [pid, process] : merged.session->processes) {
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
                   {"uncertainty_ns", merged.clock.uncertainty_ns},
                   {"same_boot", merged.clock.same_boot},
                   {"how", merged.clock.how},
                   {"correction_ns", merged.clock.correction_ns},
                   {"messages", merged.clock.messages}}}};
    std::string text = dump(head);
    text.pop_back();  // the closing brace: the report follows
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    put(i == 0 ? "\n" : ",\n");
    put(text);
    put(",\n \"report\": ");
    WriteJsonReport(*merged.session, merged.analysis, put);
    put("\n}");
  }
  put("\n ],\n \"messages\": " + std::to_string(job.messages.size()) + ",\n \"ranks\": ");
  put(dump(RankWaitsJson(Views(job), job.rank_waits)));
  put("\n}\n");
  const int error = errno;
  if (std::fclose(file->release()) != 0) written = false;
  if (!written)
    return Status::Error(StatusCode::kIo, "cannot write " + shown + ": " + WriteError(error));
  return {};
}

Status WriteMergedTrace(const MergedJob& job, int dir_fd, const std::string& shown) {
  std::vector<TraceSession> sessions;
  for (const MergedSession& merged : job.sessions) {
    std::string label = RanksOf(*merged.session);
    if (label == "no rank") label = merged.session->meta.host_name;
    sessions.push_back({merged.session.get(), &merged.analysis, merged.clock.offset_ns, label});
  }
  return WriteMergedPerfettoTrace(sessions, dir_fd, "trace.perfetto-trace", shown);
}

}  // namespace

std::string RenderMergedText(const MergedJob& job, const std::string& out_directory) {
  std::ostringstream out;
  out << "gprof-run merged report: " << PrintableName(out_directory) << "\n";
  out << "  sessions  " << job.sessions.size() << ", on the clock of the first:\n";
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    const SessionMeta& meta = merged.session->meta;
    out << "    " << i + 1 << ". " << PrintableName(merged.directory) << ": "
        << RanksOf(*merged.session);
    if (!meta.host_name.empty()) out << ", host " << PrintableName(meta.host_name);
    out << "; " << ClockWords(merged) << "\n";
  }
  if (!job.messages.empty())
    out << "  messages  " << job.messages.size()
        << " TCP transfers between sessions matched by connection and byte position\n";
  std::string ranks = RankWaitsText(Views(job), job.rank_waits);
  out << (ranks.empty() ? "\nRANKS: no rank waited for another\n" : ranks);
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    out << "\nSESSION " << i + 1 << " (" << RanksOf(*merged.session)
        << "): " << PrintableName(merged.directory) << "\n";
    std::string summary = SummaryOf(RenderTextReport(*merged.session, merged.analysis));
    out << (summary.empty() ? "  nothing to explain\n" : summary);
  }
  return out.str();
}

Expected<MergeResult> WriteMergedJob(const MergedJob& job, const std::string& out_directory,
                                     int out_fd, MergeResult result) {
  const std::filesystem::path dir(out_directory);
  result.text_report = RenderMergedText(job, out_directory);
  auto note = [&](const std::string& name, const Status& status) {
    if (status.ok()) {
      result.written.push_back((dir / name).string());
    } else {
      result.warnings.push_back(status.message());
      unlinkat(out_fd, name.c_str(), 0);
    }
  };
  note("report.txt",
       WriteTextFile(out_fd, "report.txt", (dir / "report.txt").string(), result.text_report));
  note("report.json", WriteMergedJson(job, out_fd, (dir / "report.json").string()));
  // Each session's own page (its pictures, as `report` writes them), and the job's page: the
  // merged text, and a link to each session's.
  std::string links;
  for (size_t i = 0; i < job.sessions.size(); ++i) {
    const MergedSession& merged = job.sessions[i];
    const std::string name = "session-" + std::to_string(i + 1) + ".html";
    std::string page = RenderHtmlReport(*merged.session, merged.analysis,
                                        RenderTextReport(*merged.session, merged.analysis));
    Status written = WriteTextFile(out_fd, name, (dir / name).string(), page);
    note(name, written);
    if (written.ok()) {
      links += "<li><a href=\"" + name + "\">session " + std::to_string(i + 1) +
               "</a>: " + EscapeHtml(RanksOf(*merged.session)) + ", " +
               EscapeHtml(PrintableName(merged.directory)) + "</li>\n";
    }
  }
  note("report.html",
       WriteTextFile(out_fd, "report.html", (dir / "report.html").string(),
                     "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gprof-run "
                     "merged report</title></head>\n<body>\n<h1>gprof-run merged report</h1>\n"
                     "<ul class=\"sessions\">\n" +
                         links + "</ul>\n<pre>" + EscapeHtml(result.text_report) +
                         "</pre>\n</body></html>\n"));
  note("trace.perfetto-trace",
       WriteMergedTrace(job, out_fd, (dir / "trace.perfetto-trace").string()));
  return result;
}

}  // namespace gprof::collector
