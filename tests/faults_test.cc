// Faults in the target and around it (issue 7), through the real gprof-run with real BPF: the
// target crashes, is killed, exits from another thread, execs, forks hundreds of children, runs a
// thousand threads or reuses a tid; 64 threads call CUDA for a minute; the disk fills up; gprof-run
// itself is killed; the kernel's ring buffer overflows. Each time: the target's own status and
// output, nothing hung, and the session holds what was recorded and says what was not.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "collector/session/session_reader.h"
#include "inject/format/session_format.h"
#include "inject/shared/disk_room.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

namespace fs = std::filesystem;
using collector::Session;
using nlohmann::json;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

json ReadJson(const std::string& path) {
  json parsed = json::parse(ReadFile(path), nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << path;
  return parsed;
}

// The session, which must read back whole.
Session ReadOrFail(const std::string& dir) {
  auto session = collector::ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return Session();
  for (const auto& diagnostic : session->diagnostics) {
    ADD_FAILURE() << diagnostic.file << " at " << diagnostic.offset << ": " << diagnostic.message;
  }
  return std::move(session.value());
}

uint64_t LastCallExitNs(const Session& session, uint32_t pid) {
  uint64_t last = 0;
  for (const auto& call : session.api_calls) {
    if (call.pid == pid) last = std::max(last, call.exit_ns);
  }
  return last;
}

// The kernel's record of the root process reaches its death: the kernel saw the main thread exit,
// and recorded it going off-CPU in its last 100 ms (it sleeps every millisecond while busy).
void ExpectKernelRecordUntilDeath(const Session& session, uint32_t pid) {
  ASSERT_TRUE(session.threads.contains(pid));
  uint64_t exit_ns = session.threads.at(pid).exit_ns;
  ASSERT_NE(exit_ns, 0u) << "the kernel recorder did not see pid " << pid << " end";
  uint64_t last_off_cpu = 0;
  for (const auto& interval : session.off_cpu) {
    if (interval.tid == pid) last_off_cpu = std::max(last_off_cpu, interval.start_ns);
  }
  EXPECT_GT(last_off_cpu + 100000000ull, exit_ns)
      << "the newest off-CPU interval is " << (exit_ns - last_off_cpu) / 1e6
      << " ms older than the process's end";
}

// The target's pid, as gprof-run wrote it in session.json before releasing it.
uint32_t WaitForRootPid(const std::string& session_dir) {
  for (int i = 0; i < 1000; ++i) {
    json meta = json::parse(ReadFile(session_dir + "/session.json"), nullptr, false);
    if (!meta.is_discarded() && meta.contains("root_pid")) return meta["root_pid"].get<uint32_t>();
    usleep(10000);
  }
  return 0;
}

// --- faults in the target ---

struct Crash {
  std::string action;
  int exit_code;
  std::optional<int> signal;
};

TEST(TargetFaults, CrashesKeepTheStatusAndTheRecordAndAreMarkedCutShort) {
  GPROF_NEED_BPF();
  for (const Crash& crash : {Crash{"segfault", 128 + SIGSEGV, SIGSEGV},
                             Crash{"abort", 128 + SIGABRT, SIGABRT}, Crash{"thread-exit", 5, {}}}) {
    SCOPED_TRACE(crash.action);
    TempDir dir;
    std::vector<std::string> args = {"-o",   dir.Sub("s"), "--",        AppPath("exit_app"),
                                     "busy", "800",        crash.action};
    if (crash.action == "thread-exit") args.push_back("5");
    ProcessResult run = RunGprof(args);
    ASSERT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code(), crash.exit_code) << run.err;

    json meta = ReadJson(dir.Sub("s/session.json"));
    EXPECT_EQ(meta["finished"], true);
    json report = ReadJson(dir.Sub("s/report.json"));
    const json& cut_short = report["session"]["cut_short"];
    std::string text = ReadFile(dir.Sub("s/report.txt"));
    if (crash.signal) {
      ASSERT_TRUE(cut_short.is_object()) << report["session"].dump(1);
      EXPECT_EQ(cut_short["cause"], "killed_by_signal");
      EXPECT_EQ(report["session"]["exit_signal"], *crash.signal);
      std::string name = std::string("SIG") + sigabbrev_np(*crash.signal);
      EXPECT_NE(text.find("CUT SHORT the command was killed by signal " +
                          std::to_string(*crash.signal) + " (" + name + ")"),
                std::string::npos)
          << text;
    } else {
      EXPECT_TRUE(cut_short.is_null()) << cut_short.dump();
      EXPECT_EQ(text.find("CUT SHORT"), std::string::npos) << text;
    }

    Session session = ReadOrFail(dir.Sub("s"));
    uint32_t pid = session.meta.root_pid;
    uint64_t last_call = LastCallExitNs(session, pid);
    ASSERT_NE(last_call, 0u);
    // The crash came right after the busy loop's last calls: they are all in the record.
    EXPECT_GT(last_call + 1000000000ull, session.threads.at(pid).exit_ns);
    ExpectKernelRecordUntilDeath(session, pid);
  }
}

