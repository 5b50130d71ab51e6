// Issue 38, item 1: `gprof-run dump` names the holder of the Python lock threads wait for
// (tests/apps/py_locks.py, py_dump.py): an RLock's owner from its owner field, a Lock's holder
// inferred from the one thread inside `with` on it (and marked inferred), why a Lock taken by
// acquire() has no holder named, and a Condition's waiter waiting to be notified. Each case on
// Debian's CPython and pyenv's 3.9 to 3.13 where installed. And the CUDA driver's lock, whose
// holder is inferred too (the fake runtime, tests/apps/dump_cuda_app). Reads /proc only: no BPF.
#include <stdlib.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/dump_support.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

// /proc/PID/task/TID/syscall, "" when unreadable.
std::string SyscallLine(pid_t pid, int tid) {
  return ReadFile("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/syscall");
}

// Waits (up to 30 s) until each of `waiters` sleeps in a futex and each of `sleepers` in some
// system call, all of them unmoved over 200 ms: where the program gets stuck, whatever a dump
// says of it. False when they never do.
bool Settled(pid_t pid, const std::vector<int>& waiters, const std::vector<int>& sleepers) {
  auto lines = [&] {
    std::vector<std::string> read;
    for (int tid : waiters) read.push_back(SyscallLine(pid, tid));
    for (int tid : sleepers) read.push_back(SyscallLine(pid, tid));
    return read;
  };
  for (int attempt = 0; attempt < 150; ++attempt) {
    std::vector<std::string> before = lines();
    usleep(200'000);
    bool stuck = before == lines();
    for (size_t i = 0; i < before.size(); ++i) {
      const std::string& line = before[i];
      stuck = stuck && !line.empty() && isdigit(static_cast<unsigned char>(line[0])) &&
              (i >= waiters.size() || line.starts_with("202 "));
    }
    if (stuck) return true;
  }
  return false;
}

std::string PyLocks() { return SourceDir() + "/tests/apps/py_locks.py"; }

// The line of tests/apps/py_locks.py that holds `text`, as "py_locks.py:N".
std::string PyLocksLine(const std::string& text) {
  std::istringstream lines(ReadFile(PyLocks()));
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number)
    if (line.find(text) != std::string::npos) return "py_locks.py:" + std::to_string(number);
  return "not in py_locks.py: " + text;
}

// An RLock taken `times` times by a thread asleep in time.sleep, two threads waiting for it (one
// in `with`, one in acquire()): one group, its holder named from the RLock's owner field (not
// inferred) with the times it took it, chained to its sleep; each waiter's Python line.
void ExpectRlockOwnerNamed(int times) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    StuckProgram program(python, {PyLocks(), "rlock", std::to_string(times)});
    program.WaitReady();
    int holder = program.Printed("holder");
    std::vector<int> waiters = program.AllPrinted("waiter");
    ASSERT_GT(holder, 0);
    ASSERT_EQ(waiters.size(), 2u);
    ASSERT_TRUE(Settled(program.pid(), waiters, {holder}));
    ProcessResult dump = RunGprof({"dump", "-p", std::to_string(program.pid())});
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    std::string group = LineWith(dump.out, "2 threads in the threading.RLock at ");
    EXPECT_NE(group.find("held by " + std::to_string(holder) + " (python"), std::string::npos)
        << dump.out;
    EXPECT_NE(group.find(") (from the RLock's owner field; it has taken it " +
                         std::to_string(times) + (times == 1 ? " time)" : " times)")),
              std::string::npos)
        << dump.out;
    EXPECT_EQ(group.find("inferred"), std::string::npos) << group;
    std::string chain = LineWith(dump.out, "threads (" + std::to_string(waiters.front()));
    EXPECT_NE(chain.find("-> " + std::to_string(holder) + " (python"), std::string::npos)
        << dump.out;
    EXPECT_NE(chain.find("(the root)"), std::string::npos) << chain;
    std::vector<std::string> frames = PythonFrames(ThreadSection(dump.out, holder));
    EXPECT_LT(FrameIndex(frames, PyLocksLine("time.sleep(3600)") + " hold_rlock"), frames.size())
        << dump.out;
    for (int waiter : waiters) {
      frames = PythonFrames(ThreadSection(dump.out, waiter));
      ASSERT_FALSE(frames.empty()) << waiter << "\n" << dump.out;
      bool waits = frames[0].find(PyLocksLine("with lock:  # the waiter's line") + " wait_with") !=
                       std::string::npos ||
                   frames[0].find(PyLocksLine("lock.acquire(blocking=True)") + " wait_acquire") !=
                       std::string::npos;
      EXPECT_TRUE(waits) << frames[0] << "\n" << dump.out;
    }
  }
}

TEST(DumpPythonLocksTest, NamesTheOwnerOfAnRlockTwoThreadsWaitFor) { ExpectRlockOwnerNamed(1); }

TEST(DumpPythonLocksTest, SaysHowManyTimesTheOwnerTookAnRlock) { ExpectRlockOwnerNamed(2); }

