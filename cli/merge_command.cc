#include "cli/merge_command.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "cli/exit_codes.h"
#include "cli/run_command.h"
#include "cli/session_directory.h"
#include "collector/job/merge.h"
#include "collector/model/value_format.h"
#include "collector/session/session_files.h"

namespace gprof::cli {
namespace {

// As root, the merge reads and writes as the sessions' owner, as `report` does (ReportAsOwner):
// every session directory one user's, or all root's and changeable by no one else. Sessions of
// several users are refused: none of them may read the others'.
std::string AsTheSessionsOwner(const std::vector<std::string>& directories) {
  std::vector<collector::FileDescriptor> opened;
  std::set<uid_t> owners;
  for (const std::string& directory : directories) {
    auto dir = collector::OpenSessionDirectory(directory);
    if (!dir.ok()) return dir.status().message();
    struct stat info {};
    if (fstat(dir->get(), &info) != 0)
      return collector::PrintableName(directory) + ": " + strerror(errno);
    owners.insert(info.st_uid);
    opened.push_back(std::move(*dir));
  }
  if (owners.size() > 1)
    return "the sessions belong to different users: as root, gprof-run merges only one user's "
           "sessions (run it as that user)";
  // Root's: each is checked; one user's: the first switches to that user for good.
  for (size_t i = 0; i < opened.size(); ++i) {
    if (Status owned = ReportAsOwner(opened[i].get(), directories[i]); !owned.ok())
      return owned.message();
    if (*owners.begin() != 0) break;
  }
  return "";
}

}  // namespace

int MergeCommand(const MergeCommandOptions& options) {
  if (geteuid() == 0) {
    if (std::string refused = AsTheSessionsOwner(options.directories); !refused.empty()) {
      Say(refused);
      return kExitToolFailure;
    }
  }
  if (options.output_dir.empty()) {
    Say("merge: -o names a new directory for the merged report");
    return kExitToolFailure;
  }
  // OUT holds every session's report (command lines, memory maps, kernel addresses): made as a
  // session directory is, and claimed by its report.txt, so that two merges never share it.
  auto out = CreateOutputDirectory(options.output_dir, "report.txt");
  if (!out.ok()) {
    Say(out.status().message());
    return kExitToolFailure;
  }
  collector::MergeOptions merge;
  merge.analysis.threshold_ns = static_cast<uint64_t>(options.threshold_ms * 1e6);
  merge.memory_budget_bytes = options.collector_memory_bytes;
  Expected<collector::MergeResult> result = [&]() -> Expected<collector::MergeResult> {
    try {
      return collector::MergeSessions(options.directories, options.output_dir, out->fd.get(),
                                      merge);
    } catch (const std::bad_alloc&) {
      return Status::Error(StatusCode::kOutOfMemory, "out of memory merging the sessions");
    } catch (const std::exception& error) {
      return Status::Error(StatusCode::kIo, std::string("merging failed: ") + error.what());
    }
  }();
  if (!result.ok()) {
    Say(result.status().message());
    DiscardSession(*out, LaunchSettings{});  // nothing half made is left, nor OUT if it was made
    return kExitToolFailure;
  }
  fputs(result->text_report.c_str(), stdout);
  for (const std::string& warning : result->warnings) Say("warning: " + warning);
  for (const std::string& path : result->written) {
    if (path.ends_with(".perfetto-trace"))
      printf("\ntrace: %s (open it in https://ui.perfetto.dev)\n",
             collector::PrintableName(path).c_str());
  }
  return 0;
}

}  // namespace gprof::cli
