// The diagnosis (diagnosis.h): every long wait with its class and chain, the causes, deadlocks,
// the lack of CPU, gprof-run's own cost, and the GPU gaps' late threads and module loads.
#include "collector/analysis/diagnosis.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(Diagnosis, AConvoyOnOneMutexIsOneCauseHeldByTheThreadThatKeptItOnCpu) {
  SessionBuilder builder;
  for (uint32_t tid : {11u, 12u, 13u}) builder.Thread(tid, "waiter-" + std::to_string(tid));
  MutexConvoy(&builder);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});

  ASSERT_EQ(diagnosis.causes.size(), 1u);
  const Cause& cause = diagnosis.causes[0];
  EXPECT_EQ(cause.wait_class, WaitClass::kUserLock);
  EXPECT_EQ(cause.object.address, kLock);
  EXPECT_EQ(cause.holder_tid, kHolder) << "waiters that passed it on are not its holder";
  ASSERT_TRUE(cause.root.has_value());
  EXPECT_EQ(cause.root->tid, kHolder);
  EXPECT_EQ(cause.root->state, ChainLink::State::kOnCpu);
  EXPECT_EQ(cause.blocked_ns, 49 * kMs + 53 * kMs + 57 * kMs);
  ASSERT_EQ(diagnosis.freezes.size(), 1u);
  EXPECT_EQ(diagnosis.freezes[0].tids, (std::vector<uint32_t>{11, 12, 13}));
  EXPECT_EQ(diagnosis.freezes[0].cause, 0);
  // The third waiter's chain: woken by the second, who waited for the first, who waited for the
  // holder on CPU.
  const Stall& third = diagnosis.stalls[2];
  ASSERT_EQ(third.chain.size(), 3u);
  EXPECT_EQ(third.chain[0].tid, 12u);
  EXPECT_EQ(third.chain[0].state, ChainLink::State::kAsleep);
  EXPECT_EQ(third.chain[2].tid, kHolder);
}

TEST(Diagnosis, AHandoffOnAConditionIsAWaitButNoCause) {
  SessionBuilder builder;
  builder.Thread(11, "cv-waiter");
  builder.FutexSleep(11, kCondvar, 1 * kMs, 31 * kMs, 31 * kMs + 10000, kHolder);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  EXPECT_TRUE(diagnosis.freezes.empty());
  ASSERT_EQ(diagnosis.stalls.size(), 1u);
  EXPECT_EQ(diagnosis.stalls[0].wait_class, WaitClass::kCondition);
  ASSERT_EQ(diagnosis.stalls[0].chain.size(), 1u);
  EXPECT_EQ(diagnosis.stalls[0].chain[0].tid, kHolder);
}

// A pipe read ended by another thread of the program is a handoff like a condition's and listed
// with its chain; a sleep nobody ended is counted by class, with its longest.
TEST(Diagnosis, EveryWaitThatIsNoCauseIsListedInTheText) {
  constexpr int32_t kPipeStack = 7;
  constexpr int32_t kSleepStack = 8;
  SessionBuilder builder;
  builder.session().kernel_stacks[kPipeStack] = {1, 2, 6};
  builder.session().kernel_stacks[kSleepStack] = {1, 2, 9};
  builder.session().kernel_symbols[6] = "anon_pipe_read+0x6";
  builder.session().kernel_symbols[9] = "do_nanosleep+0x9";
  builder.Thread(11, "reader");
  builder.Thread(12, "napper");
  builder.Sleep(11, 1 * kMs, 21 * kMs, 21 * kMs + 5000, kHolder, 1, kPipeStack);
  builder.Sleep(12, 2 * kMs, 0, 7 * kMs, 0, 1, kSleepStack);
  builder.Sleep(12, 8 * kMs, 0, 11 * kMs, 0, 1, kSleepStack);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.stalls.size(), 3u);
  EXPECT_EQ(diagnosis.stalls[0].wait_class, WaitClass::kIo);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_NE(text.find("OTHER LONG WAITS: 1 handoffs"), std::string::npos) << text;
  EXPECT_NE(text.find("\"reader\" (11) at +0.000 s asleep 20.0 ms reading a pipe [I/O]\n"
                      "     ended by \"holder\" (10)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2 [sleep] waits no thread of the program ended, 8.0 ms in all; the "
                      "longest: \"napper\" (12) at +0.001 s asleep 5.0 ms in nanosleep [sleep]"),
            std::string::npos)
      << text;
}

