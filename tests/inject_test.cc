// libgprof_inject.so in real processes, without gprof-run and without BPF: LD_PRELOAD it into the
// test programs (which run on the fake CUDA runtime) and read back what it wrote.
#include <gtest/gtest.h>
#include <time.h>

#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "session_format.h"
#include "session_reader.h"
#include "test_support.h"

namespace gprof::test {
namespace {

using collector::ReadSession;
using collector::Session;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

ProcessSpec Preloaded(std::vector<std::string> argv, const TempDir& session) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath(), "GPROF_SESSION_DIR=" + session.path()};
  spec.timeout_s = 60;
  return spec;
}

// The session as the injected library alone left it: without gprof-run there is no session.json,
// which the reader notes; every other diagnostic is a failure.
Session ReadOrFail(const std::string& dir) {
  auto session = ReadSession(dir);
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return Session{};
  std::erase_if(session->diagnostics, [](const collector::Diagnostic& d) {
    return d.file.ends_with(collector::kSessionMetaFile);
  });
  return std::move(session.value());
}

std::vector<const collector::ApiCall*> CallsOf(const Session& session, uint32_t pid) {
  std::vector<const collector::ApiCall*> calls;
  for (const auto& call : session.api_calls) {
    if (call.pid == pid) calls.push_back(&call);
  }
  return calls;
}

TEST(Inject, RecordsEveryCallWithThreadStreamAndResult) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("api_tour_app")}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  EXPECT_EQ(run.err, "");

  Session session = ReadOrFail(session_dir.path());
  EXPECT_TRUE(session.diagnostics.empty());
  ASSERT_EQ(session.processes.size(), 1u);
  uint32_t pid = session.processes.begin()->first;
  EXPECT_NE(session.processes.begin()->second.exe.find("api_tour_app"), std::string::npos);
  EXPECT_FALSE(session.processes.begin()->second.maps.empty());
  auto calls = CallsOf(session, pid);

  std::istringstream lines(run.out);
  std::string line;
  std::regex pattern(R"(api=(\w+) stream=(\S+)(?: error=(\d+))?)");
  size_t index = 0;
  while (std::getline(lines, line)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, pattern)) << line;
    ASSERT_LT(index, calls.size()) << "not recorded: " << line;
    const auto& call = *calls[index++];
    EXPECT_EQ(session.ApiName(call), match[1].str()) << "call " << index;
    EXPECT_EQ(call.tid, pid) << line;  // all from the main thread
    EXPECT_LE(call.enter_ns, call.exit_ns);
    if (match[2] == "-") {
      EXPECT_FALSE(call.flags & format::kApiCallHasStream) << line;
    } else {
      EXPECT_TRUE(call.flags & format::kApiCallHasStream) << line;
      EXPECT_EQ(call.stream, std::stoull(match[2].str(), nullptr, 16)) << line;
    }
    EXPECT_EQ(call.return_code, match[3].matched ? std::stoi(match[3].str()) : 0) << line;
  }
  EXPECT_EQ(index, calls.size()) << "recorded more calls than the program made";
  EXPECT_GE(index, 19u);
  EXPECT_EQ(session.threads.at(pid).name, "api_tour_app");
}

TEST(Inject, OnlyTheOutermostCallIsRecorded) {
  // cudaMallocHost of the fake runtime calls the exported cudaHostAlloc (through the PLT, so
  // through the interposer): one record, the outer one.
  TempDir session_dir;
  ASSERT_EQ(RunProcess(Preloaded({AppPath("api_tour_app")}, session_dir)).exit_code(), 0);
  Session session = ReadOrFail(session_dir.path());
  int host_allocs = 0;
  for (const auto& call : session.api_calls)
    host_allocs += session.ApiName(call) == "cudaHostAlloc";
  EXPECT_EQ(host_allocs, 1);
}

TEST(Inject, WithoutASessionDirectoryItOnlyForwards) {
  TempDir session_dir;
  ProcessSpec spec = Preloaded({AppPath("api_tour_app")}, session_dir);
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath()};
  spec.unset_env = {"GPROF_SESSION_DIR"};
  ProcessResult preloaded = RunProcess(spec);
  ProcessResult plain = RunProcess(Command({AppPath("api_tour_app")}));
  EXPECT_EQ(preloaded.exit_code(), 0);
  EXPECT_EQ(preloaded.out.size(), plain.out.size());
  EXPECT_TRUE(std::filesystem::is_empty(session_dir.path()));
}

