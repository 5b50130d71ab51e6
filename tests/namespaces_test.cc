// Containers (issue 34, case 1): the command starts its work in the namespaces a container
// launcher makes (`unshare`, bwrap, apptainer): PID, IPC, mount, user and time namespaces. Each
// time, with real BPF: every CUDA call the program made is recorded (counted against what the
// program itself printed), on the threads the kernel recorded for it (the host's ids, with their
// off-CPU intervals), and the program's stdout and stderr are byte for byte those of a run without
// gprof-run. The program is tests/apps/namespace_app.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/session/session_reader.h"
#include "inject/shared/session_control.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using collector::Session;

const char kUnshare[] = "/usr/bin/unshare";

Session ReadOrFail(const std::string& dir) {
  auto session = collector::ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return Session();
  for (const auto& diagnostic : session->diagnostics) {
    ADD_FAILURE() << diagnostic.file << " at " << diagnostic.offset << ": " << diagnostic.message;
  }
  return std::move(session.value());
}

// "child calls=N", "first calls=N", "main calls=N": the calls each process said it made.
std::multiset<size_t> PrintedCalls(const std::string& out) {
  std::multiset<size_t> calls;
  std::istringstream lines(out);
  std::string line;
  std::regex pattern(R"((child|first|main) calls=(\d+))");
  for (std::smatch match; std::getline(lines, line);) {
    if (std::regex_match(line, match, pattern)) calls.insert(std::stoul(match[2]));
  }
  return calls;
}

// Every recorded call on the kernel's ids: each process's count is one the program printed, each
// call's thread is a thread of its process that the kernel recorded under its host tid and named
// as the program did, and each such thread's sleep after its last call is an off-CPU interval the
// kernel recorded on that same thread. Returns the recorded processes' pids.
std::set<uint32_t> ExpectCallsOnHostThreads(const Session& session, const std::string& out,
                                            size_t threads) {
  std::multiset<size_t> printed = PrintedCalls(out);
  std::map<uint32_t, size_t> calls_by_pid;
  std::map<uint32_t, uint64_t> last_exit_by_tid;
  for (const auto& call : session.api_calls) {
    ++calls_by_pid[call.pid];
    last_exit_by_tid[call.tid] = std::max(last_exit_by_tid[call.tid], call.exit_ns);
    auto thread = session.threads.find(call.tid);
    if (thread == session.threads.end() || thread->second.pid != call.pid ||
        thread->second.name.rfind("nsw", 0) != 0) {
      ADD_FAILURE() << "a call of pid " << call.pid << " on tid " << call.tid
                    << ", which the kernel did not record as a thread of that process named nsw*";
      break;
    }
  }
  std::multiset<size_t> recorded;
  for (const auto& [pid, count] : calls_by_pid) recorded.insert(count);
  EXPECT_EQ(recorded, printed) << out;
  // Each thread's 5 ms sleep after its calls, on its host tid.
  EXPECT_EQ(last_exit_by_tid.size(), threads);
  for (const auto& [tid, last_exit] : last_exit_by_tid) {
    bool slept = false;
    for (const auto& interval : session.off_cpu) {
      if (interval.tid == tid && interval.start_ns >= last_exit &&
          interval.end_ns - interval.start_ns >= 4'000'000) {
        slept = true;
      }
    }
    EXPECT_TRUE(slept) << "no off-CPU interval of tid " << tid << " after its last call";
  }
  // The kernel's processes: the command, or ones it saw start (so not a namespace's "1" taken
  // for the host's).
  std::set<uint32_t> pids;
  for (const auto& [pid, count] : calls_by_pid) {
    bool started = pid == session.meta.root_pid;
    for (const auto& start : session.task_starts) started |= !start.is_thread && start.pid == pid;
    EXPECT_TRUE(started) << "pid " << pid << " is not a process the kernel saw start";
    pids.insert(pid);
  }
  return pids;
}

void NeedUnshare() {
  if (access(kUnshare, X_OK) != 0) FAIL() << kUnshare << " is missing (util-linux)";
}