// Three processes wait on one lock in shared memory, mapped at a different address in each: one
// object, one cause, one freeze; the same offset of a private copy of the file is another.
TEST(Diagnosis, ALockInSharedMemoryIsOneObjectAcrossProcesses) {
  SessionBuilder builder;
  Session& session = builder.session();
  constexpr uint32_t kOwner = kPid + 1;
  auto map = [&](uint32_t pid, uint64_t start, const char* perms) {
    session.processes[pid].pid = pid;
    MapsSnapshot snapshot;
    snapshot.mappings.push_back({start, start + 0x1000, 0, perms, "/dev/shm/sem.lock", 42});
    session.processes[pid].maps.push_back(snapshot);
  };
  map(kPid, 0x7f0000000000, "rw-s");
  for (uint32_t i = 0; i < 3; ++i) {
    const uint32_t pid = kOwner + 1 + i, tid = pid;
    map(pid, 0x7f1000000000 + i * 0x100000, i == 2 ? "rw-p" : "rw-s");
    session.threads[tid] = {pid, tid, "worker-" + std::to_string(i), 0};
    const uint64_t start = (1 + i) * kMs, wake = 40 * kMs + i * kMs / 10;
    OffCpuInterval& sleep = builder.Sleep(tid, start, wake, wake + 10000, kHolder, 1, kFutexStack);
    sleep.pid = pid;
    FutexCall futex;
    futex.pid = pid;
    futex.tid = tid;
    futex.start_ns = start - 1000;
    futex.end_ns = wake + 20000;
    futex.uaddr = 0x7f1000000000 + i * 0x100000 + 0x10;
    futex.op = 0;   // FUTEX_WAIT, shared
    futex.val = 2;  // glibc's "locked, with waiters"
    session.futex_calls.push_back(futex);
  }
  Analysis diagnosis = Analyze(builder.Build(), {});
  ASSERT_EQ(diagnosis.stalls.size(), 3u);
  ASSERT_EQ(diagnosis.causes.size(), 2u);
  EXPECT_EQ(diagnosis.causes[0].tids, (std::vector<uint32_t>{kOwner + 1, kOwner + 2}));
  EXPECT_EQ(diagnosis.causes[1].tids, (std::vector<uint32_t>{kOwner + 3}))
      << "a private copy of the file is that process's own";
  ASSERT_EQ(diagnosis.freezes.size(), 1u);
  EXPECT_EQ(diagnosis.freezes[0].tids, (std::vector<uint32_t>{kOwner + 1, kOwner + 2}));
}

// Two processes block in flock() on a file a third holds: a kernel lock, one object for both.
TEST(Diagnosis, AFileLockIsAKernelLockSharedByProcesses) {
  Analysis diagnosis = Analyze(FileLockOfTwoProcesses(), {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].wait_class, WaitClass::kKernelLock);
  EXPECT_EQ(diagnosis.causes[0].kind, CauseKind::kObject);
  EXPECT_EQ(diagnosis.causes[0].object.kind, WaitKind::kKernelFunction);
  EXPECT_EQ(diagnosis.causes[0].object.kernel_function, "locks_lock_inode_wait");
  EXPECT_EQ(diagnosis.causes[0].tids, (std::vector<uint32_t>{kPid + 1, kPid + 2}));
  EXPECT_EQ(diagnosis.causes[0].holder_tid, kHolder);
  EXPECT_EQ(diagnosis.freezes.size(), 1u);
}

// The driver's event thread polls its device between GPU events: idle by design, never a cause;
// the same poll inside a CUDA call is a thread held up in the driver, and is one.
TEST(Diagnosis, ADevicePollOutsideACudaCallIsIdleButInsideOneIsACause) {
  SessionBuilder builder;
  builder.Thread(11, "cuda-EvtHandlr");
  builder.Thread(12, "trainer");
  builder.Call(12, "cudaDeviceSynchronize", 100 * kMs, 140 * kMs);
  for (uint32_t tid : {11u, 12u}) {
    uint64_t start = tid == 11 ? 1 * kMs : 101 * kMs;
    DeviceWait poll;
    poll.pid = kPid;
    poll.tid = tid;
    poll.start_ns = start;
    poll.end_ns = start + 30 * kMs;
    poll.call = DeviceCall::kPoll;
    poll.device = "nvidia0";
    builder.session().device_waits.push_back(poll);
    builder.Sleep(tid, start + 100, start + 30 * kMs - 1000, start + 30 * kMs - 500, kHolder, 1,
                  -1);
  }
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.stalls.size(), 2u);
  EXPECT_TRUE(IsIdleWait(diagnosis.stalls[0]));
  EXPECT_EQ(diagnosis.stalls[0].cause, -1);
  EXPECT_FALSE(IsIdleWait(diagnosis.stalls[1]));
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].wait_class, WaitClass::kGpuDriver);
  EXPECT_EQ(diagnosis.causes[0].tids, (std::vector<uint32_t>{12}));
}

// The stream goes idle 20 ms because the launching thread sat on the mutex in between: the gap is
// that lock's, and its idle time ranks it first.
TEST(Diagnosis, AGpuGapIsExplainedByTheLateThreadsWait) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "launcher");
  builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  MutexSleep(&builder, 11, 11 * kMs, 27 * kMs, kHolder);
  builder.Call(11, "cudaLaunchKernel", 28 * kMs, 29 * kMs, 2);
  builder.Kernel(7, 30 * kMs, 40 * kMs, 2);
  // Contention elsewhere, with no GPU idle time to its name, ranks after it.
  builder.Thread(21, "other");
  builder.Thread(22, "other-waiter");
  builder.FutexSleep(22, 0x7f0000009000, 1 * kMs, 200 * kMs, 200 * kMs + 1000, 21);
  builder.session().futex_calls.back().val = 2;
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});

  ASSERT_EQ(diagnosis.gaps.size(), 1u);
  const GpuGap& gap = diagnosis.gaps[0];
  EXPECT_EQ(gap.start_ns, 10 * kMs);
  EXPECT_EQ(gap.end_ns, 30 * kMs);
  EXPECT_FALSE(gap.gpu_side);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->tid, 11u);
  EXPECT_EQ(gap.late_thread->state, ChainLink::State::kAsleep);
  ASSERT_GE(gap.stall, 0);
  ASSERT_EQ(gap.cause, 0) << "the cause that explains GPU idle time ranks first";
  EXPECT_EQ(diagnosis.causes[0].object.address, kLock);
  EXPECT_EQ(diagnosis.causes[0].gpu_idle_ns, 20 * kMs);
  EXPECT_EQ(diagnosis.causes[0].holder_tid, kHolder);
  ASSERT_EQ(diagnosis.causes.size(), 2u);
  EXPECT_EQ(diagnosis.causes[1].gpu_idle_ns, 0u);
  EXPECT_EQ(diagnosis.causes[1].holder_tid, 21u);
}

