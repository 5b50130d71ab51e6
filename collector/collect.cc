#include "collector/collect.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <filesystem>
#include <memory>

#include "collector/session/session_files.h"
#include "collector/session/session_reader.h"
#include "collector/writers/output_file.h"
#include "collector/writers/perfetto/perfetto_writer.h"
#include "collector/writers/report.h"
#include "collector/writers/report_html.h"

namespace gprof::collector {
namespace {

// Why an output file could not be written.
// report.json, and a newline.
Status WriteJsonFile(int dir_fd, const std::string& name, const std::string& path,
                     const Session& session, const Analysis& analysis) {
  auto file = CreateOutputFile(dir_fd, name, path);
  if (!file.ok())
    return Status::Error(file.status().code(), "cannot write " + file.status().message());
  // The printer hands over whole blocks: one stdio call each.
  FILE* out = file->get();
  errno = 0;
  bool written = true;
  WriteJsonReport(session, analysis, [&](std::string_view block) {
    written &= std::fwrite(block.data(), 1, block.size(), out) == block.size();
  });
  written &= std::fputc('\n', out) != EOF;
  int error = errno;
  if (std::fclose(file->release()) != 0 && written) {
    written = false;
    error = errno;
  }
  if (!written) return Status::Error(StatusCode::kIo, "cannot write " + path + ": " + WriteError(error));
  return {};
}

// Records past the budget go to files in the session directory while the collector runs.
class RecordSpill {
 public:
  RecordSpill(int dir_fd, const std::string& directory, uint64_t budget_bytes) {
    RecordStorage::Configure(directory, budget_bytes != 0 ? budget_bytes : DefaultMemoryBudget(),
                             dir_fd);
  }
  ~RecordSpill() { RecordStorage::Configure("", 0); }
  RecordSpill(const RecordSpill&) = delete;
  RecordSpill& operator=(const RecordSpill&) = delete;
};

Expected<CollectResult> CollectSession(const std::string& directory, const CollectOptions& options,
                                       std::string* step) {
  FileDescriptor opened;
  int dir_fd = options.directory_fd;
  if (dir_fd < 0) {
    auto dir = OpenSessionDirectory(directory);
    if (!dir.ok()) return dir.status();
    opened = std::move(*dir);
    dir_fd = opened.get();
  }
  RecordSpill spill(dir_fd, directory, options.memory_budget_bytes);
  auto session = [&] {
    ReadProgress progress(options.progress_fd);  // its line erased before anything else is said
    return ReadSession(dir_fd, directory, &progress,
                       options.session_meta_text.empty() ? nullptr : &options.session_meta_text);
  }();
  if (!session.ok()) return session.status();
  *step = "analysing it";
  Analysis analysis;
  {
    WaitReader waits(*session);  // its index is large: gone before the reports are built
    analysis = Analyze(*session, options.analysis, waits);
  }

  CollectResult result;
  session->trace_detail_under_ns =
      TraceDetailFor(*session, kTraceMaxBytes, &session->trace_full_bytes);
  result.text_report = RenderTextReport(*session, analysis);
  result.api_calls = session->api_calls.size();
  // The records are all read by now: where they are held is known.
  result.storage = RecordStorage::Stats();
  if (!result.storage.spill_error.empty()) {
    result.warnings.push_back("records past the collector's memory (" +
                              std::to_string(result.storage.memory_budget_bytes >> 20) +
                              " MiB) were kept in memory: " + result.storage.spill_error);
  }
  for (const Diagnostic& diagnostic : session->diagnostics) {
    result.warnings.push_back(diagnostic.file + " at offset " + std::to_string(diagnostic.offset) +
                              ": " + diagnostic.message);
  }
  if (!options.write_files) return result;

  // The reports first, the trace (by far the largest) last: on a full disk the small files that
  // say what happened are the ones to keep. A file that could not be written whole is removed,
  // which frees its room for the next.
  std::filesystem::path dir(directory);
  const std::map<std::string, std::function<Status()>> writers = {
      {kTextReportFile,
       [&] {
         return WriteTextFile(dir_fd, kTextReportFile, (dir / kTextReportFile).string(),
                              result.text_report);
       }},
      {kJsonReportFile,
       [&] {
         return WriteJsonFile(dir_fd, kJsonReportFile, (dir / kJsonReportFile).string(),
                              *session, analysis);
       }},
      {kHtmlReportFile,
       [&] {
         return WriteTextFile(dir_fd, kHtmlReportFile, (dir / kHtmlReportFile).string(),
                              RenderHtmlReport(*session, analysis, result.text_report));
       }},
      {kTraceFile,
       [&] {
         return WritePerfettoTrace(*session, dir_fd, kTraceFile, (dir / kTraceFile).string(),
                                   PerfettoOptions{&analysis});
       }},
  };
  std::vector<std::string> written;
  auto write = [&](const char* name) {
    *step = std::string("writing ") + name;
    std::erase(written, name);
    Status status = writers.at(name)();
    if (status.ok()) {
      written.push_back(name);
      return;
    }
    result.warnings.push_back(status.message());
    unlinkat(dir_fd, name, 0);
    // The reason alone, for the reports: what follows the path in the message.
    const std::string path = (dir / name).string();
    const std::string& message = status.message();
    size_t at = message.find(path + ": ");
    session->outputs_not_written.push_back(
        {name, at == std::string::npos ? message : message.substr(at + path.size() + 2)});
  };
  for (const char* name : {kTextReportFile, kJsonReportFile, kHtmlReportFile, kTraceFile})
    write(name);
  if (!session->outputs_not_written.empty()) {
    // The reports that were written name what is missing: written again, the largest first, so
    // that report.txt, the smallest, names even a report that no longer fit.
    result.text_report = RenderTextReport(*session, analysis);
    for (const char* name : {kHtmlReportFile, kJsonReportFile, kTextReportFile}) {
      if (std::find(written.begin(), written.end(), name) == written.end()) continue;
      if (strcmp(name, kTextReportFile) == 0)
        result.text_report = RenderTextReport(*session, analysis);
      write(name);
    }
  }
  for (const std::string& name : written) result.written.push_back((dir / name).string());
  result.not_written = session->outputs_not_written;
  return result;
}

}  // namespace

// No exception leaves the collector: the readers and writers return errors as values, and this
// turns whatever else is thrown (out of memory, a library's own exception) into one.
Expected<CollectResult> Collect(const std::string& directory, const CollectOptions& options) {
  std::string step = "reading it";
  try {
    return CollectSession(directory, options, &step);
  } catch (const std::bad_alloc&) {
    return Status::Error(StatusCode::kOutOfMemory,
                         PrintableName(directory) + ": out of memory " + step);
  } catch (const std::exception& error) {
    return Status::Error(StatusCode::kIo, PrintableName(directory) + ": failed " + step + ": " +
                                              PrintableName(error.what()));
  } catch (...) {
    return Status::Error(StatusCode::kIo, PrintableName(directory) + ": failed " + step);
  }
}

}  // namespace gprof::collector
