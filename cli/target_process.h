// The profiled command: forked held, released once recording is attached (so its first instruction
// is recorded), waited for, and sent the signals gprof-run receives.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace gprof::cli {

struct LaunchSettings {
  std::vector<std::string> argv;
  std::vector<std::string> environment;  // complete, "NAME=value"
  // Under sudo the command runs as the invoking user, not as root.
  std::optional<uid_t> run_as_uid;
  std::optional<gid_t> run_as_gid;
  std::string run_as_user;
};

// Becomes settings.run_as_uid for good (groups: SUDO_USER's, or none), if it is set. False with
// errno when the kernel refused.
bool DropPrivileges(const LaunchSettings& settings);

// Why a released command did not start.
struct LaunchFailure {
  int exit_status;      // kExitNotFound, kExitCannotExecute or kExitToolFailure
  std::string message;  // one line
};

class TargetProcess {
 public:
  // Forks the child and leaves it waiting. The caller's signal dispositions and mask at this point
  // are the ones the command starts with.
  static std::optional<TargetProcess> Spawn(const LaunchSettings& settings, std::string* error);

  pid_t pid() const { return pid_; }
  // Lets the child exec the command. Returns a failure when it could not (then it has exited).
  std::optional<LaunchFailure> Release();
  // Reaps the child; with `block` false returns false while it still runs. After ForwardSignals,
  // a child stopped by the terminal's stop signals stops gprof-run the same way until both are
  // continued (see StopWithCommand).
  bool Reap(bool block, int* wait_status);
  // Kills a child that was never released (gprof-run failed before it could start the command).
  void Abandon();

  // Forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTSTP to the child, except
  // those the terminal sent to the foreground process group (which holds the child: it stays in
  // gprof-run's) and those the child's own processes sent; leaves job control to the child;
  // SIGCHLD interrupts blocking waits.
  void ForwardSignals();

 private:
  TargetProcess(pid_t pid, int release_fd, int status_fd, std::string command)
      : pid_(pid), release_fd_(release_fd), status_fd_(status_fd), command_(std::move(command)) {}
  void StopWithCommand(int signal);
  void StartWaker();
  void Ended();

  static constexpr std::array<int, 4> kJobSignals = {SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT};
  pid_t pid_;
  int release_fd_;  // parent writes one byte: go
  int status_fd_;   // child reports why exec failed; closes on exec (CLOEXEC)
  std::string command_;
  bool mirror_stops_ = false;  // set by ForwardSignals, until the child is reaped
  struct sigaction job_signals_before_[kJobSignals.size()] = {};  // what gprof-run started with
  pid_t waker_pid_ = -1;  // StartWaker's process, once the child has stopped
  int waker_fd_ = -1;     // 'S': gprof-run stops now; 'C': it was continued
};

// The status gprof-run exits with for a command that ended with `wait_status`: its exit code, or
// 128 + N when it died of signal N.
int ExitStatusOf(int wait_status);

}  // namespace gprof::cli