// Issue 18: gprof-run's own thread (the injected library's writer, here holding the loader's lock
// while the program's launcher and a thread of the program's own lock chain wait for it) is never
// a cause, a holder or a chain's root; what it cost is said once, with the time and the GPU idle.
TEST(Diagnosis, GprofRunsOwnThreadIsNeverACauseHolderOrRootButItsCostIsSaidOnce) {
  constexpr uint32_t kWriter = 30, kLauncher = 11, kWaiter = 12, kDecoder = 13;
  constexpr uint64_t kLoaderLock = 0x7f00000a0a08;  // _rtld_global's lock word
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(kWriter, format::kWriterThreadName);
  builder.session().profiler_threads[kWriter] = ProfilerRole::kWriter;  // as the library records
  builder.Thread(kLauncher, "launcher");
  builder.Thread(kWaiter, "waiter");
  builder.Thread(kDecoder, "decoder");
  builder.Call(kLauncher, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  // The launcher waits 16 ms on the loader's lock inside its next launch: the GPU idles 20 ms.
  builder.Call(kLauncher, "cudaLaunchKernel", 11 * kMs, 29 * kMs, 2);
  builder.FutexSleep(kLauncher, kLoaderLock, 11 * kMs, 27 * kMs, 27 * kMs + 10000, kWriter);
  builder.session().futex_calls.back().val = 2;
  builder.Kernel(7, 30 * kMs, 40 * kMs, 2);
  // The waiter waits for the program's mutex the decoder holds; the decoder waits for the loader's
  // lock the writer holds: the writer would be the chain's root.
  builder.FutexSleep(kDecoder, kLoaderLock, 45 * kMs, 75 * kMs, 75 * kMs + 10000, kWriter);
  builder.session().futex_calls.back().val = 2;
  MutexSleep(&builder, kWaiter, 42 * kMs, 80 * kMs, kDecoder);
  // The writer's own wait is not the program's either.
  builder.FutexSleep(kWriter, 0x7f0000009000, 100 * kMs, 150 * kMs, 150 * kMs + 1000, kLauncher);
  // At exit the main thread waits 9 ms for the writer's last flush, on a word of the injected
  // library's .bss (the anonymous mapping past its data): gprof-run's cost too.
  constexpr uint32_t kMain = 14, kDriver = 15;
  constexpr uint64_t kInjectBss = 0x7f0000c01040;
  builder.Thread(kMain, "app");
  builder.session().processes[kPid].maps = {
      {0,
       {Mapping{0x7f0000b00000, 0x7f0000c00000, 0, "r-xp", "/opt/gprof-run/libgprof_inject.so", 7},
        Mapping{0x7f0000c00000, 0x7f0000c01000, 0x100000, "rw-p",
                "/opt/gprof-run/libgprof_inject.so", 7},
        Mapping{0x7f0000c01000, 0x7f0000c02000, 0, "rw-p", "", 0}}}};
  builder.FutexSleep(kMain, kInjectBss, 200 * kMs, 209 * kMs, 209 * kMs + 1000, kWriter);
  // A driver's thread asleep on its condition until the writer's flush signalled it was delayed
  // by nothing: no cost, and no cause either.
  builder.Thread(kDriver, "driver-events");
  builder.FutexSleep(kDriver, 0x7f0000009100, 180 * kMs, 205 * kMs, 205 * kMs + 1000, kWriter);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});

  for (const Cause& cause : diagnosis.causes) {
    EXPECT_NE(cause.holder_tid, kWriter) << CauseIdentity(session, cause);
    EXPECT_NE(cause.object.address, kLoaderLock) << CauseIdentity(session, cause);
    if (cause.root.has_value()) {
      EXPECT_NE(cause.root->tid, kWriter) << CauseIdentity(session, cause);
    }
  }
  for (const Stall& stall : diagnosis.stalls) {
    EXPECT_NE(stall.tid, kWriter);
    for (const ChainLink& link : stall.chain) EXPECT_NE(link.tid, kWriter);
    EXPECT_EQ(stall.profiler_cost, stall.tid != kDriver) << stall.tid;
  }
  ASSERT_EQ(diagnosis.gaps.size(), 1u);
  EXPECT_LT(diagnosis.gaps[0].cause, 0) << "its GPU idle is gprof-run's, not a cause's";

  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  const std::string cost_line = "gprof-run's own threads delayed the program's threads 4 times, " +
                                FormatDuration(16 * kMs + 30 * kMs + 38 * kMs + 9 * kMs) +
                                " in all, longest " + FormatDuration(38 * kMs);
  size_t cost = text.find(cost_line);
  ASSERT_NE(cost, std::string::npos) << text;
  const size_t idle = text.find("GPU idle " + FormatDuration(20 * kMs) + " in 1 gap", cost);
  ASSERT_NE(idle, std::string::npos) << text;
  EXPECT_EQ(text.find("gprof-run's own threads", cost + 1), std::string::npos) << "said once\n"
                                                                               << text;
  // Named nowhere else in the diagnosis: no cause, no holder, no root. (The slow CUDA calls
  // after it, which RenderDiagnosisText's whole report has too, name a waker that is gprof-run's
  // as such: "woken by ..., gprof-run's own thread".)
  std::string diagnosed = text.substr(0, text.find("\nSLOW CUDA CALLS"));
  // The cost is one entry, wrapped to the text's width: cut from its start to its GPU idle's line
  // end.
  std::string elsewhere =
      diagnosed.substr(0, cost) + diagnosed.substr(diagnosed.find('\n', std::max(cost, idle)));
  EXPECT_EQ(elsewhere.find(format::kWriterThreadName), std::string::npos) << text;
  EXPECT_EQ(elsewhere.find("<- root"), std::string::npos) << text;
}

