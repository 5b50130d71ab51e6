// Issue 34, cases 6, 7 and 9: the diagnosis when a process ends while threads are blocked (a
// wakeup made by exit_group's teardown is no release), gprof-run's own threads known by their tids
// and never by name, and the names Python gives threads. Unit tests on hand-built sessions, then
// real programs (tests/apps/odd_endings_app.cc, py_exit_daemons.py, py_thread_names.py) under
// gprof-run with real BPF.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/analysis_sessions.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kMain = 1, kWaiter1 = 11, kWaiter2 = 12;

// Two threads sleep on kLock from 5 ms until the main thread's exit_group at 300 ms woke them to
// die; `owner` is the holder the mutex named when they began (0: none read).
Session ExitWhileWaiting(uint32_t owner) {
  SessionBuilder builder;
  builder.Thread(kMain, "app");
  builder.Thread(kWaiter1, "waiter1");
  builder.Thread(kWaiter2, "waiter2");
  builder.Sleep(kHolder, 1 * kMs, 300 * kMs, 300 * kMs + 5000, kMain, 1, -1);  // in nanosleep
  for (uint32_t tid : {kWaiter1, kWaiter2}) {
    builder.FutexSleep(tid, kLock, 5 * kMs, 300 * kMs, 300 * kMs + 9000, kMain);
    builder.session().futex_calls.back().val = 2;
    builder.session().futex_calls.back().owner_tid = owner;
    builder.session().futex_calls.back().ret = -512;  // ERESTARTSYS: a signal ended it
  }
  for (OffCpuInterval& interval : builder.session().off_cpu)
    interval.flags |= GPROF_OFFCPU_WOKEN_TO_DIE;
  for (auto& [tid, thread] : builder.session().threads) thread.exit_ns = 300 * kMs + 20000;
  return builder.Build();
}

// Case 6: the exiting thread is neither the holder nor the root; the mutex's recorded owner is.
TEST(OddEndings, AWakeupToDieIsNoReleaseTheMutexsOwnerHoldsIt) {
  Session session = ExitWhileWaiting(kHolder);
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.causes.size(), 1u) << RenderDiagnosisText(session, diagnosis, 5);
  const Cause& cause = diagnosis.causes[0];
  EXPECT_EQ(cause.holder_tid, kHolder);
  ASSERT_TRUE(cause.root.has_value());
  EXPECT_EQ(cause.root->tid, kHolder);
  for (const Stall& stall : diagnosis.stalls) {
    EXPECT_TRUE(stall.wait.ended_by_exit) << stall.tid;
    EXPECT_EQ(stall.wait.waker_tid, 0u) << stall.tid;
    for (const ChainLink& link : stall.chain) EXPECT_NE(link.tid, kMain) << stall.tid;
  }
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("\"app\" (1)"), std::string::npos) << text;
}

// No owner recorded (a semaphore, a condition variable): held by nobody known, never the exiter.
TEST(OddEndings, AWakeupToDieWithoutAnOwnerNamesNobody) {
  Session session = ExitWhileWaiting(0);
  Analysis diagnosis = Analyze(session, {});
  for (const Cause& cause : diagnosis.causes) {
    EXPECT_NE(cause.holder_tid, kMain);
    if (cause.root) EXPECT_NE(cause.root->tid, kMain);
  }
  for (const Stall& stall : diagnosis.stalls) EXPECT_TRUE(stall.chain.empty()) << stall.tid;
}

// Case 7: a thread of the program named as gprof-run's writer is the program's; a thread the
// injected library recorded as its own is gprof-run's, whatever its name.
TEST(OddEndings, ProfilerThreadsAreKnownByTidNeverByName) {
  constexpr uint32_t kNamedLikeUs = 30, kOurs = 31;
  SessionBuilder builder;
  builder.Thread(kNamedLikeUs, format::kWriterThreadName);
  builder.Thread(kOurs, "python3");
  builder.session().profiler_threads[kOurs] = ProfilerRole::kWriter;
  builder.Thread(kWaiter1, "waiter1");
  builder.Thread(kWaiter2, "waiter2");
  MutexSleep(&builder, kWaiter1, 1 * kMs, 200 * kMs, kNamedLikeUs);
  MutexSleep(&builder, kWaiter2, 2 * kMs, 220 * kMs, kWaiter1);
  Session session = builder.Build();
  EXPECT_FALSE(session.IsProfilerThread(kNamedLikeUs));
  EXPECT_TRUE(session.IsProfilerThread(kOurs));
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(diagnosis.profiler_cost.stalls.empty());
  EXPECT_EQ(diagnosis.profiler_cost.tids, std::vector<uint32_t>{kOurs});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].holder_tid, kNamedLikeUs);
}