TEST(Inject, OutputAndStatusAreTheProgramsOwn) {
  TempDir session_dir;
  for (std::vector<std::string> args : {std::vector<std::string>{"print", "exit", "3"},
                                        std::vector<std::string>{"print", "signal", "15"}}) {
    std::vector<std::string> argv = {AppPath("exit_app")};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessResult plain = RunProcess(Command(argv));
    ProcessResult preloaded = RunProcess(Preloaded(argv, session_dir));
    EXPECT_EQ(preloaded.out, plain.out);
    EXPECT_EQ(preloaded.err, plain.err);
    EXPECT_EQ(preloaded.wait_status, plain.wait_status);
  }
}

TEST(Inject, ForkWithoutExecKeepsRecordingInEveryChild) {
  TempDir session_dir;
  ProcessResult run = RunProcess(
      Preloaded({AppPath("fork_app"), "--children", "6", "--calls", "150"}, session_dir));
  ASSERT_FALSE(run.timed_out) << "fork_app deadlocked under the injected library";
  ASSERT_EQ(run.exit_code(), 0) << run.err;

  Session session = ReadOrFail(session_dir.path());
  std::regex pattern(R"((child|parent) pid=(\d+) calls=(\d+))");
  int children = 0;
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, pattern)) continue;
    uint32_t pid = static_cast<uint32_t>(std::stoul(match[2]));
    size_t expected = std::stoul(match[3]);
    EXPECT_EQ(CallsOf(session, pid).size(), expected) << line;
    children += match[1] == "child";
  }
  EXPECT_EQ(children, 6);
  for (const auto& diagnostic : session.diagnostics) ADD_FAILURE() << diagnostic.message;
  uint64_t lost = 0;
  for (const auto& entry : session.lost) lost += entry.count;
  EXPECT_EQ(lost, 0u);
}

TEST(Inject, SigkillLosesAtMostTheLastSecond) {
  TempDir session_dir;
  ProcessSpec spec = Preloaded({AppPath("freeze_app"), "--rounds", "1000"}, session_dir);
  spec.signal_after_ms = 1500;
  spec.signal = SIGKILL;
  uint64_t started = NowNs();
  ProcessResult run = RunProcess(spec);
  uint64_t killed_at = started + 1500ull * 1000000;
  ASSERT_EQ(run.exit_code(), 128 + SIGKILL);

  Session session = ReadOrFail(session_dir.path());
  ASSERT_FALSE(session.api_calls.empty());
  uint64_t last_exit = 0;
  for (const auto& call : session.api_calls) last_exit = std::max(last_exit, call.exit_ns);
  EXPECT_GT(last_exit + 1000000000ull, killed_at)
      << "the newest record is " << (killed_at - last_exit) / 1e6 << " ms older than the kill";
}

TEST(Inject, UnderscoreExitStillFlushes) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("api_tour_app"), "_exit"}, session_dir));
  ASSERT_EQ(run.exit_code(), 0);
  Session session = ReadOrFail(session_dir.path());
  ASSERT_FALSE(session.api_calls.empty());
  EXPECT_EQ(session.ApiName(session.api_calls.back()), "cudaStreamSynchronize");
}

TEST(Inject, ExitFromAnotherThreadKeepsTheRecord) {
  TempDir session_dir;
  ProcessResult run = RunProcess(Preloaded({AppPath("exit_app"), "thread-exit", "5"}, session_dir));
  EXPECT_EQ(run.exit_code(), 5);
  Session session = ReadOrFail(session_dir.path());
  EXPECT_FALSE(session.api_calls.empty());
  EXPECT_TRUE(session.diagnostics.empty());
}

TEST(Inject, NamesThreadsAsTheProgramNamedThem) {
  TempDir session_dir;
  ProcessResult run = RunProcess(
      Preloaded({AppPath("freeze_app"), "--rounds", "1", "--launchers", "2"}, session_dir));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  Session session = ReadOrFail(session_dir.path());
  std::set<std::string> names;
  for (const auto& [tid, thread] : session.threads) names.insert(thread.name);
  for (const char* name : {"launcher-0", "launcher-1", "holder"}) {
    EXPECT_TRUE(names.contains(name)) << name;
  }
}

TEST(Inject, AnUnwritableSessionDirectoryDoesNotHarmTheProgram) {
  ProcessSpec spec;
  spec.argv = {AppPath("exit_app"), "print", "exit", "4"};
  spec.set_env = {"LD_PRELOAD=" + InjectLibraryPath(), "GPROF_SESSION_DIR=/proc/no-such-dir"};
  ProcessResult plain = RunProcess(Command(spec.argv));
  ProcessResult run = RunProcess(spec);
  EXPECT_EQ(run.exit_code(), 4);
  EXPECT_EQ(run.out, plain.out);
  EXPECT_EQ(run.err, plain.err);
}

}  // namespace
}  // namespace gprof::test