TEST(Diagnosis, ThreadsShortOfCpuAreOneCauseAndAQuietRunHasNone) {
  {
    SessionBuilder builder;
    for (uint32_t tid : {11u, 12u, 13u}) {
      builder.Thread(tid, "spin");
      for (uint64_t at = 0; at < 100 * kMs; at += 10 * kMs)
        builder.Preempted(tid, at + tid * kMs, at + tid * kMs + 4 * kMs);
    }
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});
    ASSERT_EQ(diagnosis.causes.size(), 1u);
    EXPECT_EQ(diagnosis.causes[0].wait_class, WaitClass::kCpu);
    EXPECT_EQ(diagnosis.causes[0].tids.size(), 3u);
    EXPECT_EQ(diagnosis.causes[0].blocked_ns, 3 * 10 * 4 * kMs);
  }
  {
    SessionBuilder builder;
    builder.Thread(11, "worker");
    builder.Preempted(11, 10 * kMs, 10 * kMs + 50000);            // a moment, once
    builder.Sleep(11, 20 * kMs, 0, 30 * kMs, 0, 1, kFutexStack);  // a timed wait that ran out
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});
    EXPECT_TRUE(diagnosis.causes.empty());
    EXPECT_TRUE(diagnosis.freezes.empty());
    EXPECT_TRUE(diagnosis.gaps.empty());
  }
}

// The chain of three mutexes: link-0 holds m0; link-1 holds m1 and waits for m0; link-2
// holds m2 and waits for m1. Each, once it has what it waited for, releases everything and at
// once waits on something else: link-0 on m2, link-1 on a condition, link-2 in a sleep. Each
// woken thread waits `delay` for a CPU before it runs. Nobody ever waits for a lock its holder
// waits behind: no cycle, whatever the delay; link-0's wait on m2 ends by link-2's release, behind
// link-1 that was runnable, not asleep, after link-0 had let it go.
TEST(Diagnosis, AChainOfMutexesReleasedInTurnIsNoDeadlock) {
  constexpr uint64_t kM0 = 0x7f0000003000, kM1 = 0x7f0000003040, kM2 = 0x7f0000003080;
  for (uint64_t delay : {2 * kMs, 5 * kMs, 9 * kMs}) {
    SCOPED_TRACE("delay " + std::to_string(delay));
    SessionBuilder builder;
    Session& raw = builder.session();
    raw.kernel_stacks[8] = {1, 2, 9};
    raw.kernel_symbols[9] = "do_nanosleep+0x9";
    for (uint32_t tid : {21u, 22u, 23u}) builder.Thread(tid, "link-" + std::to_string(tid - 21));
    const uint64_t released0 = 20 * kMs;          // link-0 unlocks m0, waking link-1
    const uint64_t runs1 = released0 + delay;     // link-1 gets a CPU
    const uint64_t released1 = runs1 + 50 * kUs;  // and unlocks m1, waking link-2
    const uint64_t runs2 = released1 + delay;     // link-2 gets a CPU
    const uint64_t released2 = runs2 + 50 * kUs;  // and unlocks m2, waking link-0
    LockSleep(&builder, 22, kM0, 1 * kMs, released0, runs1, 21, 21);
    LockSleep(&builder, 23, kM1, 2 * kMs, released1, runs2, 22, 22);
    Unlock(&builder, 21, kM0, released0);
    LockSleep(&builder, 21, kM2, released0 + 10 * kUs, released2, released2 + delay, 23, 23);
    Unlock(&builder, 22, kM1, released1);
    builder.FutexSleep(22, kCondvar, released1 + 10 * kUs, 0, 100 * kMs, 0);
    Unlock(&builder, 23, kM2, released2);
    builder.Sleep(23, released2 + 10 * kUs, 0, 60 * kMs, 0, 1, 8);
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});

    EXPECT_EQ(DeadlocksIn(session, diagnosis), "");
    EXPECT_EQ(RenderDiagnosisText(session, diagnosis, 5).find("DEADLOCK"), std::string::npos)
        << RenderDiagnosisText(session, diagnosis, 5);
    const Stall* on_m2 = nullptr;
    for (const Stall& stall : diagnosis.stalls) {
      if (stall.tid == 21 && stall.wait.object.address == kM2) on_m2 = &stall;
    }
    ASSERT_NE(on_m2, nullptr);
    ASSERT_EQ(on_m2->chain.size(), 2u);
    EXPECT_EQ(on_m2->chain[0].tid, 23u);
    EXPECT_EQ(on_m2->chain[1].tid, 22u);
    EXPECT_EQ(on_m2->chain[1].state, ChainLink::State::kRunnable)
        << "woken before link-0 began its wait, link-1 was waiting for a CPU";
    EXPECT_FALSE(on_m2->chain[1].owner);
  }
}

