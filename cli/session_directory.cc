#include "cli/session_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/output_name.h"
#include "collector/model/model.h"
#include "inject/format/session_directory.h"
#include "inject/format/session_json.h"
#include "inject/shared/file_owner.h"

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

// Who this process is, for a message: "alice (uid 1000)".
std::string UserText(uid_t uid) {
  std::string text = "uid " + std::to_string(uid);
  if (passwd* user = getpwuid(uid)) text = std::string(user->pw_name) + " (" + text + ")";
  return collector::PrintableName(text);
}

// The directory's path as the kernel knows it now: absolute, without links.
std::string PathOf(int fd, const std::string& fallback) {
  std::error_code ec;
  fs::path path = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (ec || !path.is_absolute()) return fs::absolute(fallback, ec).lexically_normal().string();
  return path.string();
}

// Why a directory cannot take this run's session: it holds files, `session` another run's session
// (maybe one starting at this moment). Launchers that start one copy of the command per process
// hand each the same -o: the line says how to give each its own.
Status InUse(const std::string& shown, bool session) {
  std::string line = shown + (session ? " holds another gprof-run session (its session.json)"
                                      : " already exists and is not empty");
  line += ": gprof-run never writes two runs into one directory; choose another -o or remove it";
  std::string rank = LauncherRankVariable();
  if (!rank.empty()) {
    std::string variable = rank.substr(0, rank.find('='));
    std::string base = shown;
    while (base.size() > 1 && base.ends_with('/')) base.pop_back();
    line += " (" + rank + ": a launcher starts one copy per process; name one directory for each, "
            "e.g. -o " + base + "-r%q{" + variable + "})";
  }
  return Status::Error(StatusCode::kInvalid, line);
}

