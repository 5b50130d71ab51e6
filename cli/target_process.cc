#include "cli/target_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/own_settings.h"
#include "inject/shared/clock.h"

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
volatile sig_atomic_t g_continued = 0;

// Forwards that wait for TargetProcess::SettleForwards (g_decide_later): for each forwarded
// signal, what the handler noted of each of its runs, oldest first. The handler only appends, the
// wait loop only takes from the front (gprof-run has one thread while the command runs). A run
// that finds the queue full is not noted, but counted: the run number lets SettleForwards pair
// the notes after it with the kernel's records all the same.
struct Note {
  std::atomic<uint64_t> noted_ns{0};  // CLOCK_MONOTONIC when the handler ran
  std::atomic<pid_t> sender{0};
  std::atomic<uint32_t> run{0};          // the handler's runs for this signal up to this one
  std::atomic<bool> for_command{false};  // sent by a process outside the command, not the terminal
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);  // set in a signal handler
constexpr uint32_t kNotes = 64;                             // a second's storm at most, decided
struct WaitingForwards {
  Note notes[kNotes];
  std::atomic<uint32_t> head{0};  // the next note the handler writes
  std::atomic<uint32_t> tail{0};  // the next one SettleForwards decides
  std::atomic<uint32_t> runs{0};  // the handler's runs, noted or not
};
WaitingForwards g_waiting[TargetProcess::kForwarded.size()];
volatile sig_atomic_t g_decide_later = 0;

// After the command ended (TargetProcess::StopOnInterrupt): the line said when an interrupting
// signal ends gprof-run; until it is set, the signal that came.
char g_interrupt_line[4096];
std::atomic<size_t> g_interrupt_line_size{0};
volatile sig_atomic_t g_interrupted = 0;

// How a forward waits for the kernel's record of a signal its sender also sent to the command:
// sent that long before or after the one to gprof-run, it was the same signal's (timeout sends to
// its child, then to its group, microseconds apart; a supervisor signals each process of a job in
// turn). The wait ends once the records of up to that long after the signal to gprof-run are
// drained, and at the latest kLongestWaitNs after the handler noted it, whatever was drained.
constexpr uint64_t kAlsoSentWithinNs = 50'000'000;
constexpr uint64_t kLongestWaitNs = 250'000'000;
// How far apart one kill() of a process group signals its processes (one after the other).
constexpr uint64_t kSameCallNs = 1'000'000;
// How late a record may reach the ring buffer after its time: the program reads the time, then
// submits the record.
constexpr uint64_t kRecordLagNs = 2'000'000;
// How long seen signals are kept: past any forward's wait; and at most how many.
constexpr uint64_t kKeepSeenNs = 2'000'000'000;
constexpr size_t kMaxSeen = 4096;

// The signals whose handler runs are numbered and paired with their records: kill() (SI_USER)
// and the kernel's (SI_KERNEL, > 0), which are always for the whole process when forwarded. The
// codes a process sets itself (< 0: tgkill's SI_TKILL, sigqueue's SI_QUEUE) may be for one thread.
bool Paired(int si_code) { return si_code >= 0; }

// A record of a signal the kernel made pending for the whole process, with a numbered run.
bool PendingForAPairedRun(const bpf::SignalRecord& record) {
  return record.made_pending && !record.to_thread && Paired(record.code);
}

// The kernel's clock, as the kernel recorder's signal records are on (async-signal-safe).
uint64_t MonotonicNow() { return MonotonicNs(); }

size_t SlotOf(int signal) {
  const auto& forwarded = TargetProcess::kForwarded;
  return static_cast<size_t>(std::find(forwarded.begin(), forwarded.end(), signal) -
                             forwarded.begin());
}