// x and y wait on m0, which `a` holds. a's unlock wakes y, not x; then a waits on m1, which x
// holds while it waits, in a timed lock, on m0. x's wait times out and it lets m1 go: a's wait on
// m1 was ended by x, asleep on m0, whose field still named a. But a had released m0 before it
// began to wait: it is not the holder, and there is no cycle.
TEST(Diagnosis, AHolderThatReleasedBeforeTheWaitBeganHoldsNothing) {
  constexpr uint64_t kM0 = 0x7f0000003000, kM1 = 0x7f0000003040;
  constexpr uint32_t kA = 21, kX = 22, kY = 23;
  SessionBuilder builder;
  builder.Thread(kA, "a");
  builder.Thread(kX, "x");
  builder.Thread(kY, "y");
  LockSleep(&builder, kX, kM0, 2 * kMs, 0, 35 * kMs, 0, kA);  // timed out
  LockSleep(&builder, kY, kM0, 3 * kMs, 10 * kMs, 10 * kMs + 20 * kUs, kA, kA);
  Unlock(&builder, kA, kM0, 10 * kMs);
  LockSleep(&builder, kA, kM1, 10 * kMs + 10 * kUs, 35 * kMs + 100 * kUs, 35 * kMs + 120 * kUs, kX,
            kX);
  Unlock(&builder, kX, kM1, 35 * kMs + 100 * kUs);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});

  EXPECT_EQ(DeadlocksIn(session, diagnosis), "");
  const Stall* on_m1 = nullptr;
  for (const Stall& stall : diagnosis.stalls) {
    if (stall.tid == kA) on_m1 = &stall;
  }
  ASSERT_NE(on_m1, nullptr);
  ASSERT_EQ(on_m1->chain.size(), 1u) << "who held m0 for x after a is not recorded";
  EXPECT_EQ(on_m1->chain[0].tid, kX);
  EXPECT_EQ(on_m1->chain[0].state, ChainLink::State::kAsleep);
  // x's own timed-out wait: a named as its holder only until a's unlock.
  const Stall* x_wait = nullptr;
  for (const Stall& stall : diagnosis.stalls) {
    if (stall.tid == kX) x_wait = &stall;
  }
  ASSERT_NE(x_wait, nullptr);
  ASSERT_FALSE(x_wait->chain.empty());
  EXPECT_EQ(x_wait->chain[0].tid, kA);
  EXPECT_TRUE(x_wait->chain[0].owner);
  EXPECT_TRUE(x_wait->chain[0].released);
  EXPECT_EQ(x_wait->chain[0].end_ns, 10 * kMs);
  EXPECT_EQ(x_wait->deadlock_tid, 0u);
}

// w's timed lock names h as the holder; h works 30 ms, unlocks (waking another waiter) and sleeps
// on a condition w would have signalled: h held w up 30 ms, on CPU, and no longer.
TEST(Diagnosis, AnOwnerIsDescribedUpToItsRelease) {
  constexpr uint64_t kOther = 0x7f0000003100;
  constexpr uint32_t kW = 21, kX = 22;
  for (uint64_t release : {12 * kMs, 30 * kMs, 61 * kMs}) {
    SCOPED_TRACE("release at " + std::to_string(release));
    SessionBuilder builder;
    builder.Thread(kW, "w");
    builder.Thread(kX, "x");
    LockSleep(&builder, kW, kLock, 1 * kMs, 0, 100 * kMs, 0, kHolder);  // timed out
    LockSleep(&builder, kX, kLock, 2 * kMs, release, release + 20 * kUs, kHolder, kHolder);
    Unlock(&builder, kHolder, kLock, release);
    // Then h waits on a lock w holds: had h still held w's lock, this would be a deadlock.
    LockSleep(&builder, kHolder, kOther, release + 10 * kUs, 0, 150 * kMs, 0, kW);
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});

    EXPECT_EQ(DeadlocksIn(session, diagnosis), "");
    const Stall* w_wait = nullptr;
    for (const Stall& stall : diagnosis.stalls) {
      if (stall.tid == kW) w_wait = &stall;
    }
    ASSERT_NE(w_wait, nullptr);
    ASSERT_EQ(w_wait->chain.size(), 1u);
    const ChainLink& held = w_wait->chain[0];
    EXPECT_EQ(held.tid, kHolder);
    EXPECT_TRUE(held.owner);
    EXPECT_TRUE(held.released);
    EXPECT_EQ(held.end_ns, release);
    EXPECT_EQ(held.state, ChainLink::State::kOnCpu);
    EXPECT_EQ(held.on_cpu_ns, release - 1 * kMs);
    std::string text = RenderDiagnosisText(session, diagnosis, 5);
    EXPECT_NE(text.find("held by \"holder\" (10) on CPU " + FormatDuration(release - 1 * kMs) +
                        ", until it released the lock at " + FormatOffset(session, release)),
              std::string::npos)
        << text;
  }
}

