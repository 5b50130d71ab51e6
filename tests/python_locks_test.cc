// Issue 35, items 5 and 7: the GIL and Python locks, right; threads named with their process.
// gprof-run on programs of tests/apps that say what they measured themselves (a logging program
// whose GIL waits are long, a threading.Lock held across a sleep, a queue fed slowly, a
// multiprocessing Pool), and hand-built sessions for the owner hints no program makes on demand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/analysis_sessions.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

using nlohmann::json;

const char kSystemPython[] = "/usr/bin/python3";

class PythonLocks : public ::testing::Test {
 protected:
  void SetUp() override {
    GPROF_NEED_BPF();
    if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  }

  // gprof-run on tests/apps/`script`; false (with a failure) when anything fails.
  bool Run(const std::string& script) {
    ProcessSpec spec;
    spec.argv = {GprofRunPath(), "-q", "-o", dir_.Sub("session"), "--",
                 kSystemPython, SourceDir() + "/tests/apps/" + script};
    spec.timeout_s = 180;
    ProcessResult run = RunProcess(spec);
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    if (run.exit_code() != 0) return false;
    facts_ = ParseFacts(run.out);
    report_ = json::parse(ReadFile(dir_.Sub("session/report.json")), nullptr, false);
    EXPECT_FALSE(report_.is_discarded());
    text_ = ReadFile(dir_.Sub("session/report.txt"));
    return !report_.is_discarded() && !facts_.empty();
  }

  std::vector<Fact> FactsOf(const std::string& kind) const {
    std::vector<Fact> found;
    for (const Fact& fact : facts_) {
      if (fact.kind == kind) found.push_back(fact);
    }
    return found;
  }

  TempDir dir_;
  std::vector<Fact> facts_;
  json report_;
  std::string text_;
};

// Four threads log through one StreamHandler while the GIL passes between them, one of them
// formatting a record in a long C call that keeps the GIL. The ticker's wait for the GIL is one
// wait as long as the program measured it (not pieces of 5 ms), the handler's lock is named as
// the handler's, and a GIL that passes around is never a deadlock.
TEST_F(PythonLocks, LoggingThreadsWaitForTheGilWhole) {
  ASSERT_TRUE(Run("py_gil_logging.py"));
  uint32_t ticker = 0;
  for (const Fact& thread : FactsOf("thread"))
    if (thread["role"] == "ticker") ticker = static_cast<uint32_t>(thread.Number("tid"));
  ASSERT_NE(ticker, 0u);
  uint64_t measured = 0;
  for (const Fact& span : FactsOf("span")) {
    if (span["what"] == "late" && span.Number("tid") == ticker)
      measured = std::max(measured, span.Number("end_ns") - span.Number("start_ns"));
  }
  ASSERT_GE(measured, 20'000'000u) << "the ticker never waited long for the GIL";
  // From its ask to its next run, as the program measures it: the stall's start to its end.
  uint64_t longest = 0;
  for (const json& stall : report_["diagnosis"]["stalls"]) {
    EXPECT_TRUE(stall["deadlock_with"].is_null()) << stall.dump();
    if (stall["thread"]["tid"] != ticker || stall["class"] != "Python GIL") continue;
    longest = std::max(longest, stall["wait"]["end_ns"].get<uint64_t>() -
                                    stall["wait"]["start_ns"].get<uint64_t>());
  }
  // Within 10%: the program times its lateness from when its sleep should have ended, not from
  // the timer's expiry, and on a loaded machine the two drift apart by some milliseconds. Pieces
  // of the interpreter's 5 ms timed waits would be a tenth of it.
  EXPECT_NEAR(static_cast<double>(longest), static_cast<double>(measured), measured * 0.10)
      << text_;
  EXPECT_EQ(text_.find("DEADLOCK"), std::string::npos) << text_;
  EXPECT_NE(text_.find("[user lock] logging.Handler.lock in logging/__init__.py:"),
            std::string::npos)
      << text_;
}

// A threading.Lock held across time.sleep, wanted by two threads: named as the Lock at the
// waiters' line. A queue.Queue the main thread waits on for a slow producer: named as its
// not_empty condition at Queue.get's line. Neither is "futex 0x... on the heap".
TEST_F(PythonLocks, LockAndQueueNamedByTheirFrames) {
  ASSERT_TRUE(Run("py_lock_queue.py"));
  std::string lock, not_empty;
  for (const Fact& line : FactsOf("line")) {
    const std::string where = line["file"] + ":" + line["line"];
    if (line["role"] == "lock") lock = "threading.Lock in " + where + " (acquire)";
    if (line["role"] == "not_empty") not_empty = "queue.Queue.not_empty in " + where;
  }
  ASSERT_FALSE(lock.empty());
  ASSERT_FALSE(not_empty.empty());
  EXPECT_NE(text_.find("[user lock] " + lock), std::string::npos) << text_;
  EXPECT_NE(text_.find("on " + not_empty + " [condition variable]"), std::string::npos) << text_;
  bool named = false;
  for (const json& cause : report_["diagnosis"]["causes"]) named |= cause["identity"] == lock;
  EXPECT_TRUE(named) << "report.json's cause identity";
}