TEST(TargetFaults, SigkillFromOutsideLosesAtMostTheLastSecond) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::atomic<uint64_t> killed_at{0};
  std::thread killer([&] {
    uint32_t pid = WaitForRootPid(dir.Sub("s"));
    if (pid == 0) return;
    usleep(1500000);
    killed_at = NowNs();
    kill(static_cast<pid_t>(pid), SIGKILL);
  });
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", AppPath("exit_app"), "busy", "20000"});
  killer.join();
  ASSERT_NE(killed_at.load(), 0u) << "no session.json with the root pid";
  EXPECT_EQ(run.exit_code(), 128 + SIGKILL);
  EXPECT_LT(run.seconds, 15) << "gprof-run did not end with its command";

  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(session.meta.cut_short, "killed_by_signal");
  uint32_t pid = session.meta.root_pid;
  uint64_t last_call = LastCallExitNs(session, pid);
  EXPECT_GT(last_call + 1000000000ull, killed_at.load())
      << "the newest CUDA call is " << (killed_at.load() - last_call) / 1e6
      << " ms older than the SIGKILL";
  ExpectKernelRecordUntilDeath(session, pid);
  json report = ReadJson(dir.Sub("s/report.json"));
  EXPECT_EQ(report["session"]["cut_short"]["cause"], "killed_by_signal");
}

TEST(TargetFaults, ExecRecordsBothProgramsOfTheProcess) {
  GPROF_NEED_BPF();
  TempDir dir;
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", AppPath("exit_app"), "busy", "300",
                             "exec", AppPath("exit_app"), "busy", "300", "exit", "3"});
  ASSERT_EQ(run.exit_code(), 3) << run.err;
  EXPECT_TRUE(fs::exists(
      dir.Sub("s/inject-" + ReadJson(dir.Sub("s/session.json"))["root_pid"].dump() + ".1.gpr")))
      << "the new program's own file";
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_TRUE(session.meta.cut_short.empty());
  uint32_t pid = session.meta.root_pid;
  const auto& process = session.processes.at(pid);
  // gprof-run's exec of the command, and the command's own.
  ASSERT_EQ(process.exec_ns.size(), 2u) << "the kernel saw both execs";
  uint64_t exec_ns = process.exec_ns.back();
  size_t before = 0, after = 0;
  uint64_t last_before = 0;
  for (const auto& call : session.api_calls) {
    if (call.pid != pid) continue;
    (call.enter_ns < exec_ns ? before : after) += 1;
    if (call.exit_ns < exec_ns) last_before = std::max(last_before, call.exit_ns);
  }
  EXPECT_GT(before, 100u);
  EXPECT_GT(after, 100u);
  // The old program's calls up to the exec: flushed before it, not lost with its writer thread.
  EXPECT_GT(last_before + 50000000ull, exec_ns)
      << "the old program's last recorded call is " << (exec_ns - last_before) / 1e6
      << " ms older than its exec";
  ExpectKernelRecordUntilDeath(session, pid);
}

// Lines "<what> pid=<n> calls=<m>" or "<what> tid=<n> calls=<m>" the test programs print.
std::map<uint32_t, size_t> PrintedCalls(const std::string& output, const std::string& what) {
  std::map<uint32_t, size_t> printed;
  std::regex pattern(what + R"( (?:pid|tid)=(\d+) calls=(\d+))");
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, pattern)) {
      printed[static_cast<uint32_t>(std::stoul(match[1]))] = std::stoul(match[2]);
    }
  }
  return printed;
}

TEST(TargetFaults, AForkStormRecordsEveryProcess) {
  GPROF_NEED_BPF();
  TempDir dir;
  ProcessSpec spec;
  spec.timeout_s = 240;
  ProcessResult run = RunGprof(
      {"-q", "-o", dir.Sub("s"), "--", AppPath("fork_app"), "--children", "300", "--calls", "12"},
      spec);
  ASSERT_FALSE(run.timed_out) << "deadlock";
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::map<uint32_t, size_t> children = PrintedCalls(run.out, "child");
  ASSERT_EQ(children.size(), 300u);

  Session session = ReadOrFail(dir.Sub("s"));
  std::map<uint32_t, size_t> recorded;
  for (const auto& call : session.api_calls) ++recorded[call.pid];
  std::set<uint32_t> started_by_kernel;
  for (const auto& start : session.task_starts) {
    if (!start.is_thread) started_by_kernel.insert(start.pid);
  }
  for (const auto& [pid, calls] : children) {
    EXPECT_EQ(recorded[pid], calls) << "child " << pid;
    EXPECT_TRUE(started_by_kernel.contains(pid)) << "the kernel recorder missed child " << pid;
    EXPECT_TRUE(session.processes.contains(pid)) << pid;
  }
  // Nothing of the processes themselves lost (kernel stacks a busy stack map could not hold may
  // be).
  for (const auto& entry : session.lost) {
    EXPECT_EQ(entry.what.find("CUDA call records"), std::string::npos) << entry.what;
    EXPECT_EQ(entry.what.find("not followed"), std::string::npos) << entry.what;
  }
}