// Two threads each hold a lock and wait, in timed locks, for the other's; each lets its own go
// only after its wait timed out. A deadlock: from the second wait's start until the first's end
// both slept, each on the lock the other held.
TEST(Diagnosis, ACycleOfWaitsAsleepAtOnceIsADeadlock) {
  constexpr uint64_t kMa = 0x7f0000003000, kMb = 0x7f0000003040;
  constexpr uint32_t kA = 21, kB = 22;
  for (uint64_t second : {1 * kMs, 20 * kMs, 45 * kMs}) {
    SCOPED_TRACE("second wait at " + std::to_string(second));
    SessionBuilder builder;
    builder.Thread(kA, "lock-a");
    builder.Thread(kB, "lock-b");
    LockSleep(&builder, kA, kMb, 1 * kMs, 0, 101 * kMs, 0, kB);
    LockSleep(&builder, kB, kMa, 1 * kMs + second, 0, 101 * kMs + second, 0, kA);
    Unlock(&builder, kA, kMa, 101 * kMs + 50 * kUs);
    Unlock(&builder, kB, kMb, 101 * kMs + second + 50 * kUs);
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});
    ASSERT_EQ(diagnosis.stalls.size(), 2u);
    for (const Stall& stall : diagnosis.stalls) EXPECT_EQ(stall.deadlock_tid, stall.tid);
    EXPECT_NE(RenderDiagnosisText(session, diagnosis, 5).find("DEADLOCK"), std::string::npos);
  }
  // The same locks, but b's wait begins after a's timed out and a let its lock go: no instant
  // had both asleep.
  SessionBuilder builder;
  builder.Thread(kA, "lock-a");
  builder.Thread(kB, "lock-b");
  LockSleep(&builder, kA, kMb, 1 * kMs, 0, 101 * kMs, 0, kB);
  Unlock(&builder, kA, kMa, 101 * kMs + 50 * kUs);
  LockSleep(&builder, kB, kMa, 101 * kMs + 70 * kUs, 0, 201 * kMs, 0, kA);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  EXPECT_EQ(DeadlocksIn(session, diagnosis), "");
}

// A thread created during a wait ends it: it is credited with the part of the wait it existed
// for; before that, the wait was held up by what its creator did until it created it.
TEST(Diagnosis, AThreadCreatedDuringAWaitAccountsOnlyForItsLife) {
  constexpr uint32_t kWaiter = 21, kSpawner = 22, kFresh = 23;
  for (uint64_t created : {20 * kMs, 53 * kMs}) {
    SCOPED_TRACE("created at " + std::to_string(created));
    SessionBuilder builder;
    builder.Thread(kWaiter, "waiter");
    builder.Thread(kSpawner, "spawner");
    builder.Thread(kFresh, "fresh");
    builder.session().threads[kFresh].start_ns = created;
    builder.session().task_starts.push_back(
        TaskStart{created, kPid, kFresh, kPid, kSpawner, -1, true});
    const uint64_t wake = created + 2 * kMs;
    builder.FutexSleep(kWaiter, kCondvar, 1 * kMs, wake, wake + 10 * kUs, kFresh);
    Session session = builder.Build();
    Analysis diagnosis = Analyze(session, {});
    ASSERT_EQ(diagnosis.stalls.size(), 1u);
    const Stall& stall = diagnosis.stalls[0];
    ASSERT_EQ(stall.chain.size(), 2u);
    const ChainLink& fresh = stall.chain[0];
    EXPECT_EQ(fresh.tid, kFresh);
    EXPECT_EQ(fresh.created_ns, created);
    EXPECT_EQ(fresh.start_ns, created);
    EXPECT_EQ(fresh.on_cpu_ns, 2 * kMs) << "not the time before it existed";
    const ChainLink& spawner = stall.chain[1];
    EXPECT_EQ(spawner.tid, kSpawner);
    EXPECT_TRUE(spawner.creator);
    EXPECT_EQ(spawner.start_ns, 1 * kMs);
    EXPECT_EQ(spawner.end_ns, created);
    EXPECT_EQ(spawner.on_cpu_ns, created - 1 * kMs);
    std::string text = RenderDiagnosisText(session, diagnosis, 5);
    EXPECT_NE(text.find("ended by \"fresh\" (23), created at " + FormatOffset(session, created) +
                        ", on CPU 2.0 ms\n       created by \"spawner\" (22) on CPU " +
                        FormatDuration(created - 1 * kMs) + "  <- root"),
              std::string::npos)
        << text;
  }
}

// A handoff whose producer was preempted while the consumer waited for it: the CPU it lacked is a
// cause and each link says how long it waited for one, though the producer was short of CPU for
// little of its long life.
TEST(Diagnosis, AProducerPreemptedWhileItsConsumerWaitsLackedACpu) {
  const std::array<uint64_t, 6>& delays = kProducerDelays;
  uint64_t preempted_ns = 0;
  for (uint64_t delay : delays) preempted_ns += delay;
  Session session = PreemptedProducer();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  const Cause& cpu = diagnosis.causes[0];
  EXPECT_EQ(cpu.wait_class, WaitClass::kCpu);
  EXPECT_EQ(cpu.tids, (std::vector<uint32_t>{kProducer}));
  ASSERT_FALSE(diagnosis.cpu_waits.empty());
  EXPECT_EQ(diagnosis.cpu_waits[0].tid, kProducer);
  EXPECT_EQ(diagnosis.cpu_waits[0].runnable_ns, preempted_ns);
  EXPECT_EQ(diagnosis.cpu_waits[0].awaited_ns, preempted_ns);
  EXPECT_FALSE(diagnosis.cpu_waits[0].latency_sensitive) << "it only computed slower";
  // The consumer, runnable a moment after each wake, is the thread the lack of CPU made late.
  ASSERT_EQ(diagnosis.cpu_waits.size(), 2u);
  const CpuWait& consumer = diagnosis.cpu_waits[1];
  EXPECT_EQ(consumer.tid, kConsumer);
  EXPECT_EQ(consumer.held_up_ns, preempted_ns);
  EXPECT_EQ(consumer.held_up_by,
            (std::vector<std::pair<uint32_t, uint64_t>>{{kProducer, preempted_ns}}));
  EXPECT_TRUE(consumer.latency_sensitive);
  EXPECT_FALSE(consumer.short_of_cpu);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("no thread lacked a CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("1 thread runnable " + FormatDuration(preempted_ns) + ": \"producer\" (22) " +
                      FormatDuration(preempted_ns) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("waits held up for want of a CPU:\n       \"consumer\" (21) " +
                      FormatDuration(consumer.delayed_ns()) + ": woken, it waited for a CPU " +
                      FormatDuration(consumer.after_wakeup_ns) +
                      " (6 wakeups, longest 10.0 us), those it waited for were runnable " +
                      FormatDuration(preempted_ns) + " (\"producer\" (22))\n"),
            std::string::npos)
      << text;
  for (size_t i = 0; i < delays.size(); ++i) {
    const Stall& handoff = diagnosis.stalls[i];
    ASSERT_EQ(handoff.tid, kConsumer);
    ASSERT_EQ(handoff.chain.size(), 1u);
    EXPECT_EQ(handoff.chain[0].runnable_ns, delays[i]);
  }
}

