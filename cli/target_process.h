// The profiled command: forked held, released once recording is attached (so its first instruction
// is recorded), waited for, and sent the signals gprof-run receives.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "inject/shared/status.h"

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
  // The signals ForwardSignals forwards.
  static constexpr std::array<int, 7> kForwarded = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                                                    SIGUSR1, SIGUSR2, SIGTSTP};

  // Forks the child and leaves it waiting. The caller's signal dispositions and mask at this point
  // are the ones the command starts with.
  static Expected<TargetProcess> Spawn(const LaunchSettings& settings);

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
  //
  // With `witnessed` (the kernel recorder records signals), a forward waits for SettleForwards,
  // which also leaves out what reached the child already: a signal that one kill() sent to the
  // whole process group (kill %1, killpg, a shell's SIGHUP to its jobs at exit), and one whose
  // sender also sent it to the child's pid around the same time (timeout signals its child, then
  // its process group; systemd and Slurm signal every process of the job). The child then gets
  // it once, as it would without gprof-run.
  void ForwardSignals(bool witnessed);
  // Decides the forwards that wait, by the signals the kernel recorder saw since the last call,
  // every one generated before `drained_ns` among them: a forward is due only once the records
  // of its wait are all in, however late gprof-run drained them. Returns the milliseconds until
  // the next one is due (call again by then, after a drain), -1 when none waits.
  int SettleForwards(const std::vector<bpf::SignalRecord>& seen, uint64_t drained_ns);

  // After the command ended: SIGINT, SIGTERM, SIGHUP and SIGQUIT (those gprof-run did not start
  // with ignored) end gprof-run at once by that signal, as they end any program, after `line` on
  // stderr; one that came since the command ended does so now. What is left to do then is the
  // report, which can be built again from the session.
  void StopOnInterrupt(const std::string& line);

 private:
  TargetProcess(pid_t pid, int release_fd, int status_fd, std::string command)
      : pid_(pid), release_fd_(release_fd), status_fd_(status_fd), command_(std::move(command)) {}
  void StopWithCommand(int signal);
  void StartWaker();
  void Ended();
  enum class Decision { kWait, kForward, kLeave };
  // What the handler noted of one of its runs.
  struct HandlerRun {
    pid_t sender;
    uint64_t noted_ns;
    uint32_t run;  // the handler's numbered runs for this signal up to this one; 0: not numbered
    bool for_command;
  };
  Decision Decide(size_t slot, const HandlerRun& run, uint64_t drained_ns, uint64_t now_ns,
                  uint64_t* due_ns);
  Decision DecideFor(size_t slot, const HandlerRun& run, const bpf::SignalRecord* own,
                     uint64_t after_ns, uint64_t until_ns, uint64_t drained_ns, uint64_t now_ns,
                     uint64_t* due_ns);

  static constexpr std::array<int, 4> kJobSignals = {SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT};
  pid_t pid_;
  int release_fd_;  // parent writes one byte: go
  int status_fd_;   // child reports why exec failed; closes on exec (CLOEXEC)
  std::string command_;
  bool mirror_stops_ = false;  // set by ForwardSignals, until the child is reaped
  struct sigaction job_signals_before_[kJobSignals.size()] = {};  // what gprof-run started with
  pid_t waker_pid_ = -1;  // StartWaker's process, once the child has stopped
  int waker_fd_ = -1;     // 'S': gprof-run stops now; 'C': it was continued
  struct sigaction forwarded_before_[kForwarded.size()] = {};  // what gprof-run started with
                                                               // (SIGTSTP's: job_signals_before_)
  // Signals the kernel recorder saw for gprof-run or for the child, while they may still decide a
  // forward; `used` once one did.
  struct Seen {
    bpf::SignalRecord record;
    bool used = false;
  };
  std::vector<Seen> seen_;
  // By slot: the signals to gprof-run recorded up to this time are those of runs decided (from
  // when ForwardSignals set the handler), and how many runs that was.
  std::array<uint64_t, kForwarded.size()> decided_until_ns_ = {};
  std::array<uint32_t, kForwarded.size()> paired_runs_ = {};
  // When SIGTSTP had its default action, gprof-run stopping itself with the command (the last).
  std::vector<std::pair<uint64_t, uint64_t>> stopped_by_default_;
};

// The status gprof-run exits with for a command that ended with `wait_status`: its exit code, or
// 128 + N when it died of signal N.
int ExitStatusOf(int wait_status);

}  // namespace gprof::cli