// Case 9: a thread Python named is shown by that name, the native one beside it when it differs.
TEST(OddEndings, APythonThreadIsLabelledByItsPythonNameAndItsNativeOne) {
  SessionBuilder builder;
  builder.Thread(kWaiter1, "python3");
  builder.Thread(kWaiter2, "loader");
  builder.session().python.thread_names[kWaiter1] = "qprod";
  builder.session().python.thread_names[kWaiter2] = "loader";
  Session session = builder.Build();
  EXPECT_EQ(session.ThreadName(kWaiter1), "qprod");
  EXPECT_EQ(session.ThreadLabel(kWaiter1), "qprod (python3, 11)");
  EXPECT_EQ(session.ThreadLabel(kWaiter2), "loader (12)");
  EXPECT_EQ(session.ThreadLabel(kHolder), "holder (10)");
}

}  // namespace
}  // namespace gprof::collector

namespace gprof::test {
namespace {

using json = nlohmann::json;

struct RecordedRun {
  std::map<std::string, uint32_t> tid_of;  // the program's own thread names -> tids
  json report;
  std::string text;
  std::string dir;
};

// Runs `argv` under gprof-run; its facts and report.json.
bool RecordRun(const std::vector<std::string>& argv, const TempDir& dir, RecordedRun* run) {
  ProcessSpec spec;
  spec.argv = {GprofRunPath(), "-q", "-o", dir.Sub("session"), "--"};
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.timeout_s = 90;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.err;
  if (result.exit_code() != 0) return false;
  for (const Fact& fact : ParseFacts(result.out)) {
    if (fact.kind == "thread") run->tid_of[fact["name"]] = static_cast<uint32_t>(fact.Number("tid"));
  }
  run->dir = dir.Sub("session");
  run->text = ReadFile(dir.Sub("session/report.txt"));
  const std::string report = ReadFile(dir.Sub("session/report.json"));
  run->report = json::parse(report, nullptr, false);
  EXPECT_FALSE(run->report.is_discarded()) << report.size() << " bytes\n" << report.substr(0, 400);
  return !run->report.is_discarded();
}

// Nothing in the diagnosis names `tid` as a holder, a root or a link of a chain.
void ExpectNeverBlamed(const json& diagnosis, uint32_t tid, const std::string& text) {
  for (const json& cause : diagnosis["causes"]) {
    if (!cause["holder"].is_null()) EXPECT_NE(cause["holder"]["tid"], tid) << text;
    if (!cause["root"].is_null()) EXPECT_NE(cause["root"]["thread"]["tid"], tid) << text;
  }
  for (const json& stall : diagnosis["stalls"]) {
    for (const json& link : stall["chain"]) EXPECT_NE(link["thread"]["tid"], tid) << text;
  }
}

// No cause but the CPUs' (a loaded machine can keep the threads from a CPU: that is no invention).
void ExpectNoCauseButCpu(const json& diagnosis, const std::string& text) {
  for (const json& cause : diagnosis["causes"])
    EXPECT_EQ(cause["class"], "waiting for a CPU") << text;
}

// The stall of `tid` that lasted to the process's end: ended by the exit.
void ExpectEndedByExit(const json& diagnosis, uint32_t tid, const std::string& text) {
  bool found = false;
  for (const json& stall : diagnosis["stalls"]) {
    if (stall["thread"]["tid"] != tid || !stall["wait"].value("ended_by_exit", false)) continue;
    found = true;
    EXPECT_EQ(stall["wait"]["waker_tid"], 0u) << text;
  }
  EXPECT_TRUE(found) << "no wait of " << tid << " ended by the exit\n" << text;
}

// The mutex waiters' cause: held by "holder", rooted at it, and the exiting thread blamed nowhere.
void ExpectHolderBlamed(const RecordedRun& run, uint32_t exiter) {
  const json& diagnosis = run.report["diagnosis"];
  const uint32_t holder = run.tid_of.at("holder");
  ExpectNeverBlamed(diagnosis, exiter, run.text);
  bool found = false;
  for (const json& cause : diagnosis["causes"]) {
    if (cause["class"] != "user lock") continue;
    found = true;
    EXPECT_EQ(cause["holder"]["tid"], holder) << run.text;
    EXPECT_EQ(cause["root"]["thread"]["tid"], holder) << run.text;
  }
  EXPECT_TRUE(found) << run.text;
  for (const char* waiter : {"waiter1", "waiter2"})
    ExpectEndedByExit(diagnosis, run.tid_of.at(waiter), run.text);
}

class OddEndingsRun : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }
  TempDir dir_;
  RecordedRun run_;
};