// The namespaces of container launchers, each alone and together: PID (with its own /proc, as
// `docker run`, bwrap --unshare-pid --proc and apptainer --pid make it), PID and IPC, user (root
// mapped, as rootless containers, and unmapped), mount, and all of them at once.
TEST(Containers, EveryNamespaceALauncherMakesIsRecordedWholeOnTheHostsThreads) {
  GPROF_NEED_BPF();
  NeedUnshare();
  const std::vector<std::vector<std::string>> launchers = {
      {"-fp", "--mount-proc"}, {"-fpi", "--mount-proc"}, {"-r"}, {"-U"}, {"-m"},
      {"-r", "-fpim", "--mount-proc"},
  };
  for (const auto& options : launchers) {
    std::vector<std::string> command = {kUnshare};
    command.insert(command.end(), options.begin(), options.end());
    // Three threads in the first process, two in a child it forks: pids 1 and 2 in a namespace.
    for (const char* arg : {"namespace_app", "3", "120", "2"}) command.push_back(arg);
    command[command.size() - 4] = AppPath("namespace_app");
    std::string shown;
    for (const auto& option : options) shown += option + " ";
    SCOPED_TRACE("unshare " + shown);

    ProcessResult plain = RunProcess(Command(command));
    ASSERT_EQ(plain.exit_code(), 0) << plain.err;
    TempDir dir;
    std::vector<std::string> args = {"-q", "-o", dir.Sub("s"), "--"};
    args.insert(args.end(), command.begin(), command.end());
    ProcessResult run = RunGprof(args);
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_EQ(run.out, plain.out);
    EXPECT_EQ(run.err, plain.err) << "the program's stderr is its own";

    Session session = ReadOrFail(dir.Sub("s"));
    for (const auto& stop : session.recording_stops) {
      ADD_FAILURE() << stop.file << " stopped: " << stop.cause << ": " << stop.description;
    }
    std::set<uint32_t> pids = ExpectCallsOnHostThreads(session, run.out, 5);
    EXPECT_EQ(pids.size(), 2u);
  }
}

// Two PID namespaces one after the other: each one's first process is "pid 1", and each is a
// process of its own in the files, the model and the report.
TEST(Containers, TwoNamespacesFirstProcessesAreTwoProcesses) {
  GPROF_NEED_BPF();
  NeedUnshare();
  const std::string app = AppPath("namespace_app");
  const std::string script = std::string(kUnshare) + " -fp --mount-proc " + app + " 1 90 && " +
                             kUnshare + " -fp --mount-proc " + app + " 2 70";
  ProcessResult plain = RunProcess(Command({"/bin/sh", "-c", script}));
  ASSERT_EQ(plain.exit_code(), 0) << plain.err;
  TempDir dir;
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", "/bin/sh", "-c", script});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
  EXPECT_EQ(PrintedCalls(run.out), (std::multiset<size_t>{90, 140}));

  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_TRUE(session.recording_stops.empty());
  std::set<uint32_t> pids = ExpectCallsOnHostThreads(session, run.out, 3);
  EXPECT_EQ(pids.size(), 2u);
  EXPECT_FALSE(pids.contains(1u)) << "a namespace's pid 1 taken for the host's";
}

// Python's native_id of a thread is its id in the PID namespace: the names the recorder reads
// from threading's objects land on the kernel's threads all the same (checked on the GPU host
// with torch too: scripts/gpu/run_all.sh containers).
TEST(Containers, PythonThreadNamesInAPidNamespaceAreOnTheHostsThreads) {
  GPROF_NEED_BPF();
  NeedUnshare();
  const std::string python = "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) FAIL() << python << " is missing (scripts/setup.sh)";
  TempDir dir;
  ProcessResult run =
      RunGprof({"-q", "-o", dir.Sub("s"), "--", kUnshare, "-fp", "--mount-proc", python,
                SourceDir() + "/tests/apps/py_thread_names.py"});
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(dir.Sub("s"));
  for (const char* name : {"qprod", "qcons"}) {
    uint32_t named = 0;
    for (const auto& [tid, python_name] : session.python.thread_names) {
      if (python_name == name) named = tid;
    }
    ASSERT_NE(named, 0u) << name << " has no Python name";
    auto thread = session.threads.find(named);
    ASSERT_NE(thread, session.threads.end()) << name << ": " << named << " is no thread recorded";
    EXPECT_NE(thread->second.pid, 1u) << name << ": the namespace's ids, not the kernel's";
    EXPECT_NE(session.ThreadLabel(named).find(name), std::string::npos) << session.ThreadLabel(named);
  }
}