// The state letter and parent of `pid`, from /proc/PID/stat; false when it is gone. Only system
// calls: the signal handler calls it.
bool ReadStat(pid_t pid, char* state, pid_t* parent) {
  char path[32] = "/proc/";
  char digits[16];
  int n = 0;
  for (unsigned value = static_cast<unsigned>(pid); n == 0 || value != 0; value /= 10)
    digits[n++] = static_cast<char>('0' + value % 10);
  size_t at = strlen(path);
  while (n > 0) path[at++] = digits[--n];
  memcpy(path + at, "/stat", sizeof("/stat"));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[512];
  ssize_t size = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (size <= 0) return false;
  text[size] = '\0';
  // "PID (COMM) S PPID ...": the name may hold anything, ')' too; the last ')' ends it.
  char* end = strrchr(text, ')');
  if (end == nullptr || end[1] != ' ' || end[2] == '\0' || end[3] != ' ') return false;
  *state = end[2];
  pid_t ppid = 0;
  for (const char* c = end + 4; *c >= '0' && *c <= '9'; ++c) ppid = ppid * 10 + (*c - '0');
  *parent = ppid;
  return true;
}

// Stopped by a signal, or held by a debugger.
bool IsStopped(pid_t pid) {
  char state = 0;
  pid_t parent = 0;
  return ReadStat(pid, &state, &parent) && (state == 'T' || state == 't');
}

// Whether `sender` is `command` or one of its descendants (that are still there to ask).
bool InCommandTree(pid_t sender, pid_t command) {
  for (int depth = 0; depth < 64 && sender > 1; ++depth) {
    if (sender == command) return true;
    char state = 0;
    if (!ReadStat(sender, &state, &sender)) return false;
  }
  return false;
}

void ForwardSignal(int signal, siginfo_t* info, void*) {
  pid_t command = static_cast<pid_t>(g_forward_to);
  if (command <= 0) return;
  int saved_errno = errno;
  // First: what this run stands for was sent by this time (Decide looks no later), and the walk
  // of the sender's ancestry below reads /proc, long enough for timeout's second signal to come.
  uint64_t noted_ns = MonotonicNow();
  // Only what a process outside the command sent to gprof-run is the command's to get again. The
  // terminal (Ctrl-C, Ctrl-\, Ctrl-Z, hangup: si_code SI_KERNEL) signals the whole foreground
  // process group, which holds the command; what the command's own processes sent to their group
  // (kill(0, ...): a script's `kill 0`, an editor suspending itself) reached them already, and
  // what they sent to their parent was not meant for them.
  bool for_command = info->si_code <= 0 && !InCommandTree(info->si_pid, command);
  size_t slot = SlotOf(signal);
  if (g_decide_later && slot < TargetProcess::kForwarded.size()) {
    // Every run is noted, forwarded or not: the k-th run of the handler is for the k-th time the
    // kernel made the signal pending for the process (SettleForwards pairs them).
    WaitingForwards& queue = g_waiting[slot];
    // Only kill() and the kernel's own are numbered (Paired): one sent to gprof-run's thread
    // (tgkill, pthread_sigqueue) was pending in the thread's own set, taken before the
    // process's, and a sigqueue() may have been either.
    uint32_t run = 0;
    if (Paired(info->si_code)) {
      run = queue.runs.load() + 1;
      queue.runs.store(run);
    }
    uint32_t head = queue.head.load();
    if (head - queue.tail.load() < kNotes) {
      Note& note = queue.notes[head % kNotes];
      note.sender.store(info->si_pid);
      note.noted_ns.store(noted_ns);
      note.run.store(run);
      note.for_command.store(for_command);
      queue.head.store(head + 1);
    }
  } else if (for_command) {
    kill(command, signal);
  }
  errno = saved_errno;
}

// SIGINT, SIGTERM, SIGHUP and SIGQUIT once the command has ended: gprof-run ends by the signal
// (its default action, which the shell and a calling script read as "interrupted") after its
// line; before that line is set, the signal is kept for StopOnInterrupt.
void Interrupt(int signal) {
  size_t size = g_interrupt_line_size.load();
  if (size == 0) {
    if (g_interrupted == 0) g_interrupted = signal;
    return;
  }
  ssize_t written = write(STDERR_FILENO, g_interrupt_line, size);
  (void)written;  // nothing to do about a closed stderr
  struct sigaction fatal {};
  fatal.sa_handler = SIG_DFL;
  sigemptyset(&fatal.sa_mask);
  sigaction(signal, &fatal, nullptr);
  raise(signal);  // blocked in this handler: delivered, and fatal, as it returns
}