TEST(TargetFaults, AThousandThreadsAreEachRecorded) {
  GPROF_NEED_BPF();
  TempDir dir;
  ProcessSpec spec;
  spec.timeout_s = 240;
  ProcessResult run =
      RunGprof({"-q", "-o", dir.Sub("s"), "--", AppPath("storm_app"), "threads", "1000"}, spec);
  ASSERT_FALSE(run.timed_out) << "deadlock";
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::map<uint32_t, size_t> threads = PrintedCalls(run.out, "thread");
  ASSERT_EQ(threads.size(), 1000u);

  Session session = ReadOrFail(dir.Sub("s"));
  std::map<uint32_t, size_t> recorded;
  for (const auto& call : session.api_calls) ++recorded[call.tid];
  std::set<uint32_t> started_by_kernel;
  for (const auto& start : session.task_starts) {
    if (start.is_thread) started_by_kernel.insert(start.tid);
  }
  for (const auto& [tid, calls] : threads) {
    EXPECT_EQ(recorded[tid], calls) << "thread " << tid;
    EXPECT_TRUE(started_by_kernel.contains(tid)) << "the kernel recorder missed thread " << tid;
  }
}

TEST(TargetFaults, AReusedTidKeepsBothThreadsCalls) {
  GPROF_NEED_BPF();
  TempDir dir;
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", AppPath("storm_app"), "reuse-tid"});
  if (run.exit_code() == 3) GTEST_SKIP() << run.err;  // no CAP_SYS_ADMIN, or a busy machine
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::smatch match;
  std::regex pattern(R"(reused tid=(\d+) first=(\d+) second=(\d+)\n)");
  ASSERT_TRUE(std::regex_match(run.out, match, pattern)) << run.out;
  uint32_t tid = static_cast<uint32_t>(std::stoul(match[1]));
  Session session = ReadOrFail(dir.Sub("s"));
  size_t calls = 0;
  for (const auto& call : session.api_calls) calls += call.tid == tid;
  EXPECT_EQ(calls, std::stoul(match[2]) + std::stoul(match[3]));
  size_t starts = 0;
  for (const auto& start : session.task_starts) starts += start.tid == tid;
  EXPECT_EQ(starts, 2u) << "the kernel saw both threads start";
  EXPECT_EQ(session.threads.at(tid).name, "second-owner");
}

int StressSeconds() {
  const char* value = getenv("GPROF_STRESS_SECONDS");
  return value != nullptr ? atoi(value) : 60;
}

TEST(TargetFaults, SixtyFourThreadsForAMinuteAreRecordedOrCountedAsDropped) {
  GPROF_NEED_BPF();
  int seconds = StressSeconds();
  TempDir dir;
  ProcessSpec spec;
  // The whole run under 300 s (ctest's limit in CI): the collector reads every call back.
  spec.timeout_s = seconds * 2 + 160;
  // 250 calls a second a thread, in bursts of 200: 16,000 a second, a million a minute.
  ProcessResult run = RunGprof({"-q", "-o", dir.Sub("s"), "--", AppPath("storm_app"), "stress", "64",
                             std::to_string(seconds), "250"},
                            spec);
  ASSERT_FALSE(run.timed_out);
  ASSERT_EQ(run.exit_code(), 0) << run.err.substr(0, 2000);
  std::smatch match;
  std::regex pattern(R"(calls=(\d+)\n)");
  ASSERT_TRUE(std::regex_match(run.out, match, pattern)) << run.out;
  uint64_t made = std::stoull(match[1]);
  EXPECT_GT(made, uint64_t(seconds) * 64 * 125) << "the program hardly ran";

  json report = ReadJson(dir.Sub("s/report.json"));
  uint64_t recorded = report["session"]["counts"]["cuda_calls"];
  uint64_t dropped = 0;
  for (const auto& process : report["session"]["processes"]) {
    dropped += process["dropped_records"].get<uint64_t>();
  }
  EXPECT_EQ(recorded + dropped, made) << recorded << " recorded, " << dropped << " dropped";
  if (dropped > 0) {
    std::string text = ReadFile(dir.Sub("s/report.txt"));
    EXPECT_NE(text.find("LOST      "), std::string::npos) << text;
  }
  std::printf("stress: %d s, %llu calls made, %llu recorded, %llu dropped\n", seconds,
              static_cast<unsigned long long>(made), static_cast<unsigned long long>(recorded),
              static_cast<unsigned long long>(dropped));
}

