#include "collect.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "output_file.h"
#include "perfetto_writer.h"
#include "report.h"
#include "session_files.h"
#include "session_reader.h"

namespace gprof::collector {
namespace {

Status WriteTextFile(int dir_fd, const std::string& name, const std::string& path,
                     const std::string& text) {
  auto file = CreateOutputFile(dir_fd, name, path);
  if (!file.ok()) return Status::Error("cannot write " + file.status().message());
  bool written = std::fwrite(text.data(), 1, text.size(), file->get()) == text.size();
  if (std::fclose(file->release()) != 0 || !written) return Status::Error(path + ": cannot write");
  return {};
}

// Writes into a FILE, for report.json's serializer: the text of a large report, as large as the
// tree it comes from, is never held whole, as json::dump() would hold it in one string. What
// comes a few bytes at a time is gathered here and written in blocks, cheaper than a locked
// stdio call each.
class FileOutput : public nlohmann::detail::output_adapter_protocol<char> {
 public:
  explicit FileOutput(FILE* file) : file_(file) { pending_.reserve(kBlockBytes); }
  void write_character(char c) override {
    pending_.push_back(c);
    if (pending_.size() >= kBlockBytes) Flush();
  }
  void write_characters(const char* text, size_t length) override {
    // A large block (report.json's printer hands over blocks of up to 64 KiB) goes as it is.
    if (pending_.empty() && length >= kBlockBytes / 2) {
      written_ &= std::fwrite(text, 1, length, file_) == length;
      return;
    }
    pending_.append(text, length);
    if (pending_.size() >= kBlockBytes) Flush();
  }
  // Writes what is gathered; false once any write failed.
  bool Flush() {
    written_ &= std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size();
    pending_.clear();
    return written_;
  }

 private:
  static constexpr size_t kBlockBytes = size_t{64} << 10;
  FILE* file_;
  std::string pending_;
  bool written_ = true;
};

// report.json, and a newline.
Status WriteJsonFile(int dir_fd, const std::string& name, const std::string& path,
                     const Session& session, const Analysis& analysis, const Diagnosis& diagnosis) {
  auto file = CreateOutputFile(dir_fd, name, path);
  if (!file.ok()) return Status::Error("cannot write " + file.status().message());
  auto output = std::make_shared<FileOutput>(file->get());
  WriteJsonReport(session, analysis, &diagnosis, output);
  output->write_character('\n');
  bool written = output->Flush();
  if (std::fclose(file->release()) != 0 || !written) return Status::Error(path + ": cannot write");
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
    if (!dir.ok()) return Status::Error(PrintableName(directory) + ": no such session directory");
    opened = std::move(*dir);
    dir_fd = opened.get();
  }
  RecordSpill spill(dir_fd, directory, options.memory_budget_bytes);
  auto session = [&] {
    ReadProgress progress(options.progress_fd);  // its line erased before anything else is said
    return ReadSession(dir_fd, directory, &progress);
  }();
  if (!session.ok()) return session.status();
  *step = "analysing it";
  Analysis analysis;
  Diagnosis diagnosis;
  {
    WaitReader waits(*session);  // its index is large: gone before the reports are built
    analysis = Analyze(*session, options.analysis, waits);
    DiagnosisOptions diagnosis_options = options.diagnosis;
    diagnosis_options.wait_threshold_ns = options.analysis.threshold_ns;
    diagnosis = Diagnose(*session, diagnosis_options, waits);
  }

  CollectResult result;
  result.text_report = RenderTextReport(*session, analysis, {}, &diagnosis);
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
  auto write = [&](const char* name, auto write_file) {
    *step = std::string("writing ") + name;
    Status status = write_file();
    if (status.ok()) {
      result.written.push_back((dir / name).string());
    } else {
      result.warnings.push_back(status.message());
      unlinkat(dir_fd, name, 0);
    }
  };
  write(kTextReportFile, [&] {
    return WriteTextFile(dir_fd, kTextReportFile, (dir / kTextReportFile).string(),
                         result.text_report);
  });
  write(kJsonReportFile, [&] {
    return WriteJsonFile(dir_fd, kJsonReportFile, (dir / kJsonReportFile).string(), *session,
                         analysis, diagnosis);
  });
  write(kTraceFile, [&] {
    return WritePerfettoTrace(*session, dir_fd, kTraceFile, (dir / kTraceFile).string(),
                              PerfettoOptions{&diagnosis});
  });
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
    return Status::Error(PrintableName(directory) + ": out of memory " + step);
  } catch (const std::exception& error) {
    return Status::Error(PrintableName(directory) + ": failed " + step + ": " +
                         PrintableName(error.what()));
  } catch (...) {
    return Status::Error(PrintableName(directory) + ": failed " + step);
  }
}

}  // namespace gprof::collector