// A new IPC namespace cannot attach the session's shared memory (the size budget, the session's
// control): the process records all the same, and the report says what was not enforced.
TEST(Containers, AnIpcNamespaceRecordsAndTheReportSaysWhatWasNotEnforced) {
  GPROF_NEED_BPF();
  NeedUnshare();
  std::vector<std::string> command = {kUnshare, "-i", AppPath("namespace_app"), "2", "80"};
  ProcessResult plain = RunProcess(Command(command));
  ASSERT_EQ(plain.exit_code(), 0) << plain.err;
  TempDir dir;
  std::vector<std::string> args = {"--max-size", "1G", "-o", dir.Sub("s"), "--"};
  args.insert(args.end(), command.begin(), command.end());
  ProcessResult run = RunGprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_TRUE(session.recording_stops.empty());
  ExpectCallsOnHostThreads(session, run.out, 2);
  std::string report = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(report.find("another IPC namespace): --max-size was not enforced"), std::string::npos)
      << report;
  ExpectReadableReport(report);
}

// A time namespace moves CLOCK_MONOTONIC by 7 s for the program: its calls are still on the
// session's clock, inside the run, and its threads' sleeps after them where the kernel saw them.
TEST(Containers, ATimeNamespacesCallsAreOnTheSessionsClock) {
  GPROF_NEED_BPF();
  NeedUnshare();
  std::vector<std::string> command = {kUnshare, "-T", "--monotonic", "7", "--boottime", "7", "-f",
                                      AppPath("namespace_app"), "2", "60"};
  ProcessResult plain = RunProcess(Command(command));
  if (plain.exit_code() != 0 && plain.err.find("unshare") != std::string::npos)
    GTEST_SKIP() << "no time namespaces here: " << plain.err;
  TempDir dir;
  std::vector<std::string> args = {"-q", "-o", dir.Sub("s"), "--"};
  args.insert(args.end(), command.begin(), command.end());
  ProcessResult run = RunGprof(args);
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
  Session session = ReadOrFail(dir.Sub("s"));
  ExpectCallsOnHostThreads(session, run.out, 2);
  ASSERT_FALSE(session.api_calls.empty());
  for (const auto& call : session.api_calls) {
    ASSERT_GE(call.enter_ns, session.meta.start_monotonic_ns);
    ASSERT_LE(call.exit_ns, session.meta.end_monotonic_ns);
  }
}

// gprof-run killed while a PID namespace's process records: the process sees it (through the
// session's shared memory, not a pid it cannot see), stops recording then and not before, and
// says nothing on its stderr.
TEST(Containers, GprofRunKilledIsSeenFromAPidNamespaceAndTheProgramsStderrStaysItsOwn) {
  GPROF_NEED_BPF();
  NeedUnshare();
  TempDir dir;
  ProcessSpec spec;
  spec.signal_after_ms = 700;
  spec.signal = SIGKILL;
  // One thread, 600 calls 3 ms apart: about 2 s, killed a third of the way.
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", kUnshare, "-fp", "--mount-proc",
                             AppPath("namespace_app"), "1", "600", "0", "3000"},
                            spec);
  ASSERT_NE(run.signalled_at_ns, 0u);
  EXPECT_EQ(run.err, "namespace_app: done\n") << "the program's stderr is its own";
  auto session = collector::ReadSession(dir.Sub("s"));
  ASSERT_TRUE(session.ok()) << session.status().message();
  ASSERT_EQ(session->recording_stops.size(), 1u);
  const auto& stop = session->recording_stops[0];
  EXPECT_EQ(stop.cause, "profiler_ended") << stop.description;
  EXPECT_GE(stop.time_ns, run.signalled_at_ns) << "stopped before gprof-run was killed";
  EXPECT_FALSE(session->api_calls.empty());
  EXPECT_NE(stop.pid, 1u) << "the namespace's pid, not the host's";
}

// The mark the writers read (session_control.h): set by the kernel when the process that made the
// control ends by SIGKILL, and not when a child it forked (which shares the mapping) ends.
TEST(ProfilerAlive, TheKernelMarksItWhenItsHolderIsKilledAndNotWhenAChildEnds) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    SessionControl control;
    if (control.Create() != 0) _exit(1);
    pid_t child = fork();  // shares the mapping, and ends first
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    std::string line = control.handle() + "\n";
    if (write(pipe_fds[1], line.data(), line.size()) < 0) _exit(1);
    pause();
    _exit(0);
  }
  close(pipe_fds[1]);
  char handle[64] = {};
  ssize_t n = read(pipe_fds[0], handle, sizeof(handle) - 1);
  close(pipe_fds[0]);
  ASSERT_GT(n, 1);
  handle[n - 1] = '\0';
  SessionControl writer;
  ASSERT_EQ(writer.Attach(handle), 0);
  EXPECT_FALSE(writer.profiler_ended()) << "its forked child's end is not its own";
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_TRUE(writer.profiler_ended());
  EXPECT_FALSE(writer.closing());
}

}  // namespace
}  // namespace gprof::test