// The writer thread of `pid`'s injected library, once it exists; 0 after ~10 s without it.
pid_t WriterThreadOf(uint32_t pid) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::error_code ec;
    for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
      if (ReadFile(task.path().string() + "/comm") ==
          std::string(format::kWriterThreadName) + "\n") {
        return static_cast<pid_t>(std::stoi(task.path().filename().string()));
      }
    }
    usleep(10000);
  }
  return 0;
}

// A writer that falls behind (as one blocked on a slow disk would): the injected library's writer
// thread alone is held still for a second (ptrace, which stops one thread) while a thread makes
// 200,000 calls a second. Its ring overflows; every call is recorded or counted as dropped, and
// the report says so.
TEST(TargetFaults, CallsAStalledWriterCouldNotTakeAreCountedAsDropped) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::atomic<bool> stalled{false};
  std::thread staller([&] {
    uint32_t pid = WaitForRootPid(dir.Sub("s"));
    pid_t writer = pid != 0 ? WriterThreadOf(pid) : 0;
    if (writer == 0 || ptrace(PTRACE_SEIZE, writer, nullptr, nullptr) != 0) return;
    int status = 0;
    if (ptrace(PTRACE_INTERRUPT, writer, nullptr, nullptr) == 0 &&
        waitpid(writer, &status, __WALL) == writer) {
      usleep(1000000);
      stalled = true;
    }
    ptrace(PTRACE_DETACH, writer, nullptr, nullptr);
  });
  ProcessResult run =
      RunGprof({"-o", dir.Sub("s"), "--", AppPath("storm_app"), "stress", "1", "3", "200000"});
  staller.join();
  ASSERT_TRUE(stalled.load()) << "the writer thread was not stopped";
  ASSERT_EQ(run.exit_code(), 0) << run.err.substr(0, 2000);
  std::smatch match;
  ASSERT_TRUE(std::regex_match(run.out, match, std::regex(R"(calls=(\d+)\n)"))) << run.out;
  uint64_t made = std::stoull(match[1]);

  json report = ReadJson(dir.Sub("s/report.json"));
  uint64_t recorded = report["session"]["counts"]["cuda_calls"];
  ASSERT_EQ(report["session"]["processes"].size(), 1u);
  uint64_t dropped = report["session"]["processes"][0]["dropped_records"];
  EXPECT_GT(dropped, 0u) << "a ring of 32,768 calls held a second of 200,000";
  EXPECT_EQ(recorded + dropped, made) << recorded << " recorded, " << dropped << " dropped";
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(LOST      [\d,]+ CUDA call records of pid \d+ \(thread buffer full\))")))
      << text;
}

// --- descriptors the program takes back (issue 17) ---

// What tests/apps/fd_reuse_app.cc and fd_reuse.py write into each file of their own.
constexpr char kOwnContent[] =
    "the program's own bytes, part one\nand part two, after more CUDA calls\n";

// (Compared whole, but a failure shows only the size: the intruder is compressed binary.)
void ExpectOwnFile(const std::string& path) {
  std::string content = ReadFile(path);
  EXPECT_TRUE(content == kOwnContent) << path << " holds " << content.size() << " bytes, not the "
                                      << sizeof(kOwnContent) - 1 << " the program wrote";
}