// A Pool of two forked workers: every thread shown with its process, the workers by their role.
TEST_F(PythonLocks, ThreadsNamedWithTheirProcess) {
  ASSERT_TRUE(Run("py_pool_labels.py"));
  std::set<uint32_t> workers;
  for (const Fact& worker : FactsOf("worker")) workers.insert(static_cast<uint32_t>(worker.Number("pid")));
  ASSERT_EQ(workers.size(), 2u);
  std::set<std::string> roles;
  for (const json& thread : report_["session"]["threads"]) {
    const uint32_t pid = thread["pid"];
    const std::string label = thread["label"];
    EXPECT_NE(label.find(" of "), std::string::npos) << label;
    if (!workers.contains(pid)) continue;
    const size_t of = label.find(" of Pool worker ");
    ASSERT_NE(of, std::string::npos) << label;
    roles.insert(label.substr(of + 4, 13));  // "Pool worker 0"
  }
  EXPECT_EQ(roles, (std::set<std::string>{"Pool worker 0", "Pool worker 1"}));
  // report.txt says it the same way: a worker's main thread, of its role.
  EXPECT_NE(text_.find("of Pool worker "), std::string::npos) << text_;
}

// One process: no process after the thread.
TEST_F(PythonLocks, OneProcessThreadsAsBefore) {
  ASSERT_TRUE(Run("py_lock_queue.py"));
  for (const json& thread : report_["session"]["threads"])
    EXPECT_EQ(thread["label"].get<std::string>().find(" of "), std::string::npos) << thread.dump();
}

}  // namespace
}  // namespace gprof::test

namespace gprof::collector {
namespace {

// Hand-built: a thread waits for the process's mmap_lock, whose owner hint names thread 12.
Session KernelLockWithHint(bool owner_asleep_in_futex) {
  SessionBuilder b;
  b.Thread(11, "waiter");
  b.Thread(12, "named");
  b.Thread(13, "other");
  AddMmapLockWait(&b, 11, 10 * kMs, 40 * kMs, 12);
  b.Sleep(11, 10 * kMs + 10000, 40 * kMs, 40 * kMs + 10000, 0);
  if (owner_asleep_in_futex)  // from before the wait, on a condition: it holds no kernel lock
    b.FutexSleep(12, kCondvar, 5 * kMs, 50 * kMs, 50 * kMs + 10000, 13);
  return b.Build();
}

const Stall& StallOf(const Analysis& analysis, uint32_t tid) {
  for (const Stall& stall : analysis.stalls)
    if (stall.tid == tid) return stall;
  ADD_FAILURE() << "no stall of " << tid;
  return analysis.stalls.front();
}

// The named owner was asleep in a futex wait when the wait began: the hint is stale, no holder.
TEST(KernelLockOwnerHint, StaleHintNamesNoHolder) {
  Session session = KernelLockWithHint(true);
  Analysis analysis = Analyze(session, AnalysisOptions{});
  const Stall& stall = StallOf(analysis, 11);
  EXPECT_TRUE(stall.wait.owner_hint_stale);
  EXPECT_TRUE(stall.chain.empty()) << "a holder named: " << stall.chain.front().tid;
  EXPECT_EQ(LockOwnerText(session, stall.wait), "owner unknown (hint stale)");
}

// The same hint of a thread that ran meanwhile: its holder.
TEST(KernelLockOwnerHint, LiveHintNamesTheHolder) {
  Session session = KernelLockWithHint(false);
  Analysis analysis = Analyze(session, AnalysisOptions{});
  const Stall& stall = StallOf(analysis, 11);
  EXPECT_FALSE(stall.wait.owner_hint_stale);
  ASSERT_FALSE(stall.chain.empty());
  EXPECT_EQ(stall.chain.front().tid, 12u);
  EXPECT_NE(LockOwnerText(session, stall.wait).find("held by"), std::string::npos);
}

// Two threads asleep on one word, each reading the other as its holder (a word whose holder
// field is another's, as the GIL's condition reads its mutex's): the hint of a thread that was
// itself waiting on the word is stale, and the hand-over that resolves itself is no deadlock.
TEST(FutexOwnerHint, WaitersOnOneWordAreNoDeadlock) {
  SessionBuilder b;
  b.Thread(11, "first");
  b.Thread(12, "second");
  LockSleep(&b, 12, kLock, 5 * kMs, 35 * kMs, 35 * kMs + 10000, 11, 11);
  LockSleep(&b, 11, kLock, 10 * kMs, 0, 30 * kMs, 0, 12);  // timed out
  Session session = b.Build();
  Analysis analysis = Analyze(session, AnalysisOptions{});
  EXPECT_EQ(DeadlocksIn(session, analysis), "");
  EXPECT_TRUE(StallOf(analysis, 11).chain.empty());
}

}  // namespace
}  // namespace gprof::collector
