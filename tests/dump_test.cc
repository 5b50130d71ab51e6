// Issue 38, item 1's first slice and item 4: `gprof-run dump -p PID` on tests/apps/dump_app's
// stuck threads (a deadlock, a holder asleep, 500 threads on one condition variable), and its
// one-line refusals of what cannot be dumped. Reads /proc only: no BPF; the kernel stacks and
// another user's process need root (skipped without it, failed under GPROF_REQUIRE_BPF=1).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/dump_support.h"
#include "tests/test_support.h"

namespace gprof::test {
namespace {

#define GPROF_NEED_ROOT()                                 \
  do {                                                    \
    if (geteuid() != 0) GPROF_SKIP_OR_FAIL("needs root"); \
  } while (0)

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

TEST(DumpTest, NamesBothThreadsOfADeadlock) {
  StuckProgram program({"deadlock"});
  program.WaitReady();
  int first = program.Printed("first"), second = program.Printed("second");
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ProcessResult dump = DumpUntil(program.pid(), "DEADLOCK");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string deadlock = LineWith(dump.out, "DEADLOCK");
  ASSERT_FALSE(deadlock.empty()) << dump.out;
  EXPECT_NE(deadlock.find(std::to_string(first) + " (dump_app) waits"), std::string::npos)
      << deadlock;
  EXPECT_NE(deadlock.find(std::to_string(second) + " (dump_app) waits"), std::string::npos)
      << deadlock;
  EXPECT_NE(deadlock.find("held by " + std::to_string(first) + " (from the mutex's owner field)"),
            std::string::npos)
      << deadlock;
  EXPECT_NE(deadlock.find("held by " + std::to_string(second) + " (from the mutex's owner field)"),
            std::string::npos)
      << deadlock;
}

TEST(DumpTest, NamesEveryMemberOfADeadlockOfThree) {
  StuckProgram program({"ring", "3"});
  program.WaitReady();
  std::vector<int> members = program.AllPrinted("member");
  ASSERT_EQ(members.size(), 3u);
  ProcessResult dump = DumpUntil(program.pid(), "DEADLOCK");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string deadlock = LineWith(dump.out, "DEADLOCK");
  EXPECT_NE(deadlock.find("DEADLOCK: 3 threads wait for each other"), std::string::npos)
      << deadlock;
  for (int member : members) {
    EXPECT_NE(deadlock.find(std::to_string(member) + " (dump_app) waits"), std::string::npos)
        << member << ": " << deadlock;
    EXPECT_NE(deadlock.find("held by " + std::to_string(member) + " (from the mutex's"),
              std::string::npos)
        << member << ": " << deadlock;
  }
}

// Priority-inheriting mutexes: the kernel refuses the lock that would close the cycle (glibc then
// parks that thread for good on a futex of its own), so two of the three wait in FUTEX_LOCK_PI,
// their holders named by the futex word.
TEST(DumpTest, NamesTheHoldersOfPriorityInheritingMutexes) {
  StuckProgram program({"ring", "3", "pi"});
  program.WaitReady();
  std::vector<int> members = program.AllPrinted("member");
  ASSERT_EQ(members.size(), 3u);
  const std::string kFromWord = " (dump_app) (from the PI futex word's owner bits)";
  ProcessResult dump = DumpUntil(
      program.pid(), [&](const std::string& out) { return Occurrences(out, kFromWord) == 2; });
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  size_t named = 0;
  for (int member : members)
    named += Occurrences(dump.out, "held by " + std::to_string(member) + kFromWord);
  EXPECT_EQ(named, 2u) << dump.out;
  EXPECT_EQ(Occurrences(dump.out, "FUTEX_LOCK_PI_PRIVATE"), 4u) << dump.out;  // chain + groups
}

TEST(DumpTest, NamesTheHolderOfAMutexAndThatItSleeps) {
  StuckProgram program({"sleeper"});
  program.WaitReady();
  int holder = program.Printed("holder"), waiter = program.Printed("waiter");
  ASSERT_GT(holder, 0);
  ASSERT_GT(waiter, 0);
  ProcessResult dump = DumpUntil(program.pid(), "(the root)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string chain = LineWith(dump.out, "  " + std::to_string(waiter) + " (dump_app) in futex");
  ASSERT_FALSE(chain.empty()) << dump.out;
  EXPECT_NE(chain.find("held by " + std::to_string(holder) + " (from the mutex's owner field) -> " +
                       std::to_string(holder) + " (dump_app) in clock_nanosleep (the root)"),
            std::string::npos)
      << chain;
  EXPECT_EQ(dump.out.find("DEADLOCK"), std::string::npos) << dump.out;
}

TEST(DumpTest, NamesTheProcessHoldingAFileLock) {
  TempDir dir;
  StuckProgram program({"flock", dir.Sub("locked")});
  program.WaitReady();
  int locker = program.Printed("locker"), waiter = program.Printed("lockwaiter");
  ASSERT_GT(locker, 0);
  ASSERT_GT(waiter, 0);
  ProcessResult dump = DumpUntil(program.pid(), "(from /proc/locks)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string chain = LineWith(dump.out, "  " + std::to_string(waiter) + " (dump_app) in flock");
  EXPECT_NE(chain.find("(" + dir.Sub("locked") + ") held by process " + std::to_string(locker) +
                       " (from /proc/locks) -> " + std::to_string(locker) + " (dump_app) in pause"),
            std::string::npos)
      << dump.out;
}

TEST(DumpTest, GroupsFiveHundredThreadsInAFewLines) {
  StuckProgram program({"threads", "500"});
  program.WaitReady();
  ProcessResult dump = DumpUntil(program.pid(), "500 threads in futex");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  EXPECT_NE(dump.out.find("500 threads in futex"), std::string::npos) << dump.out;
  EXPECT_LT(std::count(dump.out.begin(), dump.out.end(), '\n'), 30) << dump.out;
  // Each blocked in the kernel: none stopped; the group's first shows where it waits.
  EXPECT_NE(dump.out.find("; stopped 0 us"), std::string::npos) << dump.out;
  std::vector<std::string> frames = NativeFrames(dump.out.substr(dump.out.find("500 threads in")));
  EXPECT_LT(FrameIndex(frames, "pthread_cond_wait"), FrameIndex(frames, "WaitForSignal"))
      << dump.out;
  EXPECT_LT(FrameIndex(frames, "WaitForSignal"), frames.size()) << dump.out;
}

TEST(DumpTest, ShowsTheKernelStackOfAFutexWait) {
  GPROF_NEED_ROOT();
  StuckProgram program({"deadlock"});
  program.WaitReady();
  int first = program.Printed("first");
  ProcessResult dump = DumpUntil(program.pid(), "DEADLOCK");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  size_t thread = dump.out.find("    " + std::to_string(first) + " (dump_app)");
  ASSERT_NE(thread, std::string::npos) << dump.out;
  std::string stack = LineWith(dump.out.substr(thread), "kernel stack");
  EXPECT_NE(stack.find("kernel stack: futex"), std::string::npos) << stack;
}

// Both threads of a deadlock, blocked in the kernel: their native stacks, with symbols and source
// lines, read from the stack pointers /proc gives, without stopping either.
TEST(DumpTest, ShowsBothDeadlockedThreadsNativeStacksWithoutStoppingThem) {
  StuckProgram program({"deadlock"});
  program.WaitReady();
  int first = program.Printed("first"), second = program.Printed("second");
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ProcessResult dump = DumpUntil(program.pid(), "DEADLOCK");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  EXPECT_NE(dump.out.find("; stopped 0 us"), std::string::npos) << dump.out;
  for (auto [tid, body] :
       {std::pair{first, "TakeFirstThenSecond"}, {second, "TakeSecondThenFirst"}}) {
    std::string section = ThreadSection(dump.out, tid);
    EXPECT_NE(section.find("native stack (read without stopping it):"), std::string::npos)
        << section << dump.out;
    std::vector<std::string> frames = NativeFrames(section);
    size_t lock = FrameIndex(frames, "pthread_mutex_lock");
    size_t caller = FrameIndex(frames, body);
    ASSERT_LT(caller, frames.size()) << section;
    EXPECT_LT(lock, caller) << section;
    EXPECT_NE(frames[caller].find("at dump_app.cc:"), std::string::npos) << section;
  }
}

// The holder that sleeps: where it sleeps (nanosleep, called from its own function), and the
// waiter's stack in pthread_mutex_lock.
TEST(DumpTest, ShowsWhereAMutexHolderSleeps) {
  StuckProgram program({"sleeper"});
  program.WaitReady();
  int holder = program.Printed("holder"), waiter = program.Printed("waiter");
  ProcessResult dump = DumpUntil(program.pid(), "(the root)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::vector<std::string> held = NativeFrames(ThreadSection(dump.out, holder));
  EXPECT_LT(FrameIndex(held, "nanosleep"), FrameIndex(held, "HoldWhileSleeping")) << dump.out;
  EXPECT_LT(FrameIndex(held, "HoldWhileSleeping"), held.size()) << dump.out;
  std::vector<std::string> waiting = NativeFrames(ThreadSection(dump.out, waiter));
  EXPECT_LT(FrameIndex(waiting, "pthread_mutex_lock"), FrameIndex(waiting, "WaitForHolder"))
      << dump.out;
  EXPECT_LT(FrameIndex(waiting, "WaitForHolder"), waiting.size()) << dump.out;
}

// A process whose maps run past 64 KiB (3000 regions before libc's lines): libc's frames are
// named all the same.
TEST(DumpTest, NamesFramesOfAProcessWithLongMaps) {
  StuckProgram program({"sleeper-many-maps"});
  program.WaitReady();
  int holder = program.Printed("holder");
  ProcessResult dump = DumpUntil(program.pid(), "(the root)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::vector<std::string> held = NativeFrames(ThreadSection(dump.out, holder));
  EXPECT_LT(FrameIndex(held, "nanosleep"), FrameIndex(held, "HoldWhileSleeping")) << dump.out;
  EXPECT_LT(FrameIndex(held, "HoldWhileSleeping"), held.size()) << dump.out;
}

// A thread always on a CPU: /proc gives no registers of a running thread, so it is stopped, only
// it and only while its registers and stack are copied; the time is said, and it runs on after,
// no longer traced.
TEST(DumpTest, StopsOnlyARunningThreadBrieflyForItsStack) {
  StuckProgram program({"spin"});
  program.WaitReady();
  int spinner = program.Printed("spinner");
  ASSERT_GT(spinner, 0);
  ProcessResult dump = DumpUntil(program.pid(), "SpinOnCpu");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string section = ThreadSection(dump.out, spinner);
  EXPECT_NE(section.find("native stack (stopped "), std::string::npos) << dump.out;
  std::vector<std::string> frames = NativeFrames(section);
  ASSERT_FALSE(frames.empty()) << dump.out;
  EXPECT_NE(frames[0].find("SpinOnCpu"), std::string::npos) << section;
  EXPECT_LT(FrameIndex(frames, "Spin+"), frames.size()) << section;
  EXPECT_NE(dump.out.find(" us in all: 1 thread stopped briefly"), std::string::npos) << dump.out;
  // The main thread, in pause, was read without a stop.
  EXPECT_NE(ThreadSection(dump.out, program.pid()).find("read without stopping it"),
            std::string::npos)
      << dump.out;
  std::string status = ReadFile("/proc/" + std::to_string(program.pid()) + "/task/" +
                                std::to_string(spinner) + "/status");
  EXPECT_NE(status.find("TracerPid:\t0\n"), std::string::npos) << status;
  std::string stat = ReadFile("/proc/" + std::to_string(program.pid()) + "/task/" +
                              std::to_string(spinner) + "/stat");
  EXPECT_EQ(stat.find(") t "), std::string::npos) << stat;
  EXPECT_EQ(stat.find(") T "), std::string::npos) << stat;
}

// A frame addressed through rbp (a variable-length array) under the sleeping call: its caller
// cannot be found from the stack pointer alone, so that thread is stopped to read rbp, and its
// stack goes on past that frame to the thread's function.
TEST(DumpTest, StopsAThreadWhoseStackNeedsTheFramePointer) {
  StuckProgram program({"vla"});
  program.WaitReady();
  int thread = program.Printed("vla");
  ASSERT_GT(thread, 0);
  ProcessResult dump = DumpUntil(program.pid(), "SleepUnderVariableFrame");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string section = ThreadSection(dump.out, thread);
  EXPECT_NE(section.find("native stack (stopped "), std::string::npos) << dump.out;
  std::vector<std::string> frames = NativeFrames(section);
  size_t variable = FrameIndex(frames, "SleepUnderVariableFrame");
  ASSERT_LT(variable, frames.size()) << section;
  EXPECT_LT(variable, FrameIndex(frames, "::VariableFrame+")) << section;
  EXPECT_LT(FrameIndex(frames, "::VariableFrame+"), frames.size()) << section;
}

// A rwlock held by a writer asleep: a reader and a writer wait on its two futex words; both are
// chained to the writer, named by the rwlock's __cur_writer.
TEST(DumpTest, NamesTheWriterHoldingARwlock) {
  StuckProgram program({"rwlock"});
  program.WaitReady();
  int writer = program.Printed("writer"), reader = program.Printed("reader"),
      next = program.Printed("nextwriter");
  ASSERT_GT(writer, 0);
  ASSERT_GT(reader, 0);
  ASSERT_GT(next, 0);
  const std::string kHeld = "held by " + std::to_string(writer) +
                            " (dump_app) (from the rwlock's "
                            "writer field)";
  ProcessResult dump = DumpUntil(
      program.pid(), [&](const std::string& out) { return Occurrences(out, kHeld) == 2; });
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  EXPECT_EQ(Occurrences(dump.out, kHeld), 2u) << dump.out;
  std::string chain = LineWith(dump.out, "(from the rwlock's writer field) -> ");
  EXPECT_NE(chain.find(std::to_string(std::min(reader, next)) + "-" +
                       std::to_string(std::max(reader, next))),
            std::string::npos)
      << chain;
  EXPECT_NE(
      chain.find("-> " + std::to_string(writer) + " (dump_app) in clock_nanosleep (the root)"),
      std::string::npos)
      << chain;
}

// On the fake CUDA runtime, a GPU that never finishes: the thread in cudaDeviceSynchronize holds
// the driver lock while it waits, a launch on another thread waits for that lock; the launcher is
// chained to the synchronizing thread, whose native stack names the CUDA call and its caller.
TEST(DumpTest, ShowsAThreadStuckInCudaDeviceSynchronizeAndTheLaunchBehindIt) {
  StuckProgram program(AppPath("dump_cuda_app"), {});
  program.WaitReady();
  int sync = program.Printed("sync"), launcher = program.Printed("launcher");
  ASSERT_GT(sync, 0);
  ASSERT_GT(launcher, 0);
  ProcessResult dump = DumpUntil(program.pid(), "(the root)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string chain = LineWith(dump.out, "  " + std::to_string(launcher) + " (dump_cuda_app) in");
  EXPECT_NE(chain.find("held by " + std::to_string(sync) + " (from the mutex's owner field) -> " +
                       std::to_string(sync) + " (dump_cuda_app)"),
            std::string::npos)
      << dump.out;
  std::vector<std::string> frames = NativeFrames(ThreadSection(dump.out, sync));
  size_t call = FrameIndex(frames, "cudaDeviceSynchronize");
  ASSERT_LT(call, frames.size()) << dump.out;
  EXPECT_LT(call, FrameIndex(frames, "::Synchronize+0x")) << dump.out;
  std::vector<std::string> launching = NativeFrames(ThreadSection(dump.out, launcher));
  EXPECT_LT(FrameIndex(launching, "cudaLaunchKernel"), launching.size()) << dump.out;
}

// The line of tests/apps/py_dump.py that holds `text`, as "py_dump.py:N".
std::string PyDumpLine(const std::string& text) {
  std::istringstream lines(ReadFile(SourceDir() + "/tests/apps/py_dump.py"));
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number)
    if (line.find(text) != std::string::npos) return "py_dump.py:" + std::to_string(number);
  return "not in py_dump.py: " + text;
}

// Python threads that want the GIL while the main thread keeps it inside a C call that sleeps:
// they are grouped as waiting for the GIL, whose holder is named from the GIL's own fields and
// chained to where it sleeps; each thread's Python stack says its line.
TEST(DumpTest, NamesTheHolderOfTheGilThatPythonThreadsWaitFor) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    StuckProgram program(python, {SourceDir() + "/tests/apps/py_dump.py", "gil", "3"});
    program.WaitReady();
    int holder = program.Printed("holder");
    std::vector<int> spinners = program.AllPrinted("spinner");
    ASSERT_GT(holder, 0);
    ASSERT_EQ(spinners.size(), 3u);
    const std::string kHeld = "held by " + std::to_string(holder) + " (python";
    // Until the main thread is in its C call and the three wait (it too waits for the GIL at
    // first, to print).
    ProcessResult dump = DumpUntil(program.pid(), [&](const std::string& out) {
      return LineWith(out, "3 threads in the GIL at ").find(kHeld) != std::string::npos;
    });
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    std::string group = LineWith(dump.out, "3 threads in the GIL at ");
    EXPECT_NE(group.find(kHeld), std::string::npos) << dump.out;
    EXPECT_NE(group.find("(from the GIL's locked and last_holder fields)"), std::string::npos)
        << group;
    std::string chain = LineWith(dump.out, "threads (" + std::to_string(spinners.front()));
    EXPECT_NE(chain.find("-> " + std::to_string(holder) + " (python"), std::string::npos)
        << dump.out;
    EXPECT_NE(chain.find("clock_nanosleep (the root)"), std::string::npos) << chain;
    std::vector<std::string> held = PythonFrames(ThreadSection(dump.out, holder));
    ASSERT_FALSE(held.empty()) << dump.out;
    EXPECT_NE(held[0].find(PyDumpLine("PyDLL(None).sleep") + " main"), std::string::npos)
        << dump.out;
    for (int spinner : spinners) {
      std::vector<std::string> frames = PythonFrames(ThreadSection(dump.out, spinner));
      ASSERT_FALSE(frames.empty()) << spinner << "\n" << dump.out;
      EXPECT_NE(frames[0].find(" want_the_gil"), std::string::npos) << dump.out;
    }
  }
}

// A Python thread blocked in queue.get(): its Python stack, innermost first, from the queue
// module's get to the line of the program that called it.
TEST(DumpTest, ShowsThePythonLineOfAThreadBlockedInQueueGet) {
  for (const std::string& python : Pythons()) {
    SCOPED_TRACE(python);
    StuckProgram program(python, {SourceDir() + "/tests/apps/py_dump.py", "queue"});
    program.WaitReady();
    int getter = program.Printed("getter");
    ASSERT_GT(getter, 0);
    std::vector<std::string> frames;
    ProcessResult dump = DumpUntil(program.pid(), [&](const std::string& out) {
      frames = PythonFrames(ThreadSection(out, getter));
      return FrameIndex(frames, " wait_for_work") < frames.size();
    });
    ASSERT_EQ(dump.exit_code(), 0) << dump.err;
    size_t get = FrameIndex(frames, "queue.py:");
    size_t caller = FrameIndex(frames, PyDumpLine("work.get()") + " wait_for_work");
    ASSERT_LT(caller, frames.size()) << dump.out;
    EXPECT_LT(get, caller) << dump.out;
    EXPECT_NE(frames[get].find("get"), std::string::npos) << dump.out;
  }
}

// Three processes of one program dumped together, as the ranks of a job: two with a holder asleep
// and its waiter, one deadlocked. The deadlocked one's two threads are named as not where their
// counterparts in the two others are; nothing of the two that agree is.
TEST(DumpTest, NamesTheProcessThatIsNotWhereTheOthersAre) {
  StuckProgram one({"sleeper"}), two({"sleeper"}), odd({"deadlock"});
  one.WaitReady();
  two.WaitReady();
  odd.WaitReady();
  int first = odd.Printed("first"), second = odd.Printed("second");
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  std::string pids =
      std::to_string(one.pid()) + "," + std::to_string(odd.pid()) + "," + std::to_string(two.pid());
  ProcessResult dump;
  for (int attempt = 0; attempt < 300; ++attempt) {
    dump = RunGprof({"dump", "-p", pids});
    if (dump.exit_code() != 0 || (Occurrences(dump.out, "(the root)") == 2 &&
                                  dump.out.find("DEADLOCK") != std::string::npos))
      break;
    usleep(100'000);
  }
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  size_t start = dump.out.find("Not where the others are (3 processes compared");
  ASSERT_NE(start, std::string::npos) << dump.out;
  std::string section = dump.out.substr(start, dump.out.find("\n\n", start) - start);
  EXPECT_EQ(Occurrences(section, "\n  process "), 2u) << section;
  EXPECT_EQ(Occurrences(section, "\n  process " + std::to_string(odd.pid()) + ": "), 2u) << section;
  EXPECT_NE(section.find(": " + std::to_string(first) + " (dump_app) in futex"), std::string::npos)
      << section;
  EXPECT_NE(section.find(": " + std::to_string(second) + " (dump_app) in futex"), std::string::npos)
      << section;
  EXPECT_NE(section.find("in 2 other processes, as "), std::string::npos) << section;
  EXPECT_NE(section.find("HoldWhileSleeping"), std::string::npos) << section;
}

// A process in its own PID namespace (a container), addressed by this namespace's pid: both pids
// are said, and the mutex's owner field, which holds the holder's id in the container's
// namespace, still names the holder, by this namespace's id.
TEST(DumpTest, NamesTheHolderInsideAnotherPidNamespace) {
  GPROF_NEED_ROOT();
  // --kill-child: the namespace's init (dump_app) dies with unshare, which the test kills.
  StuckProgram program("/usr/bin/unshare",
                       {"--pid", "--kill-child", AppPath("dump_app"), "sleeper"});
  program.WaitReady();
  int holder_inside = program.Printed("holder");
  ASSERT_GT(holder_inside, 0);
  ProcessResult dump = DumpUntil(program.pid(), "(the root)");
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string process = LineWith(dump.out, "(dump_app), parent " + std::to_string(program.pid()));
  EXPECT_NE(process.find(", pid 1 in its own PID namespace"), std::string::npos) << dump.out;
  std::string chain = LineWith(dump.out, "(from the mutex's owner field) -> ");
  size_t held = chain.find("held by ");
  ASSERT_NE(held, std::string::npos) << dump.out;
  int holder = atoi(chain.c_str() + held + 8);
  pid_t app = atoi(process.c_str() + process.find("process ") + 8);
  std::string status =
      ReadFile("/proc/" + std::to_string(app) + "/task/" + std::to_string(holder) + "/status");
  std::string nspid = LineWith(status, "NSpid:");
  EXPECT_TRUE(nspid.ends_with("\t" + std::to_string(holder_inside))) << nspid << "\n" << dump.out;
  EXPECT_NE(
      chain.find("-> " + std::to_string(holder) + " (dump_app) in clock_nanosleep (the root)"),
      std::string::npos)
      << chain;
}

// A process that exits while it is dumped (this one ends itself the moment a dump stops its
// spinning thread): what was read before is kept (its main thread's stacks), and the dump says
// that it exited, and exits 0.
// The program's exit races the dump: one that ends just after a dump finished reading is seen
// by the next as a zombie (refused), so a few programs are tried until one exits during a dump.
TEST(DumpTest, KeepsWhatWasReadOfAProcessThatExitsDuringTheDump) {
  std::unique_ptr<StuckProgram> exiting;
  ProcessResult dump;
  for (int program_attempt = 0; program_attempt < 5; ++program_attempt) {
    exiting = std::make_unique<StuckProgram>(std::vector<std::string>{"exit-when-traced"});
    exiting->WaitReady();
    for (int attempt = 0; attempt < 300; ++attempt) {
      dump = RunGprof({"dump", "-p", std::to_string(exiting->pid())});
      if (dump.exit_code() != 0 || dump.out.find("exited during the dump") != std::string::npos)
        break;
      usleep(10'000);
    }
    if (dump.exit_code() == 0) break;
    exiting->Wait();
  }
  StuckProgram& program = *exiting;
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  std::string process = LineWith(dump.out, "  process " + std::to_string(program.pid()) + " (");
  ASSERT_NE(process.find(": it exited during the dump; what was read is kept"), std::string::npos)
      << dump.out;
  std::vector<std::string> main_frames = NativeFrames(ThreadSection(dump.out, program.pid()));
  EXPECT_LT(FrameIndex(main_frames, "pause"), main_frames.size()) << dump.out;
  EXPECT_NE(dump.out.find("stopped briefly (ptrace)"), std::string::npos) << dump.out;
  int status = program.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
}

// --json and --html: the same dump, in the text's words. The JSON has every thread with its
// wait, holder and stacks; the HTML page is the text.
TEST(DumpTest, WritesTheDumpAsJsonAndHtmlInTheTextsWords) {
  TempDir dir;
  StuckProgram program({"deadlock"});
  program.WaitReady();
  int first = program.Printed("first"), second = program.Printed("second");
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  ProcessResult dump;
  for (int attempt = 0; attempt < 300; ++attempt) {
    dump = RunGprof({"dump", "-p", std::to_string(program.pid()), "--json", dir.Sub("dump.json"),
                     "--html", dir.Sub("dump.html")});
    if (dump.exit_code() != 0 || dump.out.find("DEADLOCK") != std::string::npos) break;
    usleep(100'000);
  }
  ASSERT_EQ(dump.exit_code(), 0) << dump.err;
  nlohmann::json json = nlohmann::json::parse(ReadFile(dir.Sub("dump.json")), nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << ReadFile(dir.Sub("dump.json"));
  ASSERT_EQ(json["deadlocks"].size(), 1u) << json.dump(2);
  EXPECT_EQ(json["stopped"], "stopped 0 us: no thread was stopped");
  EXPECT_NE(dump.out.find(json["stopped"].get<std::string>()), std::string::npos) << dump.out;
  size_t checked = 0;
  for (const nlohmann::json& thread : json["threads"]) {
    // Every wait is said as the text says it.
    EXPECT_NE(dump.out.find(thread["wait"].get<std::string>()), std::string::npos)
        << thread.dump(2) << dump.out;
    int tid = thread["tid"];
    if (tid != first && tid != second) continue;
    ++checked;
    EXPECT_EQ(thread["holder"]["id"], tid == first ? second : first) << thread.dump(2);
    EXPECT_EQ(thread["holder"]["from"], "from the mutex's owner field") << thread.dump(2);
    EXPECT_EQ(thread["native_stack"]["read"], "read without stopping it") << thread.dump(2);
    std::vector<std::string> lines = thread["native_stack"]["lines"];
    EXPECT_EQ(lines, NativeFrames(ThreadSection(dump.out, tid))) << thread.dump(2);
    EXPECT_LT(FrameIndex(lines, tid == first ? "TakeFirstThenSecond" : "TakeSecondThenFirst"),
              lines.size())
        << thread.dump(2);
  }
  EXPECT_EQ(checked, 2u) << json.dump(2);
  std::string html = ReadFile(dir.Sub("dump.html"));
  std::string deadlock = LineWith(dump.out, "DEADLOCK");
  EXPECT_NE(html.find(deadlock.substr(0, deadlock.find(" FUTEX"))), std::string::npos) << html;
  EXPECT_NE(html.find("futex_do_wait &lt; "), std::string::npos) << html;
}

// Each refusal: exit status 125 and one line on stderr naming the problem.
void ExpectRefused(const ProcessResult& dump, const std::string& problem) {
  EXPECT_EQ(dump.exit_code(), 125) << dump.out << dump.err;
  EXPECT_TRUE(dump.out.empty()) << dump.out;
  EXPECT_NE(dump.err.find(problem), std::string::npos) << dump.err;
  EXPECT_EQ(std::count(dump.err.begin(), dump.err.end(), '\n'), 1) << dump.err;
}

TEST(DumpTest, RefusesAProcessThatDoesNotExist) {
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  ExpectRefused(RunGprof({"dump", "-p", std::to_string(gone)}),
                "no process " + std::to_string(gone));
}

TEST(DumpTest, RefusesAZombie) {
  pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  // Not reaped until the end: wait for the kernel to make it a zombie.
  std::string stat;
  for (int i = 0; i < 3000 && stat.find(") Z ") == std::string::npos; ++i) {
    stat = ReadFile("/proc/" + std::to_string(zombie) + "/stat");
    usleep(10'000);
  }
  ExpectRefused(RunGprof({"dump", "-p", std::to_string(zombie)}), "is a zombie");
  waitpid(zombie, nullptr, 0);
}

TEST(DumpTest, RefusesAKernelThread) {
  // Pid 2 is kthreadd in the first PID namespace.
  ExpectRefused(RunGprof({"dump", "-p", "2"}), "(kthreadd) is a kernel thread");
}

TEST(DumpTest, RefusesWhatIsNotAProcessId) {
  ExpectRefused(RunGprof({"dump", "-p", "12,x3"}), "'x3' is not a process id");
}

TEST(DumpTest, NamesThePrivilegeAnotherUsersProcessNeeds) {
  GPROF_NEED_ROOT();
  ThrowawayUser user;
  ASSERT_TRUE(user.ok());
  StuckProgram program({"sleeper"});  // root's
  program.WaitReady();
  ProcessSpec spec;
  spec.run_as_uid = static_cast<int>(user.uid());
  ProcessResult dump = RunGprof({"dump", "-p", std::to_string(program.pid())}, spec);
  ExpectRefused(dump, "needs root or CAP_SYS_PTRACE");
  EXPECT_NE(dump.err.find("Yama"), std::string::npos) << dump.err;
}

}  // namespace
}  // namespace gprof::test