// Seven hogs and a thread that sleeps 2 ms at a time and, woken, waits for a CPU: all eight are
// listed by their own runnable time, longest first; the sleeper, whose waits were made longer,
// is named though its time is the shortest.
TEST(Diagnosis, OversubscriptionListsEachThreadsDelayAndTheOneItMadeLate) {
  constexpr int32_t kSleepStack = 8;
  constexpr uint32_t kProbe = 40;
  SessionBuilder builder;
  builder.session().kernel_stacks[kSleepStack] = {1, 2, 9};
  builder.session().kernel_symbols[9] = "do_nanosleep+0x9";
  std::map<uint32_t, uint64_t> runnable;
  for (uint32_t i = 0; i < 7; ++i) {
    const uint32_t tid = 30 + i;
    builder.Thread(tid, "t-hog-" + std::to_string(i));
    // Preempted every 10 ms for a share that differs per hog, so that tid order is not the order.
    const uint64_t slice = (3 + (i * 5) % 7) * kMs;
    for (uint64_t at = 0; at < 1000 * kMs; at += 10 * kMs) {
      builder.Preempted(tid, at + kMs, at + kMs + slice);
      runnable[tid] += slice;
    }
  }
  builder.Thread(kProbe, "probe");
  uint64_t probe_late = 0, longest = 0;
  size_t wakeups = 0;
  for (uint64_t at = 0; at < 1000 * kMs; at += 4 * kMs) {
    const uint64_t late = (200 + (at / kMs) % 7 * 150) * kUs;
    builder.Sleep(kProbe, at, at + 2 * kMs, at + 2 * kMs + late, 0, 1, kSleepStack);
    probe_late += late;
    longest = std::max(longest, late);
    ++wakeups;
  }
  runnable[kProbe] = probe_late;
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  const Cause& cpu = diagnosis.causes[0];
  ASSERT_EQ(cpu.wait_class, WaitClass::kCpu);
  ASSERT_EQ(cpu.tids.size(), 8u);
  for (size_t i = 1; i < cpu.tids.size(); ++i)
    EXPECT_GE(runnable[cpu.tids[i - 1]], runnable[cpu.tids[i]]) << "longest first";
  EXPECT_EQ(cpu.tids.back(), kProbe);
  for (const CpuWait& wait : diagnosis.cpu_waits) {
    EXPECT_EQ(wait.runnable_ns, runnable[wait.tid]) << wait.tid;
    EXPECT_EQ(wait.latency_sensitive, wait.tid == kProbe) << wait.tid;
  }
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  std::string listed = "8 threads runnable " + FormatDuration(cpu.blocked_ns) + ": ";
  for (size_t i = 0; i < 4; ++i) {
    listed += (i == 0 ? "" : ", ") + QuotedThread(session, cpu.tids[i]) + " " +
              FormatDuration(runnable[cpu.tids[i]]);
  }
  EXPECT_NE(text.find(listed + " and 4 more\n"), std::string::npos) << text;
  EXPECT_NE(text.find("waits held up for want of a CPU:\n       \"probe\" (40) " +
                      FormatDuration(probe_late) + ": woken, it waited for a CPU " +
                      FormatDuration(probe_late) + " (" + std::to_string(wakeups) +
                      " wakeups, longest " + FormatDuration(longest) + ")\n"),
            std::string::npos)
      << text;
}

// A lone worker that other programs preempted, with nobody waiting for it, only ran slower: no
// cause, but the report does not say that no thread lacked a CPU.
TEST(Diagnosis, ALoneThreadPreemptedByOthersIsNoCauseButIsSaid) {
  SessionBuilder builder;
  builder.session().meta.kernel_recording = true;
  builder.Thread(11, "worker");
  uint64_t preempted_ns = 0;
  for (uint64_t at = 0; at < 200 * kMs; at += 10 * kMs) {
    builder.Preempted(11, at + 2 * kMs, at + 2 * kMs + (1 + at / (10 * kMs) % 4) * kMs);
    preempted_ns += (1 + at / (10 * kMs) % 4) * kMs;
  }
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.cpu_waits.size(), 1u);
  EXPECT_EQ(diagnosis.cpu_waits[0].runnable_ns, preempted_ns);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("no thread lacked a CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("no contention: no thread waited 1.0 ms or more on a lock, the GIL, the "
                      "kernel or the GPU driver, or on a thread that lacked a CPU\n  waiting for "
                      "a CPU in all: \"worker\" (11) " +
                      FormatDuration(preempted_ns) + ", " +
                      std::to_string(preempted_ns * 100 / diagnosis.cpu_waits[0].life_ns) +
                      "% of its time\n"),
            std::string::npos)
      << text;
}