TEST_F(OddEndingsRun, ExitFromMainWhileThreadsWaitOnAMutex) {
  ASSERT_TRUE(RecordRun({AppPath("odd_endings_app"), "exit-main"}, dir_, &run_));
  ExpectHolderBlamed(run_, run_.tid_of.at("main"));
}

TEST_F(OddEndingsRun, ExitGroupFromAnotherThreadWhileMainJoins) {
  ASSERT_TRUE(RecordRun({AppPath("odd_endings_app"), "exit-from-thread"}, dir_, &run_));
  ExpectHolderBlamed(run_, run_.tid_of.at("quitter"));
  ExpectEndedByExit(run_.report["diagnosis"], run_.tid_of.at("main"), run_.text);
}

TEST_F(OddEndingsRun, ExitWhileThreadsWaitOnAConditionVariable) {
  ASSERT_TRUE(RecordRun({AppPath("odd_endings_app"), "condvar-exit"}, dir_, &run_));
  const json& diagnosis = run_.report["diagnosis"];
  ExpectNeverBlamed(diagnosis, run_.tid_of.at("main"), run_.text);
  ExpectNoCauseButCpu(diagnosis, run_.text);
  for (const char* waiter : {"cwaiter1", "cwaiter2"})
    ExpectEndedByExit(diagnosis, run_.tid_of.at(waiter), run_.text);
}

TEST_F(OddEndingsRun, PythonShutdownWhileDaemonThreadsWait) {
  const std::string python = "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) FAIL() << python << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(RecordRun({python, SourceDir() + "/tests/apps/py_exit_daemons.py"}, dir_, &run_));
  const json& diagnosis = run_.report["diagnosis"];
  ExpectNeverBlamed(diagnosis, run_.tid_of.at("MainThread"), run_.text);
  for (const char* waiter : {"waiter1", "waiter2"})
    ExpectEndedByExit(diagnosis, run_.tid_of.at(waiter), run_.text);
}

TEST_F(OddEndingsRun, ACalmProgramStaysCalm) {
  ASSERT_TRUE(RecordRun({AppPath("odd_endings_app"), "calm"}, dir_, &run_));
  ExpectNoCauseButCpu(run_.report["diagnosis"], run_.text);
  for (const json& stall : run_.report["diagnosis"]["stalls"])
    EXPECT_FALSE(stall["wait"].value("ended_by_exit", false)) << run_.text;
}

// Case 7: the program's thread named "gprof-writer" holds the lock its waiters wait for: the
// report blames it as the program's, and counts no cost of gprof-run's.
TEST_F(OddEndingsRun, AProgramThreadNamedLikeTheWriterIsTheProgramsOwn) {
  ASSERT_TRUE(RecordRun({AppPath("odd_endings_app"), "named-writer"}, dir_, &run_));
  const json& diagnosis = run_.report["diagnosis"];
  const uint32_t named = run_.tid_of.at("gprof-writer");
  for (const json& thread : diagnosis["profiler_cost"]["threads"])
    EXPECT_NE(thread["thread"]["tid"], named) << run_.text;
  EXPECT_TRUE(diagnosis["profiler_cost"]["stalls"].empty()) << run_.text;
  bool held = false;
  for (const json& cause : diagnosis["causes"])
    held |= !cause["holder"].is_null() && cause["holder"]["tid"] == named;
  EXPECT_TRUE(held) << run_.text;
}

// Case 9: threads named in Python, short-lived, are named so in report.txt, report.json and the
// trace's thread tracks, with the interpreter's native name beside it.
TEST_F(OddEndingsRun, PythonThreadNamesEverywhereAThreadIsNamed) {
  const std::string python = "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) FAIL() << python << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(RecordRun({python, SourceDir() + "/tests/apps/py_thread_names.py"}, dir_, &run_));
  for (const char* name : {"qprod", "qcons"}) {
    const uint32_t tid = run_.tid_of.at(name);
    bool in_json = false;
    for (const json& thread : run_.report["session"]["threads"])
      in_json |= thread["tid"] == tid && thread["python_name"] == name;
    EXPECT_TRUE(in_json) << name << "\n" << run_.report["session"]["threads"].dump(1);
    EXPECT_NE(run_.text.find("\"" + std::string(name) + "\" (python3, " + std::to_string(tid) +
                             ")"),
              std::string::npos)
        << name << "\n"
        << run_.text;
    DecodedTrace trace = DecodeTraceFile(run_.dir + "/trace.perfetto-trace");
    bool in_trace = false;
    for (const DecodedTrack& track : trace.tracks)
      in_trace |= track.is_thread && track.tid == tid && track.thread_name.has_value() &&
                  track.thread_name->starts_with(name);
    EXPECT_TRUE(in_trace) << name;
  }
}

}  // namespace
}  // namespace gprof::test