// The program's files hold exactly what it wrote, and the record holds every CUDA call (the
// injected library opened its file again) or the report names what is missing.
void ExpectOwnFilesAndRecordWhole(const TempDir& dir, const ProcessResult& run, int first_file) {
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.err, "");
  for (int i = first_file; i <= 4; ++i) ExpectOwnFile(dir.Sub("files/own-" + std::to_string(i)));
  std::smatch made;
  ASSERT_TRUE(std::regex_search(run.out, made, std::regex(R"(calls=(\d+))"))) << run.out;
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(session.api_calls.size(), std::stoul(made[1])) << "every CUDA call recorded";
  EXPECT_TRUE(session.recording_stops.empty());
  // The writer's descriptors are in a table of its own: the program never took them, so nothing
  // had to be opened again.
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_NE(text.find("  lost      nothing\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("opened again"), std::string::npos) << text;
}

TEST(TargetFaults, AProgramTakingBackDescriptorsKeepsItsFilesAndTheRecord) {
  for (const std::string mode : {"close-range", "closefrom", "dup2", "double-close"}) {
    SCOPED_TRACE(mode);
    TempDir dir;
    fs::create_directories(dir.Sub("files"));
    ProcessResult run = RunGprof({"-q", "--no-kernel", "-o", dir.Sub("s"), "--",
                               AppPath("fd_reuse_app"), mode, dir.Sub("files"), "2000"});
    if (mode != "double-close") {
      ExpectOwnFilesAndRecordWhole(dir, run, mode == "dup2" ? 0 : 1);
      continue;
    }
    // A stale number closed twice never reaches the injected library's file: nothing to reopen.
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    for (int i = 1; i <= 4; ++i) ExpectOwnFile(dir.Sub("files/own-" + std::to_string(i)));
    Session session = ReadOrFail(dir.Sub("s"));
    EXPECT_EQ(session.api_calls.size(), 4000u);
  }
}

// The same with a native stack taken at every call (--threshold 0), through a frame without unwind
// information: the unwinder holds no descriptor of its own among the program's (libunwind's
// memory check read, wrote and closed the numbers of its pipe, which were the program's files by
// then).
TEST(TargetFaults, StacksTakenAfterTheProgramTookBackDescriptorsLeaveItsFilesAlone) {
  for (const std::string mode : {"close-range", "dup2"}) {
    SCOPED_TRACE(mode);
    TempDir dir;
    fs::create_directories(dir.Sub("files"));
    ProcessResult run = RunGprof({"-q", "--no-kernel", "--threshold", "0", "-o", dir.Sub("s"), "--",
                               AppPath("fd_reuse_app"), mode, dir.Sub("files"), "200"});
    ExpectOwnFilesAndRecordWhole(dir, run, mode == "dup2" ? 0 : 1);
    EXPECT_FALSE(ReadOrFail(dir.Sub("s")).call_stacks.empty()) << "native stacks were taken";
  }
}

TEST(TargetFaults, APythonProgramClosingEveryDescriptorKeepsItsFilesAndTheRecord) {
  const std::string python = "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) FAIL() << python << " is missing (scripts/setup.sh)";
  TempDir dir;
  fs::create_directories(dir.Sub("files"));
  ProcessResult run =
      RunGprof({"-q", "--no-kernel", "-o", dir.Sub("s"), "--", python,
             SourceDir() + "/tests/apps/fd_reuse.py",
             BuildDir() + "/tests/fake_cuda/libcudart.so.13", dir.Sub("files"), "2000"});
  ExpectOwnFilesAndRecordWhole(dir, run, 1);
}

// A program that closes every descriptor while another of its threads makes CUDA calls, and opens
// files of its own at once: with the writer sharing its table, any check before a write or a close
// races it (CI saw the program's own file closed under it). The writer's table is its own, so the
// record stays whole and nothing of ours reaches the program's files.
TEST(TargetFaults, DescriptorsClosedWhileCallsAreRecordedCostNoRecords) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    TempDir dir;
    fs::create_directories(dir.Sub("files"));
    ProcessResult run = RunGprof({"-q", "--no-kernel", "-o", dir.Sub("s"), "--",
                               AppPath("fd_race_app"), dir.Sub("files"), "2500"});
    ASSERT_EQ(run.exit_code(), 0) << run.err;
    for (int i = 0; i < 16; ++i) {
      std::string content = ReadFile(dir.Sub("files/own-" + std::to_string(i)));
      ASSERT_FALSE(content.empty());
      EXPECT_EQ(content.find_first_not_of("the program's own line\n"), std::string::npos)
          << "own-" << i << ": " << content.size() << " bytes, not only the program's lines";
    }
    std::smatch made;
    ASSERT_TRUE(std::regex_search(run.out, made, std::regex(R"(calls=(\d+))"))) << run.out;
    Session session = ReadOrFail(dir.Sub("s"));
    EXPECT_TRUE(session.recording_stops.empty())
        << session.recording_stops.front().cause << ": " << session.recording_stops.front().description;
    EXPECT_EQ(session.api_calls.size(), std::stoul(made[1])) << "every CUDA call recorded";
  }
}

// --- faults around it ---