// A Lock held inside `with lock:` by a thread in a long C call (below the `with`'s frame), a
// thread and the main thread waiting in `with lock:`: the holder is named, marked inferred, in
// the text and the JSON.
TEST(DumpPythonLocksTest, InfersTheHolderOfALockFromTheWithBlockItIsIn) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    TempDir dir;
    StuckProgram program(python, {PyLocks(), "with"});
    program.WaitReady();
    int holder = program.Printed("holder");
    std::vector<int> waiters = program.AllPrinted("waiter");
    ASSERT_GT(holder, 0);
    ASSERT_EQ(waiters.size(), 2u);
    ASSERT_TRUE(Settled(program.pid(), waiters, {holder}));
    ProcessResult dump =
        RunGprof({"dump", "-p", std::to_string(program.pid()), "--json", dir.Sub("dump.json")});
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    std::string group = LineWith(dump.out, "2 threads in the threading.Lock at ");
    EXPECT_NE(group.find("held by " + std::to_string(holder) + " (python"), std::string::npos)
        << dump.out;
    EXPECT_NE(group.find(") (inferred: the one thread inside `with` on it"), std::string::npos)
        << dump.out;
    std::vector<std::string> frames = PythonFrames(ThreadSection(dump.out, holder));
    EXPECT_LT(FrameIndex(frames, PyLocksLine("  sleep_in_c()") + " hold_with"), frames.size())
        << dump.out;
    nlohmann::json json = nlohmann::json::parse(ReadFile(dir.Sub("dump.json")), nullptr, false);
    ASSERT_FALSE(json.is_discarded());
    size_t checked = 0;
    for (const nlohmann::json& thread : json["threads"]) {
      int tid = thread["tid"];
      if (tid != waiters[0] && tid != waiters[1]) continue;
      ++checked;
      EXPECT_EQ(thread["lock"], "the threading.Lock") << thread.dump(2);
      if (!thread["holder"].is_object()) {
        ADD_FAILURE() << "no holder: " << thread.dump(2);
        continue;
      }
      EXPECT_EQ(thread["holder"]["id"], holder) << thread.dump(2);
      EXPECT_EQ(thread["holder"]["inferred"], true) << thread.dump(2);
    }
    EXPECT_EQ(checked, 2u);
  }
}

// A Lock taken by acquire() (no `with`) by a thread asleep, a thread waiting for it: no holder is
// named, and the text says why.
TEST(DumpPythonLocksTest, SaysWhyTheHolderOfALockTakenByAcquireIsUnknown) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    StuckProgram program(python, {PyLocks(), "acquire"});
    program.WaitReady();
    int holder = program.Printed("holder");
    std::vector<int> waiters = program.AllPrinted("waiter");
    ASSERT_GT(holder, 0);
    ASSERT_EQ(waiters.size(), 1u);
    ASSERT_TRUE(Settled(program.pid(), waiters, {holder}));
    ProcessResult dump = RunGprof({"dump", "-p", std::to_string(program.pid())});
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    std::string group = LineWith(dump.out, "1 thread in the threading.Lock at ");
    EXPECT_NE(group.find("(holder unknown: a threading.Lock keeps no owner, and no thread is "
                         "inside `with` on it"),
              std::string::npos)
        << dump.out;
    EXPECT_EQ(dump.out.find("held by"), std::string::npos) << dump.out;
  }
}

// A thread in queue.get() on an empty queue sleeps in Condition.wait: it waits for the queue's
// condition, to be notified; no holder.
TEST(DumpPythonLocksTest, SaysAThreadInQueueGetWaitsToBeNotified) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    StuckProgram program(python, {SourceDir() + "/tests/apps/py_dump.py", "queue"});
    program.WaitReady();
    int getter = program.Printed("getter");
    ASSERT_GT(getter, 0);
    ASSERT_TRUE(Settled(program.pid(), {getter}, {}));
    ProcessResult dump = RunGprof({"dump", "-p", std::to_string(program.pid())});
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    std::string group = LineWith(dump.out, "1 thread in the threading.Condition at ");
    EXPECT_NE(group.find("(holder unknown: it waits to be notified (Condition.wait, called from "),
              std::string::npos)
        << dump.out;
    EXPECT_NE(group.find(": " + std::to_string(getter)), std::string::npos) << group;
  }
}

// On the fake CUDA runtime with a driver lock that keeps no owner (a semaphore, as a lock of the
// real libcuda shows none gprof-run can read): a thread spins in cudaDeviceSynchronize holding it,
// a launch waits for it. The launch waits for the CUDA driver's lock, and its holder is inferred:
// the one thread working inside the driver.
TEST(DumpPythonLocksTest, InfersTheHolderOfTheCudaDriversLockFromTheThreadWorkingInIt) {
  setenv("FAKE_CUDA_OWNERLESS_DRIVER_LOCK", "1", 1);
  StuckProgram program(AppPath("dump_cuda_app"), {});
  unsetenv("FAKE_CUDA_OWNERLESS_DRIVER_LOCK");
  program.WaitReady();
  int sync = program.Printed("sync"), launcher = program.Printed("launcher");
  ASSERT_GT(sync, 0);
  ASSERT_GT(launcher, 0);
  ASSERT_TRUE(Settled(program.pid(), {launcher}, {}));
  ProcessResult dump = RunGprof({"dump", "-p", std::to_string(program.pid())});
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string group = LineWith(dump.out, "1 thread in the CUDA driver's lock at ");
  EXPECT_NE(group.find("held by " + std::to_string(sync) +
                       " (dump_cuda_app) (inferred: the one thread working inside the CUDA "
                       "driver"),
            std::string::npos)
      << dump.out;
  EXPECT_NE(group.find(": " + std::to_string(launcher)), std::string::npos) << group;
  std::vector<std::string> frames = NativeFrames(ThreadSection(dump.out, sync));
  EXPECT_LT(FrameIndex(frames, "cudaDeviceSynchronize"), frames.size()) << dump.out;
}

}  // namespace
}  // namespace gprof::test