// A thread another waits for all along (a join), preempted for moments that add up to 2 ms of
// 200: the wait was held up by it, but no more than by any busy machine: no cause.
TEST(Diagnosis, MomentsOfPreemptionWhileAwaitedAreNoShortage) {
  SessionBuilder builder;
  builder.session().meta.kernel_recording = true;
  builder.Thread(11, "main");
  builder.Thread(12, "worker");
  for (uint64_t at = 10 * kMs; at < 200 * kMs; at += 20 * kMs)
    builder.Preempted(12, at, at + 200 * kUs);
  builder.FutexSleep(11, kCondvar, 1 * kMs, 201 * kMs, 201 * kMs + 10 * kUs, 12);
  Session session = builder.Build();
  Analysis diagnosis = Analyze(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.cpu_waits.size(), 2u);
  EXPECT_FALSE(diagnosis.cpu_waits[0].short_of_cpu);
  EXPECT_EQ(diagnosis.cpu_waits[0].awaited_ns, 2 * kMs);
}

TEST(LateThread, OnCpuBetweenTwoLaunchesIsOutsideCudaCalls) {
  SessionBuilder builder;
  // Computing on the CPU from 1 ms to 60 ms, then 20 us in the copy that queues the next work.
  Session session = LateLaunch(builder, "cudaMemcpyAsync", 60 * kMs, 60 * kMs + 20000);
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->call_ns, 20000u);
  EXPECT_EQ(gap.late_thread->other_calls_ns, 0u);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("on CPU 50.0 ms in cudaMemcpyAsync"), std::string::npos) << text;
  nlohmann::json json = RenderJsonReport(session, diagnosis)["diagnosis"]["gaps"][0];
  EXPECT_EQ(json["late_thread"]["call_ns"], 20000);
}

TEST(LateThread, BlockedInsideTheCallIsInIt) {
  SessionBuilder builder;
  // The call that queues the next work began before the GPU went idle and held the thread 50 ms.
  Session session = LateLaunch(builder, "cudaLaunchKernel", 5 * kMs, 60 * kMs);
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->call_ns, 50 * kMs);
}

TEST(LateThread, TimeInOtherCallsIsCountedApartFromTheCallThatEndedTheGap) {
  Session session = LateAfterOtherCalls();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->other_calls, 2u);
  EXPECT_EQ(gap.late_thread->other_calls_ns, 4 * kMs);
}

// A first launch that loads its kernel's module (CUDA's lazy loading) keeps the GPU idle on the
// CPU inside the launch: named as loading a module, not as a thread late to launch.
TEST(ModuleLoading, AFirstLaunchThatLoadsAModuleIsNamedSo) {
  for (bool thread_named : {true, false}) {
    SCOPED_TRACE(thread_named);
    Session session = FirstLaunchLoadingAModule(thread_named);
    Analysis diagnosis = Analyze(session, {});
    const GpuGap& gap = OnlyGap(diagnosis);
    EXPECT_EQ(gap.module_load_ns, 45 * kMs);
    ASSERT_GE(gap.cause, 0);
    const Cause& cause = diagnosis.causes[gap.cause];
    EXPECT_EQ(cause.kind, CauseKind::kModuleLoad);
    EXPECT_EQ(cause.thread_tid, 11u);
    ASSERT_NE(cause.launch, nullptr);
    EXPECT_EQ(session.ApiName(*cause.launch), "cuLaunchKernel");
    EXPECT_TRUE(cause.loaded_in_launch);
    EXPECT_EQ(cause.gpu_idle_ns, gap.duration());
    std::string text = RenderDiagnosisText(session, diagnosis, 5);
    EXPECT_NE(text.find("the GPU waited for \"python3\" (11) on CPU 50.0 ms in cuLaunchKernel; the "
                        "driver spent 45.0 ms of the wait loading a CUDA module; cause 1\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("late to launch"), std::string::npos) << text;
  }
}

// On the H200, torch's first use of a kernel loads its module in driver calls before the launch
// (cuLibraryLoadData, also inside cudaFuncGetAttributes), most of it outside CUPTI's overhead
// records: their time counts as loading, once where the two overlap.
TEST(ModuleLoading, LoadsInDriverCallsBeforeTheLaunchAreNamedSo) {
  Session session = ModulesLoadedBeforeTheLaunch();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  EXPECT_EQ(gap.module_load_ns, 36 * kMs);
  ASSERT_GE(gap.cause, 0);
  const Cause& cause = diagnosis.causes[gap.cause];
  EXPECT_EQ(cause.kind, CauseKind::kModuleLoad);
  EXPECT_EQ(cause.thread_tid, 11u);
  ASSERT_NE(cause.launch, nullptr);
  EXPECT_EQ(session.ApiName(*cause.launch), "cudaLaunchKernel");
  EXPECT_FALSE(cause.loaded_in_launch);
}

TEST(ModuleLoading, AShortLoadInALongGapLeavesTheThreadLate) {
  Session session = ShortLoadInALongGap();
  Analysis diagnosis = Analyze(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  EXPECT_EQ(gap.module_load_ns, 4 * kMs);
  ASSERT_GE(gap.cause, 0);
  EXPECT_EQ(diagnosis.causes[gap.cause].kind, CauseKind::kLateHost);
  EXPECT_EQ(diagnosis.causes[gap.cause].thread_tid, 11u);
}

}  // namespace
}  // namespace gprof::collector