// The room gprof-run leaves (inject/shared/disk_room.h): on a filesystem with less than the margin
// free nothing is written into it until the command has ended, so the program gets all the room it
// would have without gprof-run, to the byte, and the report (on stderr) says why nothing was
// recorded.
TEST(AroundFaults, ADiskWithoutRoomForTheMarginGetsNothingWhileTheCommandRuns) {
  TempDir dir;
  for (const char* bytes : {"900000", "fill"}) {
    SCOPED_TRACE(bytes);
    std::string name = bytes;
    SmallFileSystem plain_fs(dir.Sub("plain-" + name), "1m");
    SmallFileSystem small(dir.Sub("small-" + name), "1m");
    if (!plain_fs.mounted() || !small.mounted()) {
      GPROF_SKIP_OR_FAIL("cannot mount a tmpfs: " + plain_fs.error() + small.error());
    }
    ProcessResult plain = RunProcess(
        Command({AppPath("disk_fill_app"), dir.Sub("plain-" + name + "/f"), bytes, "300"}));
    ASSERT_EQ(plain.exit_code(), 0) << plain.err;
    ProcessResult run =
        RunGprof({"-o", dir.Sub("small-" + name + "/s"), "--", AppPath("disk_fill_app"),
               dir.Sub("small-" + name + "/f"), bytes, "300"});
    ASSERT_FALSE(run.timed_out);
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    EXPECT_EQ(run.out, plain.out) << "the program's writes, byte for byte";
    EXPECT_EQ(fs::file_size(dir.Sub("small-" + name + "/f")),
              fs::file_size(dir.Sub("plain-" + name + "/f")));
    if (name == "fill") continue;  // then not even session.json fits once the command has ended
    EXPECT_TRUE(std::regex_search(
        run.err,
        std::regex(R"(STOPPED   all recording at \+0 ns: the session's filesystem had )"
                   R"([\d.]+ MiB free, less than the \d+ MiB that gprof-run leaves free)")))
        << run.err;
    EXPECT_EQ(run.err.find("lost      nothing"), std::string::npos) << run.err;
    Session session = ReadOrFail(dir.Sub("small-" + name + "/s"));
    ASSERT_EQ(session.recording_stops.size(), 1u);
    EXPECT_EQ(session.recording_stops[0].cause, "disk_room");
  }
}

// With room at the start, every recorder stops before the free space would fall below the margin:
// a program that then needs all but the margin of the filesystem gets it.
TEST(AroundFaults, RecordingStopsWhileTheDiskMarginIsStillFree) {
  TempDir dir;
  // Room to record 256 KiB; the program needs what the margin keeps, less 1 MiB.
  uint64_t size_kib = (kMinDiskMargin >> 10) + 256;
  std::string program_bytes = std::to_string(kMinDiskMargin - (1u << 20));
  SmallFileSystem plain_fs(dir.Sub("plain"), std::to_string(size_kib) + "k");
  SmallFileSystem small(dir.Sub("small"), std::to_string(size_kib) + "k");
  if (!plain_fs.mounted() || !small.mounted()) {
    GPROF_SKIP_OR_FAIL("cannot mount a tmpfs: " + plain_fs.error() + small.error());
  }
  ProcessResult plain =
      RunProcess(Command({AppPath("disk_fill_app"), dir.Sub("plain/f"), program_bytes, "4000"}));
  ASSERT_EQ(plain.exit_code(), 0) << plain.out << plain.err;
  ProcessResult run = RunGprof({"-o", dir.Sub("small/s"), "--", AppPath("disk_fill_app"),
                             dir.Sub("small/f"), program_bytes, "4000"});
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code(), 0) << run.out << run.err;
  EXPECT_EQ(run.out, plain.out);

  // The report says which files stopped, when and why; every file is whole; nothing stopped
  // otherwise. (The reports do not fit in what the margin leaves them: the one on stderr says it.)
  std::regex stopped(
      R"(STOPPED   (inject-\d+\.gpr \(pid \d+\)|kernel\.gpr) at \+[\d.]+ m?s: the )"
      R"(session's filesystem was down to [\d.]+ MiB free, and gprof-run leaves \d+ )"
      R"(MiB free \(disk margin\))");
  EXPECT_TRUE(std::regex_search(run.err, stopped)) << run.err;
  Session session = ReadOrFail(dir.Sub("small/s"));
  EXPECT_FALSE(session.api_calls.empty());
  ASSERT_FALSE(session.recording_stops.empty());
  for (const auto& stop : session.recording_stops) {
    EXPECT_EQ(stop.cause, "disk_room") << stop.file << ": " << stop.description;
    EXPECT_GT(stop.time_ns, session.meta.start_monotonic_ns) << stop.file;
    EXPECT_LT(stop.time_ns, session.meta.end_monotonic_ns) << stop.file;
  }
}

// A btrfs of its own on a loop device, with a disk quota (a qgroup limit) on a subvolume: writes
// there past the limit fail with EDQUOT, for root too. Unmounted when the test ends.
class QuotaFileSystem {
 public:
  QuotaFileSystem(const TempDir& dir, const std::string& limit) : mount_point_(dir.Sub("btrfs")) {
    if (access("/usr/sbin/mkfs.btrfs", X_OK) != 0 && access("/sbin/mkfs.btrfs", X_OK) != 0) {
      error_ = "mkfs.btrfs is missing (btrfs-progs, scripts/setup.sh)";
      return;
    }
    std::string image = dir.Sub("btrfs.img");
    fs::create_directories(mount_point_);
    ProcessResult made = RunProcess(
        Command({"/bin/sh", "-c",
                 "truncate -s 300M " + image + " && mkfs.btrfs -q " + image +
                     " >/dev/null && mount -o loop " + image + " " + mount_point_ +
                     " && btrfs quota enable " + mount_point_ + " && btrfs subvolume create " +
                     mount_point_ + "/quota >/dev/null && btrfs qgroup limit " + limit + " " +
                     mount_point_ + "/quota"}));
    mounted_ = fs::exists(mount_point_ + "/quota");
    if (made.exit_code() != 0) error_ = made.err.empty() ? "mount failed" : made.err;
  }
  ~QuotaFileSystem() {
    if (mounted_) umount2(mount_point_.c_str(), MNT_DETACH);
  }
  bool ready() const { return mounted_ && error_.empty(); }
  const std::string& error() const { return error_; }
  // The directory the quota limits.
  std::string Limited() const { return mount_point_ + "/quota"; }