void NoteContinued(int) { g_continued = 1; }

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
  RestoreInheritedLimits();
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

Expected<TargetProcess> TargetProcess::Spawn(const LaunchSettings& settings) {
  int release_pipe[2], status_pipe[2];
  if (pipe2(release_pipe, O_CLOEXEC) != 0) {
    return Status::FromErrno(errno, std::string("pipe: ") + strerror(errno));
  }
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    Status failed = Status::FromErrno(errno, std::string("pipe: ") + strerror(errno));
    close(release_pipe[0]);
    close(release_pipe[1]);
    return failed;
  }
  // Built before fork: the child only reads, writes a pipe and execs.
  std::vector<char*> argv = CStrings(settings.argv);
  std::vector<char*> envp = CStrings(settings.environment);
  pid_t pid = fork();
  if (pid < 0) {
    Status failed = Status::FromErrno(errno, std::string("fork: ") + strerror(errno));
    for (int fd : {release_pipe[0], release_pipe[1], status_pipe[0], status_pipe[1]}) close(fd);
    return failed;
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
    pid_t r = waitpid(pid_, wait_status, (mirror_stops_ ? WUNTRACED : 0) | (block ? 0 : WNOHANG));
    if (r == pid_ && WIFSTOPPED(*wait_status)) {
      StopWithCommand(WSTOPSIG(*wait_status));
      if (!block) return false;
      continue;
    }
    if (r == pid_) {
      Ended();
      return true;
    }
    if (r == 0) return false;
    if (errno == EINTR) {
      if (!block) return false;
      continue;
    }
    Ended();
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

void TargetProcess::ForwardSignals(bool witnessed) {
  g_decide_later = witnessed ? 1 : 0;
  g_forward_to = pid_;
  decided_until_ns_.fill(MonotonicNow());  // what came before ran no handler of ours
  for (size_t i = 0; i < kForwarded.size(); ++i) paired_runs_[i] = g_waiting[i].runs.load();
  struct sigaction forward {};
  forward.sa_sigaction = ForwardSignal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  // Also where gprof-run started with them ignored (a script's `gprof-run ... &` ignores SIGINT
  // and SIGQUIT): the command was forked with the dispositions gprof-run inherited, keeps an
  // ignored one ignored through exec, and decides itself what a forwarded signal does.
  for (size_t i = 0; i < kForwarded.size(); ++i) {
    if (kForwarded[i] != SIGTSTP) sigaction(kForwarded[i], &forward, &forwarded_before_[i]);
  }
  // Job control is the command's: gprof-run neither stops on the terminal's Ctrl-Z nor on its own
  // writes from a background job (stty tostop), and stops when the command stops (Reap).
  for (size_t i = 0; i < kJobSignals.size(); ++i) {
    struct sigaction ours {};
    sigemptyset(&ours.sa_mask);
    if (kJobSignals[i] == SIGTSTP) {
      ours = forward;  // kill -TSTP on gprof-run's pid is meant for the command
    } else if (kJobSignals[i] == SIGCONT) {
      ours.sa_handler = NoteContinued;
      ours.sa_flags = SA_RESTART;
    } else {
      ours.sa_handler = SIG_IGN;  // SIGTTIN, SIGTTOU
    }
    sigaction(kJobSignals[i], &ours, &job_signals_before_[i]);
  }
  mirror_stops_ = true;
  struct sigaction child {};
  child.sa_handler = InterruptWaits;  // no SA_RESTART: the recorder's poll returns at once
  sigemptyset(&child.sa_mask);
  sigaction(SIGCHLD, &child, nullptr);
}

// The command was stopped by SIGTSTP (Ctrl-Z), SIGTTIN or SIGTTOU (it used the terminal from the
// background): gprof-run stops by the same signal, so that the shell, which waits for gprof-run,
// sees its job stopped and says so, and continues both (fg, bg: SIGCONT to the job's process
// group, which holds both). Ctrl-Z that the command ignores or catches stops nothing, as without
// gprof-run. SIGSTOP (kill -STOP of the command's pid, a debugger attaching) is not followed: it
// is not the shell's, and gprof-run goes on recording the rest of the tree.
void TargetProcess::StopWithCommand(int signal) {
  if (signal != SIGTSTP && signal != SIGTTIN && signal != SIGTTOU) return;
  StartWaker();
  char stopping = 'S';
  if (waker_fd_ >= 0) WriteFully(waker_fd_, &stopping, 1);
  g_continued = 0;
  struct sigaction stop {
  }, ours{};
  stop.sa_handler = SIG_DFL;
  sigemptyset(&stop.sa_mask);
  const uint64_t default_from_ns = MonotonicNow();
  sigaction(signal, &stop, &ours);
  sigset_t only, mask;
  sigemptyset(&only);
  sigaddset(&only, signal);
  pthread_sigmask(SIG_UNBLOCK, &only, &mask);
  raise(signal);  // returns once continued (its SIGCONT noted); at once where the kernel refused
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  sigaction(signal, &ours, nullptr);
  if (signal == SIGTSTP) {  // what came meanwhile stopped gprof-run, or merged into what did
    if (stopped_by_default_.size() >= 64) stopped_by_default_.erase(stopped_by_default_.begin());
    stopped_by_default_.emplace_back(default_from_ns, MonotonicNow());
  }
  char continued = 'C';
  if (waker_fd_ >= 0) WriteFully(waker_fd_, &continued, 1);
  // A SIGCONT to the job's process group reached the command too: it never gets a second one.
  // gprof-run alone was continued (kill -CONT on its pid) when the command is still stopped a
  // moment later: that SIGCONT was meant for the command.
  if (!g_continued) return;
  for (int wait_ms = 0; wait_ms < 20 && IsStopped(pid_); ++wait_ms) usleep(1000);
  if (IsStopped(pid_)) kill(pid_, SIGCONT);
}

// Stopped, gprof-run cannot see the command continued without it (kill -CONT on the command's
// pid, a debugger letting it go), and would hold the job stopped for good: a process of its own
// (forked at the first stop) watches the command while gprof-run is stopped and continues
// gprof-run when the command runs again.
void TargetProcess::StartWaker() {
  if (waker_pid_ > 0) return;
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return;
  pid_t profiler = getpid();
  pid_t waker = fork();
  if (waker < 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return;
  }
  if (waker == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != profiler) _exit(0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN,
                       SIGTTOU, SIGCHLD, SIGCONT}) {
      sigaction(signal, &ignore, nullptr);
    }
    // It holds nothing of gprof-run's (the recorder's files, the terminal) but its pipe.
    int fd = pipe_fds[0] == 3 ? 3 : dup2(pipe_fds[0], 3);
    if (fd != 3) _exit(0);
    close_range(0, 2, 0);
    close_range(4, ~0U, 0);
    bool stopping = false;
    for (;;) {
      pollfd ready{fd, POLLIN, 0};
      int n = poll(&ready, 1, stopping ? 20 : -1);
      if (n < 0 && errno != EINTR) _exit(0);
      if (n > 0) {
        char what;
        if (read(fd, &what, 1) != 1) _exit(0);  // gprof-run is done (or gone)
        stopping = what == 'S';
      }
      if (stopping && IsStopped(profiler) && !IsStopped(pid_)) kill(profiler, SIGCONT);
    }
  }
  close(pipe_fds[0]);
  fcntl(pipe_fds[1], F_SETFL, O_NONBLOCK);  // never blocks gprof-run
  waker_pid_ = waker;
  waker_fd_ = pipe_fds[1];
}