// Opens `name`, made or found in `parent_fd`, never through a link, and checks that it may hold a
// session: a directory of this process's user (for root, writable by no one else), empty. It is
// claimed by making `claim` in it.
Status OpenAndCheck(SessionDirectory* dir, const std::string& shown, const char* claim) {
  dir->fd = collector::FileDescriptor(openat(dir->parent_fd.get(), dir->name.c_str(),
                                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat info {};
  if (!dir->fd.valid()) {
    int open_errno = errno;
    if (open_errno == ENOTDIR || open_errno == ELOOP) {
      bool link =
          fstatat(dir->parent_fd.get(), dir->name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(info.st_mode);
      return Status::Error(StatusCode::kInvalid,
                           link ? shown +
                                      " is a symbolic link: give the directory itself (gprof-run "
                                      "follows no link to its session directory)"
                                : shown + " exists and is not a directory");
    }
    return Status::FromErrno(
        open_errno, "cannot open session directory " + shown + ": " + strerror(open_errno));
  }
  if (fstat(dir->fd.get(), &info) != 0) {
    return Status::FromErrno(errno,
                             "cannot open session directory " + shown + ": " + strerror(errno));
  }
  if (info.st_uid != geteuid()) {
    return Status::Error(StatusCode::kInvalid,
                         shown + " belongs to " + UserText(info.st_uid) + ", not to " +
                             UserText(geteuid()) +
                             ", whom the command runs as: gprof-run writes a session only into "
                             "that user's own directory");
  }
  if (geteuid() == 0 && (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::Error(StatusCode::kInvalid,
                         shown +
                             " is writable by others: as root, gprof-run writes a session only "
                             "into a directory no one else can change");
  }
  int listing_fd = openat(dir->fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* listing = listing_fd >= 0 ? fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    int list_errno = errno;
    if (listing_fd >= 0) close(listing_fd);
    return Status::FromErrno(
        list_errno, "cannot list session directory " + shown + ": " + strerror(list_errno));
  }
  bool empty = true;
  bool session = false;
  while (const dirent* entry = readdir(listing)) {
    if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) empty = false;
    if (strcmp(entry->d_name, format::kSessionMetaFile) == 0) session = true;
  }
  closedir(listing);
  if (!empty) return InUse(shown, session);
  // The claim: of the runs that found it empty, the one that makes `claim` has it (O_EXCL is
  // atomic, also on NFS 3 and later); the others stop here. A run's session.json is made empty
  // and written once the command is set up (WriteSessionMeta, through a temporary file renamed
  // over it); a merge's report.txt is replaced by the report.
  int claimed = openat(dir->fd.get(), claim, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       0644);
  if (claimed < 0) {
    if (errno == EEXIST) return InUse(shown, strcmp(claim, format::kSessionMetaFile) == 0);
    return Status::FromErrno(errno, "cannot write in session directory " + shown + ": " +
                                        strerror(errno));
  }
  close(claimed);
  dir->path = PathOf(dir->fd.get(), shown);
  return {};
}

// The work of CreateSessionDirectory, as whoever this process is.
Expected<SessionDirectory> MakeSessionDirectory(const std::string& requested,
                                                const std::string& command,
                                                const char* claim = format::kSessionMetaFile) {
  SessionDirectory dir;
  if (!requested.empty()) {
    const std::string shown = collector::PrintableName(requested);
    std::string trimmed = requested;
    while (trimmed.size() > 1 && trimmed.ends_with('/')) trimmed.pop_back();
    fs::path path(trimmed);
    std::string parent = path.has_parent_path() ? path.parent_path().string() : ".";
    dir.name = path.filename().string();
    if (dir.name.empty() || dir.name == "." || dir.name == "..") {  // "/", "x/..": never new
      parent = trimmed;
      dir.name = ".";
    }
    dir.parent_fd =
        collector::FileDescriptor(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.parent_fd.valid()) {
      return Status::FromErrno(errno,
                               "cannot create session directory " + shown + ": " + strerror(errno));
    }
    if (dir.name != "." &&
        mkdirat(dir.parent_fd.get(), dir.name.c_str(), kSessionDirectoryMode) == 0) {
      dir.created = true;
    } else if (dir.name != "." && errno != EEXIST) {
      return Status::FromErrno(errno,
                               "cannot create session directory " + shown + ": " + strerror(errno));
    }
    if (Status checked = OpenAndCheck(&dir, shown, claim); !checked.ok()) return checked;
    return dir;
  }
  dir.parent_fd = collector::FileDescriptor(open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // The pid too: a launcher starts its copies within the same second, and each must find its own.
  std::string base =
      "gprof-" + CommandStem(command) + "-" + Timestamp() + "-" + std::to_string(getpid());
  for (int attempt = 1; dir.parent_fd.valid() && attempt < 1000; ++attempt) {
    dir.name = attempt == 1 ? base : base + "-" + std::to_string(attempt);
    if (mkdirat(dir.parent_fd.get(), dir.name.c_str(), kSessionDirectoryMode) == 0) {
      dir.created = true;
      Status checked = OpenAndCheck(&dir, collector::PrintableName(dir.name), claim);
      if (!checked.ok()) return checked;
      return dir;
    }
    if (errno != EEXIST) break;
  }
  if (!dir.parent_fd.valid() || errno != EEXIST) {
    return Status::FromErrno(
        errno, "cannot create session directory " + collector::PrintableName(dir.name) +
                   " in the current directory: " + strerror(errno) + " (use -o DIR)");
  }
  return Status::Error(StatusCode::kIo, "cannot find a free session directory name " + base + "-N");
}

// The child's answer: one message, with the directory and its parent as descriptors when made.
struct MadeMessage {
  char code;  // StatusCode: kOk when made
  char created;
  char text[4094];  // made: name, NUL, path; else the error line
};

bool SendMade(int socket, const Expected<SessionDirectory>& made) {
  MadeMessage message{};
  const SessionDirectory* dir = made.ok() ? &made.value() : nullptr;
  message.code = static_cast<char>(made.ok() ? StatusCode::kOk : made.status().code());
  message.created = dir != nullptr && dir->created;
  std::string text = dir ? dir->name + std::string(1, '\0') + dir->path : made.status().message();
  if (text.size() >= sizeof(message.text)) text.resize(sizeof(message.text) - 1);
  memcpy(message.text, text.data(), text.size());
  iovec data{&message, offsetof(MadeMessage, text) + text.size() + 1};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  if (dir) {
    header.msg_control = control;
    header.msg_controllen = sizeof(control);
    cmsghdr* rights = CMSG_FIRSTHDR(&header);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = {dir->fd.get(), dir->parent_fd.get()};
    memcpy(CMSG_DATA(rights), fds, sizeof(fds));
  }
  return sendmsg(socket, &header, MSG_NOSIGNAL) >= 0;
}

Expected<SessionDirectory> ReceiveMade(int socket) {
  MadeMessage message{};
  iovec data{&message, sizeof(message) - 1};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  header.msg_control = control;
  header.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket, &header, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  SessionDirectory dir;
  for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr; c = CMSG_NXTHDR(&header, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int fds[2] = {-1, -1};
    memcpy(fds, CMSG_DATA(c), std::min(sizeof(fds), c->cmsg_len - CMSG_LEN(0)));
    dir.fd = collector::FileDescriptor(fds[0]);
    dir.parent_fd = collector::FileDescriptor(fds[1]);
  }
  if (n < static_cast<ssize_t>(offsetof(MadeMessage, text))) {
    return Status::Error(StatusCode::kIo,
                         "cannot create the session directory: the process making it as the "
                         "invoking user failed");
  }
  if (static_cast<StatusCode>(message.code) != StatusCode::kOk) {
    return Status::Error(static_cast<StatusCode>(message.code), message.text);
  }
  if (!dir.fd.valid() || !dir.parent_fd.valid()) {
    return Status::Error(StatusCode::kIo,
                         "cannot create the session directory: no descriptor came back");
  }
  dir.created = message.created != 0;
  dir.name = message.text;
  dir.path = message.text + dir.name.size() + 1;
  return dir;
}

nlohmann::json AnchorJson(const collector::ClockAnchor& anchor) {
  namespace key = format::session_json;
  return {{key::kAnchorMonotonicNs, anchor.monotonic_ns},
          {key::kAnchorRealtimeNs, anchor.realtime_ns},
          {key::kAnchorBoottimeNs, anchor.boottime_ns},
          {key::kAnchorUncertaintyNs, anchor.uncertainty_ns},
          {key::kAnchorRealtimeMaxErrorNs, anchor.realtime_max_error_ns}};
}

// The host, the clock anchors, gprof-run's time namespace and the launcher's rank.
void AddPlace(const RunDescription& run, nlohmann::json* meta) {
  namespace key = format::session_json;
  (*meta)[key::kHost] = {{key::kHostName, run.host_name}, {key::kHostBootId, run.boot_id}};
  nlohmann::json anchors = {{key::kAnchorsStart, AnchorJson(run.start_anchor)}};
  if (run.end_anchor.monotonic_ns != 0) anchors[key::kAnchorsEnd] = AnchorJson(run.end_anchor);
  (*meta)[key::kClockAnchors] = std::move(anchors);
  (*meta)[key::kTimeNamespace] = {{key::kTimeNamespaceMonotonicNs, run.time_namespace_monotonic_ns},
                                  {key::kTimeNamespaceBoottimeNs, run.time_namespace_boottime_ns}};
  if (run.test_realtime_skew_ns != 0) (*meta)[key::kTestRealtimeSkewNs] = run.test_realtime_skew_ns;
  if (run.rank) {
    nlohmann::json rank = {{key::kRankRank, *run.rank->rank},
                           {key::kRankVariable, run.rank->variable}};
    if (run.rank->local_rank) rank[key::kRankLocalRank] = *run.rank->local_rank;
    if (run.rank->world_size) rank[key::kRankWorldSize] = *run.rank->world_size;
    (*meta)[key::kRank] = std::move(rank);
  }
}

}  // namespace

std::string SessionDirectory::FilePath(const std::string& file) const {
  std::string path = "/proc/self/fd/" + std::to_string(fd.get());
  return file.empty() ? path : path + "/" + file;
}

FileOwner SessionFileOwner(const LaunchSettings& as) {
  if (!as.run_as_uid || geteuid() == *as.run_as_uid) return {};
  return {static_cast<int>(*as.run_as_uid), static_cast<int>(*as.run_as_gid)};
}

Expected<SessionDirectory> CreateSessionDirectory(const std::string& requested,
                                                  const std::string& command,
                                                  const LaunchSettings& as) {
  if (SessionFileOwner(as).uid < 0) return MakeSessionDirectory(requested, command);
  // Under sudo: the path is resolved, and the directory made and opened, by a child with the
  // user's credentials (groups included). What comes back is only ever a directory the user
  // could have made or opened themselves; root does the rest through the descriptor.
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) {
    return Status::FromErrno(
        errno, std::string("cannot create the session directory: socketpair: ") + strerror(errno));
  }
  pid_t child = fork();
  if (child < 0) {
    Status failed = Status::FromErrno(
        errno, std::string("cannot create the session directory: fork: ") + strerror(errno));
    close(sockets[0]);
    close(sockets[1]);
    return failed;
  }
  if (child == 0) {
    close(sockets[0]);
    Expected<SessionDirectory> made =
        DropPrivileges(as)
            ? MakeSessionDirectory(requested, command)
            : Status::FromErrno(errno,
                                std::string("cannot switch to the invoking user to create the "
                                            "session directory: ") +
                                    strerror(errno));
    _exit(SendMade(sockets[1], made) ? 0 : 1);
  }
  close(sockets[1]);
  auto dir = ReceiveMade(sockets[0]);
  close(sockets[0]);
  int status;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return dir;
}

Expected<SessionDirectory> CreateOutputDirectory(const std::string& requested, const char* claim) {
  return MakeSessionDirectory(requested, "", claim);
}

std::string SessionMetaText(const RunDescription& run) {
  namespace key = format::session_json;
  nlohmann::json exit = nlohmann::json::object();
  if (run.exit_code) exit[key::kExitCode] = *run.exit_code;
  if (run.exit_signal) exit[key::kExitSignal] = *run.exit_signal;
  nlohmann::json meta = {
      {key::kFormat, key::kFormatName},
      {key::kVersion, format::kSessionMetaVersion},
      {key::kToolVersion, GPROF_VERSION},
      {key::kCommand, run.command},
      {key::kRootPid, run.root_pid},
      {key::kClock, key::kClockName},
      {key::kStart,
       {{key::kStartMonotonicNs, run.start_monotonic_ns},
        {key::kStartRealtimeNs, run.start_realtime_ns},
        {key::kStartBoottimeNs, run.start_boottime_ns}}},
      {key::kEnd, {{key::kEndMonotonicNs, run.end_monotonic_ns}}},
      {key::kExit, exit},
      {key::kFinished, run.finished},
      {key::kKernelRecording,
       {{key::kKernelEnabled, run.kernel_recording},
        {key::kKernelNote, run.kernel_recording_note},
        {key::kKernelStackMinNs, run.kernel_stack_min_ns}}},
      {key::kInjectLibrary, run.inject_library},
      {key::kRecordingStopped, nlohmann::json::array()},
      {key::kCudaMode, run.cuda_mode},
  };
  AddPlace(run, &meta);
  if (!run.nvtx_tool.empty()) meta[key::kNvtxTool] = collector::PrintableName(run.nvtx_tool);
  if (!run.nccl_plugin.empty())
    meta[key::kNcclPlugin] = collector::PrintableName(run.nccl_plugin);
  if (run.window_start_ns != 0) {
    meta[key::kWindow] = {
        {key::kWindowDelayS, run.delay_s},
        {key::kWindowDurationS, run.duration_s > 0 ? nlohmann::json(run.duration_s) : nullptr},
        {key::kWindowStartNs, run.window_start_ns},
        {key::kWindowEndNs, run.window_end_ns}};
  }
  if (!run.capture_range.empty()) {
    nlohmann::json windows = nlohmann::json::array();
    for (const auto& window : run.capture_windows) {
      windows.push_back({{key::kCaptureStartNs, window.start_ns},
                         {key::kCaptureEndNs, window.end_ns},
                         {key::kCaptureOpenedBy, window.opened_by},
                         {key::kCaptureClosedBy, window.closed_by},
                         {key::kCaptureOpenPid, window.open_pid},
                         {key::kCaptureClosePid, window.close_pid}});
    }
    meta[key::kCapture] = {{key::kCaptureRange, run.capture_range},
                           {key::kCaptureControl, run.capture_control},
                           {key::kCaptureWindows, windows},
                           {key::kCaptureRefusedOpens, run.capture_refused_opens}};
    if (const auto& flight = run.flight) {
      meta[key::kCapture][key::kFlight] = {{key::kFlightKeepNs, flight->keep_ns},
                                           {key::kFlightFreezeNs, flight->freeze_ns},
                                           {key::kFlightHangNs, flight->hang_ns},
                                           {key::kFlightEndedBy, flight->ended_by},
                                           {key::kFlightFiredNs, flight->fired_monotonic_ns},
                                           {key::kFlightDurationNs, flight->duration_ns},
                                           {key::kFlightPid, flight->pid},
                                           {key::kFlightTid, flight->tid},
                                           {key::kFlightApiId, flight->api_id},
                                           {key::kFlightFreezeKind, flight->freeze_kind},
                                           {key::kFlightThreads, flight->threads}};
    }
  }
  if (run.attach) {
    meta[key::kAttach] = {{key::kAttachPids, run.attach->pids},
                          {key::kAttachProcesses, run.attach->processes},
                          {key::kAttachEnded, run.attach->ended}};
  }
  if (run.max_size_bytes > 0) {
    meta[key::kMaxSize] = {{key::kMaxSizeLimitBytes, run.max_size_bytes},
                           {key::kMaxSizeUsedBytes, run.size_used_bytes},
                           {key::kMaxSizeStoppedAtNs, run.size_stopped_at_ns},
                           {key::kMaxSizeRefusedRecords, run.size_refused_records},
                           {key::kMaxSizeRefusedBytes, run.size_refused_bytes}};
  }
  if (run.kernel_writes_stopped_ns != 0) {
    meta[key::kRecordingStopped].push_back({{key::kStopFile, format::kKernelFile},
                                            {key::kStopTimeNs, run.kernel_writes_stopped_ns},
                                            {key::kStopCause, run.kernel_writes_stopped_cause},
                                            {key::kStopReason, run.kernel_writes_stopped_reason}});
  }
  for (const RunDescription::Stop& stop : run.other_stops) {
    meta[key::kRecordingStopped].push_back({{key::kStopFile, stop.file},
                                            {key::kStopTimeNs, stop.time_ns},
                                            {key::kStopCause, stop.cause},
                                            {key::kStopReason, stop.reason}});
  }
  if (!run.lost.empty()) {
    nlohmann::json lost = nlohmann::json::array();
    for (const RunDescription::Lost& entry : run.lost) {
      lost.push_back({{key::kLostWhat, entry.what},
                      {key::kLostCount, entry.count ? nlohmann::json(*entry.count) : nullptr}});
    }
    meta[key::kLost] = std::move(lost);
  }
  if (!run.nested_sessions.empty()) {
    nlohmann::json nested = nlohmann::json::array();
    for (const RunDescription::Nested& entry : run.nested_sessions) {
      nested.push_back({{key::kNestedPid, entry.pid},
                        {key::kNestedDirectory, entry.directory},
                        {key::kNestedCalls, entry.calls ? nlohmann::json(*entry.calls) : nullptr}});
    }
    meta[key::kNestedSessions] = std::move(nested);
  }
  if (!run.running_at_end.empty()) {
    nlohmann::json running = nlohmann::json::array();
    for (const RunDescription::Running& process : run.running_at_end) {
      running.push_back(
          {{key::kRunningPid, process.pid}, {key::kRunningStillWriting, process.still_writing}});
    }
    meta[key::kRunningAtEnd] = std::move(running);
  }
  // A command line may hold any bytes: written as UTF-8, bad bytes replaced (U+FFFD).
  return meta.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status WriteSessionMeta(const SessionDirectory& directory, const LaunchSettings& as,
                        const RunDescription& run) {
  const std::string final_name = format::kSessionMetaFile;
  const std::string temporary = final_name + ".tmp";
  auto shown = [&](const std::string& name) {
    return collector::PrintableName(directory.path + "/" + name);
  };
  std::string text = SessionMetaText(run);
  // In the directory through its descriptor, never through a link or into a file someone else
  // made, and as the session's owner (the directory may be the user's while this runs as root).
  // The mode does not depend on the umask.
  FileOwnerScope owner(SessionFileOwner(as).uid, SessionFileOwner(as).gid);
  if (!owner.ok()) {
    return Status::Error(
        StatusCode::kPermissionDenied,
        "cannot write " + shown(temporary) + ": cannot take the invoking user's identity");
  }
  auto fd = collector::CreateSessionFile(directory.fd.get(), temporary, 0644);
  if (!fd.ok()) {
    return Status::Error(fd.status().code(),
                         "cannot write " + shown(temporary) + ": " + fd.status().message());
  }
  bool written = WriteFully(fd->get(), text);
  int write_errno = errno;
  if (close(fd->release()) != 0 && written) {
    written = false;
    write_errno = errno;
  }
  if (!written) {
    unlinkat(directory.fd.get(), temporary.c_str(), 0);
    return Status::FromErrno(write_errno,
                             "cannot write " + shown(temporary) + ": " + strerror(write_errno));
  }
  if (renameat(directory.fd.get(), temporary.c_str(), directory.fd.get(), final_name.c_str()) !=
      0) {
    return Status::FromErrno(errno, "cannot write " + shown(final_name) + ": " + strerror(errno));
  }
  return {};
}

void DiscardSession(const SessionDirectory& directory, const LaunchSettings& as) {
  FileOwnerScope owner(SessionFileOwner(as).uid, SessionFileOwner(as).gid);
  if (!owner.ok()) return;
  // Flat: names in the directory itself, never followed, never a subdirectory's contents.
  std::vector<std::string> names;
  int listing_fd = openat(directory.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (DIR* listing = listing_fd >= 0 ? fdopendir(listing_fd) : nullptr) {
    while (const dirent* entry = readdir(listing)) names.emplace_back(entry->d_name);
    closedir(listing);
  } else if (listing_fd >= 0) {
    close(listing_fd);
  }
  for (const std::string& name : names) unlinkat(directory.fd.get(), name.c_str(), 0);
  if (!directory.created || !directory.parent_fd.valid()) return;
  // Only the directory that was made, if its name still names it.
  struct stat made {
  }, named{};
  if (fstat(directory.fd.get(), &made) == 0 &&
      fstatat(directory.parent_fd.get(), directory.name.c_str(), &named, AT_SYMLINK_NOFOLLOW) ==
          0 &&
      made.st_dev == named.st_dev && made.st_ino == named.st_ino) {
    unlinkat(directory.parent_fd.get(), directory.name.c_str(), AT_REMOVEDIR);
  }
}

}  // namespace gprof::cli