 private:
  std::string mount_point_;
  bool mounted_ = false;
  std::string error_;
};

// A disk quota the session meets (statvfs does not show it, so no disk margin keeps it back): each
// recorder stops at its first EDQUOT, and the report names the stop and the quota, though not even
// session.json fits any more. The program runs to its end, unharmed (the recorders' shared state
// is memory: a file mapping's store died of SIGBUS there, killing the program).
TEST(AroundFaults, ADiskQuotaStopsRecordingAndTheReportSaysSo) {
  GPROF_NEED_BPF();
  TempDir dir;
  QuotaFileSystem quota(dir, "400K");
  if (!quota.ready()) GTEST_SKIP() << "no btrfs with a quota here: " << quota.error();
  // (With a --max-size far above the quota: its budget is shared state too.)
  ProcessResult run = RunGprof({"-o", quota.Limited() + "/s", "--max-size", "64M", "--",
                             AppPath("exit_app"), "busy", "3000", "print"});
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "exit_app: text on stdout\n");
  for (const char* file : {R"(inject-\d+\.gpr)", R"(kernel\.gpr)"}) {
    EXPECT_TRUE(
        std::regex_search(run.err, std::regex(std::string("STOPPED   ") + file +
                                              R"(( \(pid \d+\))? at \+[\d.]+ m?s: [^\n]*Disk quota exceeded)")))
        << file << "\n"
        << run.err;
  }
  EXPECT_EQ(run.err.find("lost      nothing"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("CUT SHORT"), std::string::npos) << run.err;
}

TEST(AroundFaults, KilledGprofRunLeavesTheJobRunningAndSaysSo) {
  GPROF_NEED_BPF();
  TempDir dir;
  ProcessSpec spec;
  spec.signal_after_ms = 1500;
  spec.signal = SIGKILL;
  std::vector<std::string> command = {AppPath("exit_app"), "busy", "4000", "print"};
  ProcessResult plain = RunProcess(Command(command));
  std::vector<std::string> args = {"-o", dir.Sub("s"), "--"};
  args.insert(args.end(), command.begin(), command.end());
  ProcessResult run = RunGprof(args, spec);
  ASSERT_FALSE(run.timed_out);
  EXPECT_EQ(run.exit_code(), 128 + SIGKILL);
  // The job ran to its end (its streams stayed open until then), its output its own: the
  // session says where its record stops, never the program's stderr (issue 34).
  EXPECT_EQ(run.out, plain.out);
  EXPECT_GT(run.seconds, 3.5);
  EXPECT_EQ(run.err, plain.err);

  // The session reads back, says it was cut short, and where the job's record stops.
  ProcessResult report = RunGprof({"report", dir.Sub("s")});
  EXPECT_EQ(report.exit_code(), 0) << report.err;
  EXPECT_NE(report.out.find("CUT SHORT gprof-run ended before the command did"), std::string::npos)
      << report.out;
  Session session = ReadOrFail(dir.Sub("s"));
  EXPECT_EQ(session.meta.cut_short, "gprof_run_ended");
  ASSERT_EQ(session.recording_stops.size(), 1u);
  const auto& stop = session.recording_stops.front();
  EXPECT_EQ(stop.cause, "profiler_ended");
  EXPECT_GT(stop.time_ns, run.signalled_at_ns);
  EXPECT_LT(stop.time_ns, run.signalled_at_ns + 500000000ull) << "noticed within half a second";
  uint64_t last_call = LastCallExitNs(session, session.meta.root_pid);
  EXPECT_LE(last_call, stop.time_ns);
  EXPECT_GT(last_call + 1000000000ull, run.signalled_at_ns);
}