// The command is reaped: nothing more to forward or follow. The terminal's job signals act on
// gprof-run again as on any program, while it builds the report, and so do the signals that end
// a program (Interrupt), unless it started with them ignored.
void TargetProcess::Ended() {
  g_forward_to = 0;
  g_decide_later = 0;
  for (WaitingForwards& queue : g_waiting) queue.tail.store(queue.head.load());
  seen_.clear();
  if (mirror_stops_) {
    for (size_t i = 0; i < kJobSignals.size(); ++i)
      sigaction(kJobSignals[i], &job_signals_before_[i], nullptr);
    struct sigaction interrupt {};
    interrupt.sa_handler = Interrupt;
    interrupt.sa_flags = SA_RESTART;
    sigemptyset(&interrupt.sa_mask);
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      const struct sigaction& before = forwarded_before_[SlotOf(signal)];
      bool ignored = !(before.sa_flags & SA_SIGINFO) && before.sa_handler == SIG_IGN;
      sigaction(signal, ignored ? &before : &interrupt, nullptr);
    }
    mirror_stops_ = false;
  }
  if (waker_pid_ > 0) {
    close(waker_fd_);
    int status;
    while (waitpid(waker_pid_, &status, 0) < 0 && errno == EINTR) {
    }
    waker_pid_ = waker_fd_ = -1;
  }
}

