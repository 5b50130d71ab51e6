#include "target_process.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "exit_codes.h"

namespace gprof::cli {
namespace {

// What the child tells the parent through the status pipe when it cannot start the command.
struct ChildFailure {
  int stage;  // kStageCredentials or kStageExec
  int error;  // errno
};
constexpr int kStageCredentials = 1;
constexpr int kStageExec = 2;

volatile sig_atomic_t g_forward_to = 0;

void ForwardSignal(int signal, siginfo_t* info, void*) {
  // SI_KERNEL: the terminal sent it (Ctrl-C, hangup) to the whole foreground process group, which
  // includes the command: sending it again would deliver it twice.
  if (info->si_code == SI_KERNEL || g_forward_to <= 0) return;
  int saved_errno = errno;
  kill(static_cast<pid_t>(g_forward_to), signal);
  errno = saved_errno;
}

void InterruptWaits(int) {}

bool WriteFully(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void ChildFail(int status_fd, int stage, int error) {
  ChildFailure failure{stage, error};
  WriteFully(status_fd, &failure, sizeof(failure));
  _exit(kExitToolFailure);
}

// In the child: wait for the parent's go, then become the command.
[[noreturn]] void RunChild(const LaunchSettings& settings, char* const* argv, char* const* envp,
                           int release_fd, int status_fd) {
  char go = 0;
  ssize_t n;
  do {
    n = read(release_fd, &go, 1);
  } while (n < 0 && errno == EINTR);
  // EOF: gprof-run died or gave up before recording was ready; do not run the command unrecorded.
  if (n != 1) _exit(kExitToolFailure);
  close(release_fd);
  if (!DropPrivileges(settings)) ChildFail(status_fd, kStageCredentials, errno);
  execvpe(argv[0], argv, envp);
  ChildFail(status_fd, kStageExec, errno);
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

bool DropPrivileges(const LaunchSettings& settings) {
  if (!settings.run_as_uid) return true;
  if (!settings.run_as_user.empty()) {
    if (initgroups(settings.run_as_user.c_str(), *settings.run_as_gid) != 0) return false;
  } else if (setgroups(0, nullptr) != 0) {
    return false;
  }
  return setgid(*settings.run_as_gid) == 0 && setuid(*settings.run_as_uid) == 0;
}

std::optional<TargetProcess> TargetProcess::Spawn(const LaunchSettings& settings,
                                                  std::string* error) {
  int release_pipe[2], status_pipe[2];
  if (pipe2(release_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    return std::nullopt;
  }
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    close(release_pipe[0]);
    close(release_pipe[1]);
    return std::nullopt;
  }
  // Built before fork: the child only reads, writes a pipe and execs.
  std::vector<char*> argv = CStrings(settings.argv);
  std::vector<char*> envp = CStrings(settings.environment);
  pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    for (int fd : {release_pipe[0], release_pipe[1], status_pipe[0], status_pipe[1]}) close(fd);
    return std::nullopt;
  }
  if (pid == 0) {
    close(release_pipe[1]);
    close(status_pipe[0]);
    RunChild(settings, argv.data(), envp.data(), release_pipe[0], status_pipe[1]);
  }
  close(release_pipe[0]);
  close(status_pipe[1]);
  return TargetProcess(pid, release_pipe[1], status_pipe[0], settings.argv.front());
}

std::optional<LaunchFailure> TargetProcess::Release() {
  char go = 1;
  WriteFully(release_fd_, &go, 1);
  close(release_fd_);
  release_fd_ = -1;
  ChildFailure failure{};
  ssize_t n;
  do {
    n = read(status_fd_, &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  close(status_fd_);
  status_fd_ = -1;
  if (n != static_cast<ssize_t>(sizeof(failure))) return std::nullopt;  // exec'd (pipe closed)

  int status = 0;
  Reap(/*block=*/true, &status);
  if (failure.stage == kStageCredentials) {
    return LaunchFailure{kExitToolFailure, "cannot switch to the invoking user: " +
                                               std::string(strerror(failure.error))};
  }
  if (failure.error == ENOENT)
    return LaunchFailure{kExitNotFound, command_ + ": command not found"};
  return LaunchFailure{kExitCannotExecute,
                       command_ + ": cannot execute: " + std::string(strerror(failure.error))};
}

bool TargetProcess::Reap(bool block, int* wait_status) {
  for (;;) {
    pid_t r = waitpid(pid_, wait_status, block ? 0 : WNOHANG);
    if (r == pid_) {
      g_forward_to = 0;
      return true;
    }
    if (r == 0) return false;
    if (errno == EINTR) {
      if (!block) return false;
      continue;
    }
    return true;  // ECHILD: already reaped
  }
}

void TargetProcess::Abandon() {
  if (release_fd_ >= 0) close(release_fd_);  // the child sees EOF and exits without exec
  if (status_fd_ >= 0) close(status_fd_);
  release_fd_ = status_fd_ = -1;
  int status;
  Reap(/*block=*/true, &status);
}

void TargetProcess::ForwardSignals() const {
  g_forward_to = pid_;
  struct sigaction forward {};
  forward.sa_sigaction = ForwardSignal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    struct sigaction previous {};
    sigaction(signal, nullptr, &previous);
    // A signal ignored when gprof-run started stays ignored, as it is for the command.
    if (previous.sa_handler == SIG_IGN) continue;
    sigaction(signal, &forward, nullptr);
  }
  struct sigaction child {};
  child.sa_handler = InterruptWaits;  // no SA_RESTART: the recorder's poll returns at once
  sigemptyset(&child.sa_mask);
  sigaction(SIGCHLD, &child, nullptr);
}

int ExitStatusOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  return kExitToolFailure;
}

}  // namespace gprof::cli
