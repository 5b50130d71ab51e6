#include "cli/merge_command.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "cli/exit_codes.h"
#include "cli/run_command.h"
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
    if (!dir.ok()) return collector::PrintableName(directory) + ": no such session directory";
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

// OUT made afresh (a directory already there is used only when empty), and opened once.
Expected<collector::FileDescriptor> MakeOutputDirectory(const std::string& path) {
  const std::string shown = collector::PrintableName(path);
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::FromErrno(errno, "cannot make " + shown + ": " + strerror(errno));
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "cannot open " + shown + ": " + strerror(errno));
  collector::FileDescriptor dir(fd);
  int probe = dup(fd);
  DIR* listing = probe >= 0 ? fdopendir(probe) : nullptr;
  bool empty = listing != nullptr;
  while (listing != nullptr) {
    dirent* entry = readdir(listing);
    if (entry == nullptr) break;
    if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) empty = false;
  }
  if (listing != nullptr) closedir(listing);
  if (!empty)
    return Status::Error(StatusCode::kInvalid,
                         shown + " is not empty: -o names a new directory for the merged report");
  return dir;
}

}  // namespace

int MergeCommand(const MergeCommandOptions& options) {
  if (geteuid() == 0) {
    if (std::string refused = AsTheSessionsOwner(options.directories); !refused.empty()) {
      Say(refused);
      return kExitToolFailure;
    }
  }
  auto out = MakeOutputDirectory(options.output_dir);
  if (!out.ok()) {
    Say(out.status().message());
    return kExitToolFailure;
  }
  collector::MergeOptions merge;
  merge.analysis.threshold_ns = static_cast<uint64_t>(options.threshold_ms * 1e6);
  merge.memory_budget_bytes = options.collector_memory_bytes;
  Expected<collector::MergeResult> result = [&]() -> Expected<collector::MergeResult> {
    try {
      return collector::MergeSessions(options.directories, options.output_dir, out->get(), merge);
    } catch (const std::bad_alloc&) {
      return Status::Error(StatusCode::kOutOfMemory, "out of memory merging the sessions");
    } catch (const std::exception& error) {
      return Status::Error(StatusCode::kIo, std::string("merging failed: ") + error.what());
    }
  }();
  if (!result.ok()) {
    Say(result.status().message());
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