int TargetProcess::SettleForwards(const std::vector<bpf::SignalRecord>& seen,
                                  uint64_t drained_ns) {
  uint64_t now = MonotonicNow();
  pid_t self = getpid();
  for (const bpf::SignalRecord& record : seen) {
    // SIGCONT to gprof-run too: it flushes a pending SIGTSTP, which then runs no handler.
    if ((record.target_pid == self || record.target_pid == pid_) &&
        (SlotOf(record.signal) < kForwarded.size() || record.signal == SIGCONT)) {
      seen_.push_back(Seen{record});
    }
  }
  // Kept past any run still waiting, and past any signal made pending for gprof-run that no run
  // has taken yet (gprof-run stopped with the command: its handler runs at `fg`, however long
  // after), within a bound.
  uint64_t keep_from = now;
  for (size_t slot = 0; slot < kForwarded.size(); ++slot) {
    const WaitingForwards& queue = g_waiting[slot];
    if (queue.tail.load() != queue.head.load())
      keep_from = std::min(keep_from, queue.notes[queue.tail.load() % kNotes].noted_ns.load());
  }
  for (const Seen& old : seen_) {
    const bpf::SignalRecord& record = old.record;
    size_t slot = SlotOf(record.signal);
    if (record.target_pid == self && PendingForAPairedRun(record) && slot < kForwarded.size() &&
        record.time_ns > decided_until_ns_[slot]) {
      keep_from = std::min(keep_from, record.time_ns);
    }
  }
  std::erase_if(seen_,
                [&](const Seen& old) { return old.record.time_ns + kKeepSeenNs < keep_from; });
  if (seen_.size() > kMaxSeen) seen_.erase(seen_.begin(), seen_.end() - kMaxSeen);
  uint64_t next_due = UINT64_MAX;
  std::vector<std::pair<uint64_t, int>> forwards;  // when noted, which signal
  for (size_t slot = 0; slot < kForwarded.size(); ++slot) {
    WaitingForwards& queue = g_waiting[slot];
    uint32_t tail = queue.tail.load();
    for (; tail != queue.head.load(); ++tail) {
      const Note& note = queue.notes[tail % kNotes];
      HandlerRun run{note.sender.load(), note.noted_ns.load(), note.run.load(),
                     note.for_command.load()};
      uint64_t due = 0;
      Decision decision = Decide(slot, run, drained_ns, now, &due);
      if (decision == Decision::kWait) {  // and those noted after it, in their turn
        next_due = std::min(next_due, due);
        break;
      }
      if (decision == Decision::kForward) forwards.emplace_back(run.noted_ns, kForwarded[slot]);
    }
    queue.tail.store(tail);
  }
  // In the order they came to gprof-run.
  std::sort(forwards.begin(), forwards.end());
  for (const auto& [noted, signal] : forwards) {
    if (g_forward_to > 0) kill(pid_, signal);
  }
  if (next_due == UINT64_MAX) return -1;
  if (next_due <= now) return 0;  // due, but its records are not drained yet
  return static_cast<int>((next_due - now + 999'999) / 1'000'000);
}

// Whether the signal of `slot` that `run` of the handler stands for reached the command already,
// by the signals the kernel recorder saw, all of those generated before `drained_ns`.
//
// The kernel keeps one of each signal pending: one that comes while the same is still pending is
// merged into it, and the handler runs once for both; one that comes after the kernel took the
// last from the pending set is pending anew and runs the handler again, even when it comes before
// that last run has read its clock (timeout's second signal, microseconds after its first). So
// the k-th run of the handler is for the k-th signal the kernel made pending for gprof-run, and
// for the signals merged into it. Where that record is missing (the ring buffer lost it), the run
// stands for what its sender sent since the last decided run, by the clock.
TargetProcess::Decision TargetProcess::Decide(size_t slot, const HandlerRun& run,
                                              uint64_t drained_ns, uint64_t now_ns,
                                              uint64_t* due_ns) {
  const int signal = kForwarded[slot];
  const pid_t self = getpid();
  // First, every record up to the run's clock.
  if (drained_ns < run.noted_ns + kRecordLagNs && now_ns < run.noted_ns + kLongestWaitNs) {
    *due_ns = run.noted_ns + kRecordLagNs;
    return Decision::kWait;
  }
  // Not numbered: what its sender sent since the last decided run, by the clock; the pairing
  // of the numbered runs is left as it is.
  if (run.run == 0) {
    return DecideFor(slot, run, nullptr, decided_until_ns_[slot], run.noted_ns, drained_ns, now_ns,
                     due_ns);
  }
  // A record of this signal made pending for gprof-run that ran the handler (or will): not one
  // for its thread alone, not a SIGTSTP while gprof-run stopped itself by its default action
  // (StopWithCommand), not a SIGTSTP that a SIGCONT flushed from the pending set before this run.
  auto pending_for_process = [&](const bpf::SignalRecord& record) {
    return record.target_pid == self && record.signal == signal && PendingForAPairedRun(record);
  };
  auto ran_handler = [&](const bpf::SignalRecord& record) {
    if (!pending_for_process(record)) return false;
    if (signal != SIGTSTP) return true;
    for (const auto& [from, until] : stopped_by_default_)
      if (record.time_ns >= from && record.time_ns <= until) return false;
    // A SIGCONT while it was pending: before the next SIGTSTP made pending (none could be while
    // this one was), and before this run read its clock.
    uint64_t pending_until_ns = run.noted_ns;
    for (const Seen& other : seen_) {
      if (pending_for_process(other.record) && other.record.time_ns > record.time_ns)
        pending_until_ns = std::min(pending_until_ns, other.record.time_ns);
    }
    for (const Seen& other : seen_) {
      if (other.record.signal == SIGCONT && other.record.target_pid == self &&
          other.record.time_ns > record.time_ns && other.record.time_ns <= pending_until_ns) {
        return false;
      }
    }
    return true;
  };
  // This run's record: past those of earlier runs (skipping those of runs the queue had no room
  // to note), and the next one made pending after it, which ends what merged into it.
  const bpf::SignalRecord* own = nullptr;
  uint64_t own_until_ns = run.noted_ns;
  uint32_t skip = run.run > paired_runs_[slot] ? run.run - paired_runs_[slot] - 1 : 0;
  for (const Seen& seen : seen_) {
    const bpf::SignalRecord& record = seen.record;
    if (record.time_ns <= decided_until_ns_[slot] || record.time_ns > run.noted_ns ||
        !ran_handler(record)) {
      continue;
    }
    if (own != nullptr) {
      own_until_ns = seen.record.time_ns - 1;
      break;
    }
    if (skip > 0) {
      --skip;
      continue;
    }
    own = &seen.record;
  }
  if (own != nullptr && own->sender_pid != run.sender) own = nullptr;  // records were lost
  uint64_t after_ns = decided_until_ns_[slot];
  uint64_t until_ns = own != nullptr ? own_until_ns : run.noted_ns;
  Decision decision = DecideFor(slot, run, own, after_ns, until_ns, drained_ns, now_ns, due_ns);
  if (decision != Decision::kWait) {  // the next run's records come after these
    decided_until_ns_[slot] = until_ns;
    paired_runs_[slot] = run.run;
  }
  return decision;
}

// Decide's second half: `own` is the run's record (nullptr: not found), (after_ns, until_ns] what
// the records the run stands for may be in.
TargetProcess::Decision TargetProcess::DecideFor(size_t slot, const HandlerRun& run,
                                                 const bpf::SignalRecord* own, uint64_t after_ns,
                                                 uint64_t until_ns, uint64_t drained_ns,
                                                 uint64_t now_ns, uint64_t* due_ns) {
  if (!run.for_command) return Decision::kLeave;
  const int signal = kForwarded[slot];
  const pid_t self = getpid();

  // The sender's signals to gprof-run that the run stands for, and when the first sent to
  // gprof-run alone was made.
  bool from_sender = false, only_to_many = true;
  uint64_t sent_ns = run.noted_ns, first_ns = UINT64_MAX, last_ns = 0;
  for (const Seen& seen : seen_) {
    const bpf::SignalRecord& record = seen.record;
    if (record.target_pid != self || record.signal != signal || record.time_ns <= after_ns ||
        record.time_ns > until_ns || record.sender_pid != run.sender) {
      continue;
    }
    if (own != nullptr && record.time_ns < own->time_ns) continue;
    if (own != nullptr && &record != own && !record.merged) continue;
    from_sender = true;
    first_ns = std::min(first_ns, record.time_ns);
    last_ns = std::max(last_ns, record.time_ns);
    if (!record.to_many) {
      only_to_many = false;
      sent_ns = std::min(sent_ns, record.time_ns);
    }
  }
  // A kill() of the whole process group (kill %1, killpg, a shell's SIGHUP at its exit) reached
  // the command with the same call, as it would without gprof-run; and without gprof-run a command
  // that left the group would not get it at all. That call's signal to the command is this run's:
  // never the "also to the command" of a later one (below).
  if (from_sender && only_to_many) {
    for (Seen& seen : seen_) {
      const bpf::SignalRecord& record = seen.record;
      if (record.target_pid == pid_ && record.signal == signal && record.sender_pid == run.sender &&
          record.to_many && record.time_ns + kSameCallNs >= first_ns &&
          record.time_ns <= last_ns + kSameCallNs) {
        seen.used = true;
      }
    }
    return Decision::kLeave;
  }
  // The sender sent it to the command itself too (timeout: to its child, then to its group).
  for (Seen& seen : seen_) {
    const bpf::SignalRecord& record = seen.record;
    if (seen.used || record.target_pid != pid_ || record.signal != signal ||
        record.sender_pid != run.sender || record.time_ns + kAlsoSentWithinNs < sent_ns ||
        record.time_ns > sent_ns + kAlsoSentWithinNs) {
      continue;
    }
    seen.used = true;
    return Decision::kLeave;
  }
  // Due once the records up to then are drained (gprof-run may drain late, on a busy machine); at
  // the latest kLongestWaitNs after it came, whatever was drained.
  *due_ns = std::min(sent_ns + kAlsoSentWithinNs + kRecordLagNs, run.noted_ns + kLongestWaitNs);
  bool due = drained_ns >= *due_ns || now_ns >= run.noted_ns + kLongestWaitNs;
  return due ? Decision::kForward : Decision::kWait;
}

void TargetProcess::StopOnInterrupt(const std::string& line) {
  size_t size = std::min(line.size(), sizeof(g_interrupt_line));
  memcpy(g_interrupt_line, line.data(), size);
  g_interrupt_line_size.store(size);
  if (int signal = g_interrupted; signal != 0) Interrupt(signal);  // came while it was not set
}

int ExitStatusOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return kExitSignalBase + WTERMSIG(wait_status);
  return kExitToolFailure;
}

}  // namespace gprof::cli
