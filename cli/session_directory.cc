#include "session_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "session_format.h"
#include "session_reader.h"

namespace gprof::cli {
namespace {

namespace fs = std::filesystem;

// A file-name-safe short form of the command: "python3", "train.py"...
std::string CommandStem(const std::string& command) {
  std::string stem = fs::path(command).filename().string();
  for (char& c : stem) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return stem.empty() ? "cmd" : stem.substr(0, 40);
}

std::string Timestamp() {
  time_t now = time(nullptr);
  tm local{};
  localtime_r(&now, &local);
  char text[32];
  strftime(text, sizeof(text), "%Y%m%d-%H%M%S", &local);
  return text;
}

// Only its owner may enter: the session holds command lines, memory maps and kernel addresses.
constexpr mode_t kSessionDirectoryMode = 0700;

bool WriteFully(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::optional<std::string> CreateSessionDirectory(const std::string& requested,
                                                  const std::string& command, std::string* error) {
  std::error_code ec;
  if (!requested.empty()) {
    if (fs::exists(requested, ec)) {
      if (!fs::is_directory(requested, ec)) {
        *error = requested + " exists and is not a directory";
        return std::nullopt;
      }
      if (!fs::is_empty(requested, ec)) {
        *error = requested +
                 " already exists and is not empty: gprof-run never overwrites a "
                 "session; choose another -o or remove it";
        return std::nullopt;
      }
    } else if (mkdir(requested.c_str(), kSessionDirectoryMode) != 0) {
      *error = "cannot create session directory " + requested + ": " + strerror(errno);
      return std::nullopt;
    }
    return fs::absolute(requested, ec).lexically_normal().string();
  }
  std::string base = "gprof-" + CommandStem(command) + "-" + Timestamp();
  for (int attempt = 1; attempt < 1000; ++attempt) {
    std::string name = attempt == 1 ? base : base + "-" + std::to_string(attempt);
    if (mkdir(name.c_str(), kSessionDirectoryMode) == 0)
      return fs::absolute(name, ec).lexically_normal().string();
    if (errno != EEXIST) {
      *error = "cannot create session directory " + name +
               " in the current directory: " + strerror(errno) + " (use -o DIR)";
      return std::nullopt;
    }
  }
  *error = "cannot find a free session directory name " + base + "-N";
  return std::nullopt;
}

bool WriteSessionMeta(const std::string& directory, const RunDescription& run, std::string* error) {
  nlohmann::json exit = nlohmann::json::object();
  if (run.exit_code) exit["code"] = *run.exit_code;
  if (run.exit_signal) exit["signal"] = *run.exit_signal;
  nlohmann::json meta = {
      {"format", "gprof-run-session"},
      {"version", collector::kSessionMetaVersion},
      {"tool_version", GPROF_VERSION},
      {"command", run.command},
      {"root_pid", run.root_pid},
      {"clock", "CLOCK_MONOTONIC"},
      {"start",
       {{"monotonic_ns", run.start_monotonic_ns},
        {"realtime_ns", run.start_realtime_ns},
        {"boottime_ns", run.start_boottime_ns}}},
      {"end", {{"monotonic_ns", run.end_monotonic_ns}}},
      {"exit", exit},
      {"finished", run.finished},
      {"kernel_recording",
       {{"enabled", run.kernel_recording},
        {"note", run.kernel_recording_note},
        {"stack_min_ns", run.kernel_stack_min_ns}}},
      {"inject_library", run.inject_library},
      {"recording_stopped", nlohmann::json::array()},
      {"cuda_mode", run.cuda_mode},
  };
  if (run.window_start_ns != 0) {
    meta["window"] = {{"delay_s", run.delay_s},
                      {"duration_s", run.duration_s > 0 ? nlohmann::json(run.duration_s) : nullptr},
                      {"start_monotonic_ns", run.window_start_ns},
                      {"end_monotonic_ns", run.window_end_ns}};
  }
  if (run.max_size_bytes > 0) {
    meta["max_size"] = {{"limit_bytes", run.max_size_bytes},
                        {"used_bytes", run.size_used_bytes},
                        {"stopped_at_monotonic_ns", run.size_stopped_at_ns},
                        {"refused_records", run.size_refused_records},
                        {"refused_bytes", run.size_refused_bytes}};
  }
  if (run.kernel_writes_stopped_ns != 0) {
    bool failed = run.kernel_writes_stopped_reason.starts_with("cannot write");
    meta["recording_stopped"].push_back({{"file", collector::kKernelFile},
                                         {"time_ns", run.kernel_writes_stopped_ns},
                                         {"cause", failed ? "write_failed" : "session_full"},
                                         {"reason", run.kernel_writes_stopped_reason}});
  }
  fs::path final_path = fs::path(directory) / collector::kSessionMetaFile;
  fs::path temporary = final_path;
  temporary += ".tmp";
  // A command line may hold any bytes: written as UTF-8, bad bytes replaced (U+FFFD).
  std::string text = meta.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Never through a link or into a file someone else made: the directory may be the user's while
  // this runs as root. The mode does not depend on the umask.
  unlink(temporary.c_str());
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot write " + temporary.string() + ": " + strerror(errno);
    return false;
  }
  bool written = WriteFully(fd, text);
  int write_errno = errno;
  if (close(fd) != 0 && written) {
    written = false;
    write_errno = errno;
  }
  if (!written) {
    *error = "cannot write " + temporary.string() + ": " + strerror(write_errno);
    unlink(temporary.c_str());
    return false;
  }
  if (rename(temporary.c_str(), final_path.c_str()) != 0) {
    *error = "cannot write " + final_path.string() + ": " + strerror(errno);
    return false;
  }
  return true;
}

void CreateDiskReserve(const std::string& directory) {
  std::string path = directory + "/" + format::kReserveFile;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  bool reserved = fallocate(fd, 0, 0, static_cast<off_t>(format::kReserveBytes)) == 0;
  close(fd);
  if (!reserved) unlink(path.c_str());
}

void ReleaseDiskReserve(const std::string& directory) {
  unlink((directory + "/" + format::kReserveFile).c_str());
}

void DiscardSession(const std::string& directory, bool created) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) fs::remove_all(entry.path(), ec);
  if (created) fs::remove(directory, ec);
}

void ChownSession(const std::string& directory, unsigned uid, unsigned gid) {
  std::error_code ec;
  // The directory as named (-o may name it through a link); in it, not recursively (a session is
  // flat), a link is changed itself, never what it points to.
  if (chown(directory.c_str(), uid, gid) != 0) return;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    if (lchown(entry.path().c_str(), uid, gid) != 0) continue;
  }
}

}  // namespace gprof::cli