// Processes of the command that outlive it (daemons): gprof-run ends normally, and then nothing
// reaches their stderr from it, nothing is written into the session after its report, a process
// that starts recording after the command ended records nothing, and the report names what still
// ran.
TEST(AroundFaults, DaemonsThatOutliveTheCommandAreNamedAndWriteNothingAfterTheReport) {
  GPROF_NEED_BPF();
  TempDir dir;
  // The command ends at once; daemon "busy" records while gprof-run closes the session, "late"
  // makes its first CUDA call after that (and after gprof-run is gone).
  ProcessResult run = RunGprof(
      {"-q", "-o", dir.Sub("s"), "--", AppPath("daemon_app"), dir.Sub("out"), "2500", "1500"});
  ASSERT_FALSE(run.timed_out);  // RunProcess waited for the daemons too: they hold its pipes
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(run.err, "") << "the daemons' stderr is theirs";
  std::map<uint32_t, size_t> busy = PrintedCalls(ReadFile(dir.Sub("out")), "busy");
  std::map<uint32_t, size_t> late = PrintedCalls(ReadFile(dir.Sub("out")), "late");
  ASSERT_EQ(busy.size(), 1u);
  ASSERT_EQ(late.size(), 1u);
  uint32_t busy_pid = busy.begin()->first, late_pid = late.begin()->first;

  // Every file of the session was written before the report was.
  auto report_time = fs::last_write_time(dir.Sub("s/report.txt"));
  for (const auto& entry : fs::directory_iterator(dir.Sub("s"))) {
    if (entry.path().extension() != ".gpr") continue;
    EXPECT_LE(entry.last_write_time().time_since_epoch().count(),
              report_time.time_since_epoch().count())
        << entry.path() << " changed after the report";
  }
  EXPECT_FALSE(fs::exists(dir.Sub("s/inject-" + std::to_string(late_pid) + ".gpr")));

  // The busy daemon's record stops where the session closed; both daemons are named as running.
  Session session = ReadOrFail(dir.Sub("s"));
  bool closed = false;
  for (const auto& stop : session.recording_stops) {
    if (stop.pid == busy_pid && stop.cause == "session_closed") closed = true;
  }
  EXPECT_TRUE(closed);
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  for (uint32_t pid : {busy_pid, late_pid}) {
    EXPECT_TRUE(std::regex_search(
        text, std::regex("RUNNING   pid " + std::to_string(pid) +
                         R"( \(daemon_app\) outlived the command: not recorded after its end)")))
        << pid << "\n"
        << text;
  }
  EXPECT_EQ(text.find("lost      nothing"), std::string::npos) << text;
}

// The parent of `pid`, from /proc/<pid>/stat; 0 if it has none.
pid_t ParentOf(uint32_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(name_end + 2));
  std::string state;
  pid_t parent = 0;
  fields >> state >> parent;
  return parent;
}

// An event storm (a futex ping-pong, some 250,000 kernel records a second) while gprof-run, which
// drains the ring buffer, is stopped for 1.5 s: a consumer that falls behind, as a loaded machine
// makes it. The smallest ring buffer overflows; the kernel counts what it could not hold on each
// CPU, the report shows it, and nothing hangs. Every wait is recorded (--count-under 0): counted
// short waits leave no records to overflow with, and a ping-pong's hand-overs are short or not
// as the machine's load has it.
TEST(AroundFaults, RingBufferOverflowIsCountedPerCpuWithoutHanging) {
  GPROF_NEED_BPF();
  TempDir dir;
  std::atomic<bool> stalled{false};
  std::thread staller([&] {
    uint32_t pid = WaitForRootPid(dir.Sub("s"));
    pid_t gprof_run = pid != 0 ? ParentOf(pid) : 0;
    if (gprof_run <= 1) return;
    usleep(300000);  // well inside the ping-pong's 200,000 rounds (over a second recorded)
    if (kill(gprof_run, SIGSTOP) != 0) return;
    usleep(1500000);
    kill(gprof_run, SIGCONT);
    stalled = true;
  });
  ProcessSpec spec;
  spec.timeout_s = 120;
  ProcessResult run = RunGprof(
      {"-o", dir.Sub("s"), "--ring-buffer-mb", "1", "--count-under", "0", "--",
       AppPath("pingpong"), "futex", "200000"},
      spec);
  staller.join();
  ASSERT_TRUE(stalled.load()) << "gprof-run was not stopped";
  ASSERT_FALSE(run.timed_out) << "hung";
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  json report = ReadJson(dir.Sub("s/report.json"));
  uint64_t ring_lost = 0;
  for (const auto& lost : report["session"]["lost"]) {
    if (lost["what"].get<std::string>().find("ring buffer") == std::string::npos) continue;
    uint64_t by_cpu = 0;
    for (const auto& cpu : lost["by_cpu"]) {
      EXPECT_FALSE(cpu["cpu"].is_null()) << lost.dump();
      by_cpu += cpu["count"].get<uint64_t>();
    }
    EXPECT_EQ(by_cpu, lost["count"].get<uint64_t>());
    ring_lost += by_cpu;
  }
  ASSERT_GT(ring_lost, 0u) << report["session"]["lost"].dump(1);
  std::string text = ReadFile(dir.Sub("s/report.txt"));
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(LOST .*ring buffer.*\(cpu \d+: [\d,]+)")))
      << text;
}

}  // namespace
}  // namespace gprof::test
