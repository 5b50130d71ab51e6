// Job control through gprof-run, for real: an interactive bash on a pseudo-terminal runs
// tests/apps/job_app plain and under gprof-run, the test types Ctrl-Z, Ctrl-C, fg into it, and
// the program, the shell and /proc must tell the same story both ways. And a script's
// `gprof-run ... & kill -INT $!` reaches the program as `prog & kill -INT $!` does; a signal
// sent to the job's whole process group, or by `timeout`, reaches it once, as without gprof-run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace gprof::test {
namespace {

namespace fs = std::filesystem;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// Field 3 (state) and field 6 (session) of /proc/PID/stat; state 0 when the process is gone.
char StateOf(pid_t pid, pid_t* session = nullptr) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t end = stat.rfind(')');
  if (end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(end + 2));
  char state = 0;
  pid_t parent = 0, group = 0, sid = 0;
  fields >> state >> parent >> group >> sid;
  if (session != nullptr) *session = sid;
  return state;
}

// The state of `pid` once it is neither running nor a zombie (within a few seconds): 'S' waiting,
// 'T' stopped, 0 gone (reaped).
char SettledState(pid_t pid) {
  char state = StateOf(pid);
  for (double end = Now() + 5; (state == 'R' || state == 'Z') && Now() < end; state = StateOf(pid))
    usleep(10'000);
  return state;
}

// `bash -i` on a new pseudo-terminal, in a session of its own (the terminal is its controlling
// terminal, so it runs with job control as it does for a user). Typed text goes to the terminal;
// what the terminal shows is read back.
class PtyShell {
 public:
  PtyShell() {
    master_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) {
      ADD_FAILURE() << "posix_openpt: " << strerror(errno);
      return;
    }
    std::string slave = ptsname(master_);
    std::vector<std::string> environment = {"PATH=" + std::string(getenv("PATH")), "TERM=dumb",
                                            "HISTFILE=/dev/null", "PS1=$ ", "LC_ALL=C"};
    for (const char* keep : {"GPROF_BUILD_DIR", "GPROF_REQUIRE_BPF"}) {
      if (const char* value = getenv(keep)) environment.push_back(std::string(keep) + "=" + value);
    }
    std::vector<char*> envp;
    for (auto& variable : environment) envp.push_back(variable.data());
    envp.push_back(nullptr);
    shell_ = fork();
    if (shell_ == 0) {
      setsid();
      int tty = open(slave.c_str(), O_RDWR);
      if (tty < 0 || ioctl(tty, TIOCSCTTY, 0) != 0) _exit(120);
      termios modes{};
      tcgetattr(tty, &modes);
      modes.c_lflag &= ~ECHO;  // only what the programs and the shell write comes back
      tcsetattr(tty, TCSANOW, &modes);
      dup2(tty, 0);
      dup2(tty, 1);
      dup2(tty, 2);
      if (tty > 2) close(tty);
      const char* argv[] = {"bash", "--norc", "--noprofile", "--noediting", "-i", nullptr};
      execve("/bin/bash", const_cast<char**>(argv), envp.data());
      _exit(121);
    }
  }

  ~PtyShell() {
    // Everything of the shell's session goes: the shell, its jobs, whatever they left.
    for (int round = 0; round < 2; ++round) {
      for (const auto& entry : fs::directory_iterator("/proc")) {
        pid_t pid = atoi(entry.path().filename().c_str());
        pid_t session = 0;
        if (pid > 0 && StateOf(pid, &session) != 0 && session == shell_) kill(pid, SIGKILL);
      }
    }
    if (shell_ > 0) {
      kill(shell_, SIGKILL);
      waitpid(shell_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  pid_t pid() const { return shell_; }

  void Type(const std::string& text) {
    ASSERT_EQ(write(master_, text.data(), text.size()), ssize_t(text.size()));
  }

  // Waits until what the terminal showed since the last match holds `pattern`; returns its
  // groups (the whole match first). Fails the test with the terminal's text after `seconds`.
  std::vector<std::string> WaitFor(const std::string& pattern, double seconds = 20) {
    std::regex expression(pattern);
    if (lost_) return std::vector<std::string>(8);  // one failure is enough: no more waiting
    for (double end = Now() + seconds;;) {
      std::smatch match;
      if (std::regex_search(unread_, match, expression)) {
        std::vector<std::string> groups(match.begin(), match.end());
        unread_ = match.suffix().str();
        return groups;
      }
      if (Now() > end) {
        ADD_FAILURE() << "the terminal never showed /" << pattern << "/; it showed:\n" << shown_;
        lost_ = true;
        return std::vector<std::string>(8);
      }
      Read(0.05);
    }
  }

  // Reads what comes within `seconds`.
  void Read(double seconds) {
    double end = Now() + seconds;
    do {
      pollfd ready{master_, POLLIN, 0};
      if (poll(&ready, 1, 10) <= 0) continue;
      char buffer[4096];
      ssize_t n = read(master_, buffer, sizeof(buffer));
      if (n <= 0) return;
      unread_.append(buffer, size_t(n));
      shown_.append(buffer, size_t(n));
    } while (Now() < end);
  }

  // Everything since the last match.
  const std::string& unread() const { return unread_; }

 private:
  int master_ = -1;
  pid_t shell_ = -1;
  std::string unread_, shown_;
  bool lost_ = false;
};

// Why the tests that need a pseudo-terminal cannot run here; empty when they can.
std::string NoPty() {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return std::string("no pseudo-terminal (posix_openpt: ") + strerror(errno) + ")";
  close(master);
  return access("/bin/bash", X_OK) == 0 ? "" : "no /bin/bash";
}

#define NEED_PTY()                         \
  do {                                     \
    std::string why = NoPty();             \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

// How gprof-run is put in front of job_app: not at all, with the kernel recorder, without it.
enum class Under { kNothing, kGprofRun, kGprofRunNoKernel };

std::string CommandLine(Under under, const std::string& session, const std::string& args,
                        const std::string& options = "") {
  std::string app = AppPath("job_app") + " " + args;
  if (under == Under::kNothing) return app;
  return GprofRunPath() + " -q -o " + session +
         (under == Under::kGprofRunNoKernel ? " --no-kernel" : "") + options + " -- " + app;
}

// A file name for a session of `under`.
std::string Tag(Under under) {
  return under == Under::kNothing ? "plain" : under == Under::kGprofRun ? "kernel" : "no-kernel";
}

const char* Name(Under under) {
  return under == Under::kNothing    ? "plain"
         : under == Under::kGprofRun ? "gprof-run"
                                     : "gprof-run --no-kernel";
}

// What a scenario saw, to compare plain and under gprof-run.
struct Seen {
  std::vector<std::string> counts;  // job_app's "int=... tstp=... cont=... foreground=..." lines
  std::vector<std::string> jobs;    // what the shell said of its job ("Stopped", ...)
  std::vector<char> states;         // /proc states of the program at the checkpoints
  std::string status;               // $? after the job ended
  std::string ready_foreground;     // what the program said of itself at its start
};

std::string Counts(PtyShell& shell) {
  shell.Type("counts\n");
  return shell.WaitFor(R"(job_app (int=\d+ tstp=\d+ cont=\d+ foreground=\d))")[1];
}

// The shell's line about its job: "[1]+  Stopped   CMD" gives "Stopped".
std::string JobLine(PtyShell& shell, const std::string& what) {
  return shell.WaitFor(R"(\[1\][+-]? +()" + what + R"())")[1];
}

std::string Status(PtyShell& shell) {
  shell.Type("echo status=$?\n");
  return shell.WaitFor(R"(status=(\d+))")[1];
}

// Ctrl-Z stops the program, the shell says the job stopped, fg continues it with one SIGCONT in
// the foreground, Ctrl-C and its own kill(0, SIGINT) reach it once, its exit status is the
// shell's.
Seen SuspendAndResume(Under under, const std::string& session) {
  PtyShell shell;
  Seen seen;
  shell.Type(CommandLine(under, session, "catch-tstp") + "\n");
  auto ready = shell.WaitFor(R"(job_app ready pid=(\d+) pgrp=(\d+) foreground=(\d))");
  pid_t pid = atoi(ready[1].c_str());
  pid_t job = atoi(ready[2].c_str());
  seen.ready_foreground = ready[3];
  seen.counts.push_back(Counts(shell));

  shell.Type("\x1a");  // Ctrl-Z
  seen.jobs.push_back(JobLine(shell, "Stopped"));
  seen.states.push_back(SettledState(pid));
  // The job's process group leader (gprof-run, or the program itself) is what the shell waits
  // for: it is stopped too.
  EXPECT_EQ(SettledState(job), 'T') << Name(under);

  shell.Type("fg\n");
  seen.counts.push_back(Counts(shell));  // the program reads the terminal: in the foreground
  seen.states.push_back(SettledState(pid));

  shell.Type("\x03");  // Ctrl-C
  shell.Read(0.2);
  seen.counts.push_back(Counts(shell));
  // A signal to its own process group (which holds gprof-run) is not sent to it a second time.
  shell.Type("kill-group\n");
  shell.Read(0.3);
  seen.counts.push_back(Counts(shell));
  shell.Type("exit 3\n");
  seen.status = Status(shell);
  seen.states.push_back(SettledState(pid));
  return seen;
}

// Ctrl-Z to a program that ignores SIGTSTP stops nothing: it stays in the foreground, the shell
// says nothing, it never gets a SIGCONT.
Seen CtrlZIgnored(Under under, const std::string& session) {
  PtyShell shell;
  Seen seen;
  shell.Type(CommandLine(under, session, "ignore-tstp") + "\n");
  auto ready = shell.WaitFor(R"(job_app ready pid=(\d+) pgrp=(\d+) foreground=(\d))");
  pid_t pid = atoi(ready[1].c_str());
  pid_t job = atoi(ready[2].c_str());
  seen.ready_foreground = ready[3];
  shell.Type("\x1a");
  shell.Read(1.0);
  if (shell.unread().find("Stopped") != std::string::npos) seen.jobs.push_back("Stopped");
  seen.states.push_back(SettledState(pid));
  seen.states.push_back(SettledState(job));  // gprof-run runs on too
  seen.counts.push_back(Counts(shell));
  shell.Type("exit 4\n");
  seen.status = Status(shell);
  return seen;
}

// A background job that reads the terminal is stopped by SIGTTIN, the shell says so, fg brings
// it to the foreground where the read succeeds.
Seen BackgroundRead(Under under, const std::string& session) {
  PtyShell shell;
  Seen seen;
  shell.Type(CommandLine(under, session, "") + " &\n");
  auto ready = shell.WaitFor(R"(job_app ready pid=(\d+) pgrp=(\d+) foreground=(\d))");
  pid_t pid = atoi(ready[1].c_str());
  seen.ready_foreground = ready[3];
  char state = SettledState(pid);
  for (double end = Now() + 5; state == 'S' && Now() < end; state = SettledState(pid))
    usleep(10'000);
  seen.states.push_back(state);  // stopped once its read comes
  shell.Type("jobs -l\n");       // says by what signal the job stopped
  seen.jobs.push_back(shell.WaitFor(R"(\[1\]\+ +\d+ +(Stopped \(tty input\)))")[1]);
  shell.Type("fg\n");
  seen.counts.push_back(Counts(shell));
  shell.Type("exit 5\n");
  seen.status = Status(shell);
  return seen;
}

// Ctrl-Z stops the job; then SIGCONT goes to one process only, the program's (`kill -CONT` on
// it, a debugger letting it go) or the job's leader's (`kill -CONT` on what the shell started):
// the program runs on with the one SIGCONT, to its end, and the job ends.
Seen ContinuedFromOutside(Under under, const std::string& session, bool program) {
  PtyShell shell;
  Seen seen;
  shell.Type(CommandLine(under, session, "catch-tstp wait 1000") + "\n");
  auto ready = shell.WaitFor(R"(job_app ready pid=(\d+) pgrp=(\d+) foreground=(\d))");
  pid_t pid = atoi(ready[1].c_str());
  pid_t job = atoi(ready[2].c_str());
  seen.ready_foreground = ready[3];
  shell.Type("\x1a");
  seen.jobs.push_back(JobLine(shell, "Stopped"));
  seen.states.push_back(SettledState(pid));
  kill(program ? pid : job, SIGCONT);
  seen.counts.push_back(shell.WaitFor(R"(job_app waited (.*foreground=\d))")[1]);
  seen.states.push_back(SettledState(pid));
  // The job ends: gprof-run detaches from the kernel and builds the report, which is slow on a
  // loaded machine.
  char state = StateOf(job);
  for (double end = Now() + 120; state != 0 && state != 'T' && Now() < end; state = StateOf(job))
    usleep(10'000);
  seen.states.push_back(state);
  shell.Type("jobs\n");
  seen.jobs.push_back(JobLine(shell, "Done"));
  return seen;
}

void ExpectSame(const Seen& plain, const Seen& profiled, Under under) {
  EXPECT_EQ(profiled.ready_foreground, plain.ready_foreground) << Name(under);
  EXPECT_EQ(profiled.counts, plain.counts) << Name(under);
  EXPECT_EQ(profiled.jobs, plain.jobs) << Name(under);
  EXPECT_EQ(profiled.states, plain.states) << Name(under);
  EXPECT_EQ(profiled.status, plain.status) << Name(under);
}

std::vector<Under> Profiled() {
  std::vector<Under> ways = {Under::kGprofRunNoKernel};
  // With the kernel recorder where it can run (its wait loop is another one); CI demands it.
  std::string why = BpfUnavailableReason();
  if (why.empty()) {
    ways.push_back(Under::kGprofRun);
  } else if (BpfRequired()) {
    ADD_FAILURE() << "GPROF_REQUIRE_BPF=1: " << why;
  }
  return ways;
}

TEST(JobControl, CtrlZStopsTheProgramAndFgContinuesItOnce) {
  NEED_PTY();
  TempDir dir;
  Seen plain = SuspendAndResume(Under::kNothing, "");
  // What the program itself shows without gprof-run: the test checks that, not only sameness.
  EXPECT_EQ(plain.ready_foreground, "1");
  EXPECT_EQ(plain.counts,
            (std::vector<std::string>{
                "int=0 tstp=0 cont=0 foreground=1", "int=0 tstp=1 cont=1 foreground=1",
                "int=1 tstp=1 cont=1 foreground=1", "int=2 tstp=1 cont=1 foreground=1"}));
  EXPECT_EQ(plain.jobs, std::vector<std::string>{"Stopped"});
  EXPECT_EQ(plain.states, (std::vector<char>{'T', 'S', 0}));
  EXPECT_EQ(plain.status, "3");
  for (Under under : Profiled()) {
    ExpectSame(plain, SuspendAndResume(under, dir.Sub(Tag(under))), under);
    EXPECT_TRUE(fs::exists(dir.Sub(Tag(under) + "/session.json")));
  }
}

TEST(JobControl, CtrlZThatTheProgramIgnoresStopsNothing) {
  NEED_PTY();
  TempDir dir;
  Seen plain = CtrlZIgnored(Under::kNothing, "");
  EXPECT_EQ(plain.jobs, std::vector<std::string>{});
  EXPECT_EQ(plain.counts, std::vector<std::string>{"int=0 tstp=0 cont=0 foreground=1"});
  EXPECT_EQ(plain.status, "4");
  for (Under under : Profiled()) ExpectSame(plain, CtrlZIgnored(under, dir.Sub(Tag(under))), under);
}

TEST(JobControl, ABackgroundReadStopsTheJobUntilFg) {
  NEED_PTY();
  TempDir dir;
  Seen plain = BackgroundRead(Under::kNothing, "");
  EXPECT_EQ(plain.ready_foreground, "0");
  EXPECT_EQ(plain.states, std::vector<char>{'T'});
  EXPECT_EQ(plain.jobs, std::vector<std::string>{"Stopped (tty input)"});
  EXPECT_EQ(plain.counts, std::vector<std::string>{"int=0 tstp=0 cont=1 foreground=1"});
  EXPECT_EQ(plain.status, "5");
  for (Under under : Profiled()) {
    ExpectSame(plain, BackgroundRead(under, dir.Sub(Tag(under))), under);
  }
}

TEST(JobControl, ContinuingTheProgramOrGprofRunAloneContinuesBoth) {
  NEED_PTY();
  TempDir dir;
  for (bool program : {true, false}) {
    Seen plain = ContinuedFromOutside(Under::kNothing, "", program);
    EXPECT_EQ(plain.jobs, (std::vector<std::string>{"Stopped", "Done"}));
    EXPECT_EQ(plain.counts, std::vector<std::string>{"int=0 tstp=1 cont=1 foreground=0"});
    EXPECT_EQ(plain.states, (std::vector<char>{'T', 0, 0}));
    for (Under under : Profiled()) {
      ExpectSame(
          plain,
          ContinuedFromOutside(under, dir.Sub(Tag(under) + (program ? "-p" : "-j")), program),
          under);
    }
  }
}

// Without job control (a script), `&` starts a command with SIGINT and SIGQUIT ignored; a program
// that catches SIGINT itself still gets `kill -INT $!`, one that keeps it ignored does not.
std::string ScriptResult(Under under, const std::string& session, const std::string& args,
                         const std::string& out, const std::string& kill = "kill -INT $pid") {
  std::string script = CommandLine(under, session, args) + " > " + out +
                       " 2>&1 &\n"
                       "pid=$!\n"
                       // Once the program has started, gprof-run has its handlers in place.
                       "for i in $(seq 1200); do grep -q ready " +
                       out + " && break; sleep 0.05; done\n" + kill +
                       "\n"
                       "wait $pid\n"
                       "echo status=$?\n"
                       "cat " +
                       out + "\n";
  ProcessResult run = RunProcess(Command({"/bin/bash", "-c", script}));
  EXPECT_FALSE(run.timed_out) << run.out << run.err;
  std::string result;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("job_app ready")) continue;  // pids differ
    result += line + "\n";
  }
  return result;
}

TEST(JobControl, AScriptsKillReachesAProgramStartedWithAmpersand) {
  TempDir dir;
  for (const char* args : {"int-exits 42 wait 30000", "keep-int wait 1500"}) {
    std::string plain = ScriptResult(Under::kNothing, "", args, dir.Sub("plain.txt"));
    std::string expected =
        std::string(args).starts_with("int")
            ? "status=42\njob_app inherited int=ignored quit=ignored tstp=default\n"
            : "status=0\njob_app inherited int=ignored quit=ignored tstp=default\njob_app waited "
              "int=0 tstp=0 cont=0 foreground=0\n";
    EXPECT_EQ(plain, expected) << args;
    for (Under under : Profiled()) {
      std::string session = dir.Sub(Tag(under) + "-" + args);
      std::replace(session.begin(), session.end(), ' ', '_');
      EXPECT_EQ(ScriptResult(under, session, args, dir.Sub("profiled.txt")), plain)
          << Name(under) << ": " << args;
    }
  }
}

// The ways a signal reaches the program that matter here: with the kernel recorder, which shows
// gprof-run what the program got from the sender already. Without it (--no-kernel, no privileges)
// a signal sent to the whole process group reaches the program twice, README says.
std::vector<Under> Witnessed() {
  std::string why = BpfUnavailableReason();
  if (why.empty()) return {Under::kGprofRun};
  if (BpfRequired()) ADD_FAILURE() << "GPROF_REQUIRE_BPF=1: " << why;
  return {};
}

// Holds gprof-run still until the program has taken its signal, as a loaded machine can leave it
// unscheduled meanwhile: then what the kernel recorded decides, not which of the two ran first.
// ptrace's interrupt stops it for the test alone (a shell, or timeout, would see a SIGSTOP, or
// undo it with SIGCONT); the signals that come meanwhile wait for it.
class Held {
 public:
  explicit Held(pid_t pid) {
    if (ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) {
      ADD_FAILURE() << "PTRACE_SEIZE " << pid << ": " << strerror(errno);
      return;
    }
    pid_ = pid;
    int status = 0;
    if (ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0 ||
        waitpid(pid, &status, __WALL) != pid) {
      ADD_FAILURE() << "PTRACE_INTERRUPT " << pid << ": " << strerror(errno);
    }
  }
  ~Held() { Release(); }
  void Release() {
    if (pid_ > 0) ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

pid_t ParentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t end = stat.rfind(')');
  if (end == std::string::npos) return -1;
  std::istringstream fields(stat.substr(end + 2));
  char state = 0;
  pid_t parent = -1;
  fields >> state >> parent;
  return parent;
}

// The first group of `pattern` once the file `path` holds it (within a minute), or "".
std::string WaitInFile(const std::string& path, const std::string& pattern) {
  std::regex expression(pattern);
  for (double end = Now() + 60; Now() < end; usleep(10'000)) {
    std::string text = ReadFile(path);
    std::smatch match;
    if (std::regex_search(text, match, expression)) return match.size() > 1 ? match[1].str() : "";
  }
  ADD_FAILURE() << path << " never held /" << pattern << "/: " << ReadFile(path);
  return "";
}

// `script` run by bash in the background, its output in `out`.
pid_t InBackground(const std::string& script, const std::string& out) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(120);
    execl("/bin/bash", "bash", "-c", script.c_str(), nullptr);
    _exit(121);
  }
  return pid;
}

void Finish(pid_t pid) {
  for (double end = Now() + 60; Now() < end; usleep(10'000)) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
  }
  ADD_FAILURE() << "pid " << pid << " did not end";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// `timeout` sends its signal to its child (gprof-run, or the program), then to its own process
// group (which holds both): a program that saves a checkpoint at its first SIGTERM and aborts at
// a second gets one.
std::string TimeoutResult(Under under, const std::string& session, const std::string& out,
                          bool late, const std::string& options = "") {
  pid_t script = InBackground("timeout -s TERM 2 " +
                                  CommandLine(under, session, "count-exits 15 500", options) +
                                  "\necho status=$?\n",
                              out);
  if (late && under != Under::kNothing) {
    Held gprof_run(ParentOf(atoi(WaitInFile(out, R"(job_app ready pid=(\d+))").c_str())));
    WaitInFile(out, "job_app counting");
    gprof_run.Release();
  }
  Finish(script);
  std::string result;
  std::istringstream lines(ReadFile(out));
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("job_app got") || line.starts_with("status=")) result += line + "\n";
  }
  return result;
}

TEST(JobControl, TimeoutsSignalReachesTheProgramOnce) {
  TempDir dir;
  std::string plain = TimeoutResult(Under::kNothing, "", dir.Sub("plain.txt"), false);
  EXPECT_EQ(plain, "job_app got 1\nstatus=124\n");
  for (Under under : Witnessed()) {
    for (bool late : {false, true}) {
      std::string tag = Tag(under) + (late ? "-late" : "");
      EXPECT_EQ(TimeoutResult(under, dir.Sub(tag), dir.Sub(tag + ".txt"), late), plain)
          << Name(under) << (late ? ", running late" : "");
    }
    // The recording over (--duration), the kernel still shows gprof-run the signals.
    EXPECT_EQ(TimeoutResult(under, dir.Sub("duration"), dir.Sub("duration.txt"), /*late=*/true,
                            " --duration 0.2"),
              plain)
        << Name(under) << " --duration 0.2, running late";
  }
}

// An interactive shell's `kill %1`, or `kill -- -PGID`, signals the job's process group, which
// holds gprof-run and the program.
std::string GroupKill(Under under, const std::string& session, const std::string& how,
                      bool late) {
  PtyShell shell;
  shell.Type(CommandLine(under, session, "count-exits 15 500") + " &\n");
  pid_t app = atoi(shell.WaitFor(R"(job_app ready pid=(\d+))")[1].c_str());
  {
    std::optional<Held> gprof_run;
    if (late && under != Under::kNothing) gprof_run.emplace(ParentOf(app));
    shell.Type(how + "\n");
    shell.WaitFor("job_app counting");
  }
  shell.Type("wait $!; echo status=$?\n");
  std::string got = shell.WaitFor(R"(job_app (got \d+))")[1];
  return got + " status=" + shell.WaitFor(R"(status=(\d+))")[1];
}

TEST(JobControl, AKillOfTheJobsProcessGroupReachesTheProgramOnce) {
  NEED_PTY();
  TempDir dir;
  int sessions = 0;
  for (const char* how : {"kill -TERM %1", "kill -TERM -- -$!"}) {
    std::string plain = GroupKill(Under::kNothing, "", how, false);
    EXPECT_EQ(plain, "got 1 status=1") << how;
    for (Under under : Witnessed()) {
      for (bool late : {false, true}) {
        std::string session = dir.Sub(Tag(under) + std::to_string(sessions++));
        EXPECT_EQ(GroupKill(under, session, how, late), plain)
            << Name(under) << ": " << how << (late ? ", running late" : "");
      }
    }
  }
}

// A shell that is hung up (its terminal closed, its ssh session gone) sends SIGHUP to the process
// group of each of its jobs, and exits.
std::string HungUpShell(Under under, const std::string& session, const std::string& out,
                        bool late) {
  PtyShell shell;
  shell.Type(CommandLine(under, session, "count-exits 1 500") + " > " + out + " 2>&1 &\n");
  pid_t app = atoi(WaitInFile(out, R"(job_app ready pid=(\d+))").c_str());
  {
    std::optional<Held> gprof_run;
    if (late && under != Under::kNothing) gprof_run.emplace(ParentOf(app));
    kill(shell.pid(), SIGHUP);
    WaitInFile(out, "job_app counting");
  }
  return WaitInFile(out, R"(job_app (got \d+))");
}

TEST(JobControl, AHungUpShellsSighupReachesTheProgramOnce) {
  NEED_PTY();
  TempDir dir;
  std::string plain = HungUpShell(Under::kNothing, "", dir.Sub("plain.txt"), false);
  EXPECT_EQ(plain, "got 1");
  for (Under under : Witnessed()) {
    for (bool late : {false, true}) {
      std::string tag = Tag(under) + (late ? "-late" : "");
      EXPECT_EQ(HungUpShell(under, dir.Sub(tag), dir.Sub(tag + ".txt"), late), plain)
          << Name(under) << (late ? ", running late" : "");
    }
  }
}

// What only gprof-run got is the program's: `kill -TERM` on gprof-run's pid reaches it, once.
TEST(JobControl, AKillOfGprofRunsPidReachesTheProgramOnce) {
  TempDir dir;
  std::string plain = ScriptResult(Under::kNothing, "", "count-exits 15 300", dir.Sub("plain.txt"),
                                   "kill -TERM $pid");
  EXPECT_EQ(plain,
            "status=1\njob_app inherited int=ignored quit=ignored tstp=default\njob_app "
            "counting\njob_app got 1\n");
  for (Under under : Profiled()) {
    EXPECT_EQ(ScriptResult(under, dir.Sub(Tag(under)), "count-exits 15 300",
                           dir.Sub("profiled.txt"), "kill -TERM $pid"),
              plain)
        << Name(under);
  }
}

}  // namespace
}  // namespace gprof::test
