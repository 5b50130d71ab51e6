// The slow CUDA calls (slow_calls.h): where each call's time went, the freezes of slow calls and
// their holders, and what the GPU was doing meanwhile.
#include "collector/analysis/slow_calls.h"

#include <gtest/gtest.h>

#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

TEST(Analysis, ConvoyBehindASleepingHolderIsOneFreezeWithOneCause) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});

  ASSERT_EQ(analysis.blocked_calls.size(), 4u);
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  const std::vector<CallsInFreeze> freezes = CallFreezes(analysis);
  const CallsInFreeze& freeze = freezes[0];
  EXPECT_EQ(freeze.thread_count(), 3u);
  EXPECT_EQ(freeze.object.kind, WaitKind::kFutex);
  EXPECT_EQ(freeze.object.address, kLock);
  EXPECT_EQ(freeze.object.kernel_function, "futex_wait_queue");
  ASSERT_TRUE(freeze.holder.has_value());
  EXPECT_EQ(freeze.holder->tid, kHolder);
  ASSERT_NE(freeze.holder->call, nullptr);
  EXPECT_EQ(session.ApiName(*freeze.holder->call), "cudaDeviceSynchronize");
  // The holder slept (on its own condition variable) while holding the lock, woken by the GPU.
  ASSERT_TRUE(freeze.holder->own_wait.has_value());
  EXPECT_EQ(freeze.holder->own_wait->address, kCondvar);
  EXPECT_EQ(freeze.holder->own_waker_tid, kGpu);
  EXPECT_GT(freeze.holder->asleep_ns, 35 * kMs);

  ASSERT_EQ(freeze.members.size(), 3u);
  EXPECT_FALSE(freeze.members[0].passed_on);
  EXPECT_EQ(freeze.members[0].woken_by_tid, kHolder);
  EXPECT_TRUE(freeze.members[1].passed_on);
  EXPECT_TRUE(freeze.members[2].passed_on);
  for (const FreezeMember& member : freeze.members) {
    const BlockedCall& blocked = analysis.blocked_calls[member.blocked_call];
    EXPECT_EQ(session.ApiName(*blocked.call), "cudaLaunchKernel");
    EXPECT_EQ(blocked.freeze, 0);
    // Asleep from the wait's start to its wake, runnable from the wake to the switch-in.
    EXPECT_EQ(blocked.runnable_ns, 10000u);
    EXPECT_EQ(blocked.asleep_ns + blocked.runnable_ns + blocked.on_cpu_ns,
              blocked.call->duration());
  }
  // The holder's own slow call is explained, not a member of the freeze it caused.
  EXPECT_EQ(analysis.blocked_calls[freeze.holder->blocked_call].freeze, -1);
}

TEST(Analysis, HolderSpinningOnCpuIsSaidSo) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaFree", 0, 30 * kMs);  // spins in the driver: never off-CPU
  for (uint32_t tid : {11u, 12u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 1 * kMs, 30 * kMs);
    builder.FutexSleep(tid, kLock, 1 * kMs + 100, 30 * kMs - 20000, 30 * kMs - 10000, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  const std::vector<CallsInFreeze> freezes = CallFreezes(analysis);
  const auto& holder = *freezes[0].holder;
  EXPECT_EQ(holder.tid, kHolder);
  EXPECT_EQ(session.ApiName(*holder.call), "cudaFree");
  EXPECT_EQ(holder.asleep_ns, 0u);
  EXPECT_GT(holder.on_cpu_ns, 28 * kMs);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("on CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("working or spinning while holding it"), std::string::npos) << text;
}

TEST(Analysis, TheLongSleepNamesTheHolderNotAnEarlierShortOne) {
  // The holder takes the lock briefly (cudaMalloc), wakes a waiter that then loses the lock to the
  // holder's next call (cudaFree, held 30 ms): the waiter sleeps twice in one launch.
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMalloc", 0, 100000);
  builder.Call(kHolder, "cudaFree", 200000, 30 * kMs);
  for (uint32_t tid : {11u, 12u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 50000, 30 * kMs + 50000);
    builder.FutexSleep(tid, kLock, 60000, 90000, 95000, kHolder);  // woken by cudaMalloc's unlock
    builder.FutexSleep(tid, kLock, 210000, 30 * kMs - 10000, 30 * kMs, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  ASSERT_TRUE(CallFreezes(analysis)[0].holder.has_value());
  EXPECT_EQ(session.ApiName(*CallFreezes(analysis)[0].holder->call), "cudaFree");
  EXPECT_EQ(CallFreezes(analysis)[0].holder->release_ns, 30 * kMs - 10000);
}

TEST(Analysis, AHolderThatWaitedForTheLockFirstIsStillTheHolder) {
  // Seen on the H200: the freeing thread waited a few microseconds for a launcher to drop the
  // driver lock, then held it 30 ms spinning in cudaFree while every launcher queued behind it.
  SessionBuilder builder;
  builder.Thread(11, "launcher-0");
  builder.Call(11, "cudaLaunchKernel", 0, 200000);
  builder.Call(kHolder, "cudaFree", 100000, 30 * kMs);
  builder.FutexSleep(kHolder, kLock, 110000, 190000, 195000, 11);  // waits for launcher-0's launch
  for (uint32_t tid : {12u, 13u, 14u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 300000 + tid, 30 * kMs + 50000);
    builder.FutexSleep(tid, kLock, 310000 + tid, 30 * kMs - 10000, 30 * kMs, kHolder);
  }
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  const std::vector<CallsInFreeze> freezes = CallFreezes(analysis);
  const CallsInFreeze& freeze = freezes[0];
  ASSERT_TRUE(freeze.holder.has_value());
  EXPECT_EQ(freeze.holder->tid, kHolder);
  EXPECT_EQ(session.ApiName(*freeze.holder->call), "cudaFree");
  EXPECT_EQ(freeze.holder->hold_start_ns, 195000u);
  EXPECT_EQ(freeze.thread_count(), 3u);
  for (const FreezeMember& member : freeze.members) {
    EXPECT_NE(analysis.blocked_calls[member.blocked_call].call->tid, kHolder);
    EXPECT_FALSE(member.passed_on);
  }
}

TEST(Analysis, SeparateEpisodesOnOneLockAreSeparateFreezes) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  AddConvoy(&builder, 200 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(CallFreezes(analysis).size(), 2u);
  EXPECT_LT(CallFreezes(analysis)[0].end_ns, CallFreezes(analysis)[1].start_ns);
  EXPECT_EQ(CallFreezes(analysis)[1].holder->tid, kHolder);
}

TEST(Analysis, PreemptionIsWaitingForACpuNotSleeping) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMemcpy", 0, 5 * kMs);
  builder.Preempted(kHolder, 1 * kMs, 3 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  const BlockedCall& blocked = analysis.blocked_calls[0];
  EXPECT_EQ(blocked.runnable_ns, 2 * kMs);
  EXPECT_EQ(blocked.asleep_ns, 0u);
  EXPECT_EQ(blocked.on_cpu_ns, 3 * kMs);
  EXPECT_FALSE(blocked.main_object.has_value());
  EXPECT_TRUE(CallFreezes(analysis).empty());
}

TEST(Analysis, ThresholdSelectsTheCallsToExplain) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaEventQuery", 0, kMs / 2);
  builder.Call(kHolder, "cudaEventSynchronize", kMs, 3 * kMs);
  Session session = builder.Build();
  EXPECT_EQ(Analyze(session, {}).blocked_calls.size(), 1u);
  EXPECT_EQ(Analyze(session, {.threshold_ns = kMs / 4}).blocked_calls.size(), 2u);
}

TEST(Analysis, SingleBlockedCallNamesItsWakerAndWhatItWasDoing) {
  SessionBuilder builder;
  builder.Thread(11, "launcher");
  builder.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  builder.Call(11, "cudaLaunchKernel", 1 * kMs, 20 * kMs);
  builder.FutexSleep(11, kLock, 1 * kMs + 100, 20 * kMs - 5000, 20 * kMs - 1000, kHolder);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_TRUE(CallFreezes(analysis).empty());
  const BlockedCall& launch = analysis.blocked_calls[1];
  ASSERT_EQ(launch.waits.size(), 1u);
  EXPECT_EQ(launch.waits[0].waker_tid, kHolder);
  ASSERT_NE(launch.waits[0].waker_call, nullptr);
  EXPECT_EQ(session.ApiName(*launch.waits[0].waker_call), "cudaDeviceSynchronize");
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("woken by \"holder\" (10), inside cudaDeviceSynchronize"), std::string::npos)
      << text;
}

TEST(GpuDuringCalls, BusyForTheWholeCallNamesWhatRanAndWhoLaunchedIt) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "waiter");
  builder.Call(kHolder, "cudaLaunchKernel", 0, 10000, /*correlation_id=*/1);
  builder.Kernel(13, 20000, 30 * kMs, 1);
  builder.Call(11, "cudaStreamSynchronize", 1 * kMs, 25 * kMs, 2);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const BlockedCall& sync = SlowCallOf(analysis, 11);
  ASSERT_TRUE(sync.gpu.has_value());
  EXPECT_EQ(sync.gpu->window_ns, 24 * kMs);
  EXPECT_EQ(sync.gpu->busy_ns, 24 * kMs);
  ASSERT_NE(sync.gpu->main_activity, nullptr);
  EXPECT_EQ(sync.gpu->main_activity->stream_id, 13u);
  EXPECT_EQ(sync.gpu->main_overlap_ns, 24 * kMs);
  ASSERT_NE(sync.gpu->main_launcher, nullptr);
  EXPECT_EQ(sync.gpu->main_launcher->tid, kHolder);
  EXPECT_TRUE(sync.gpu->own_work.empty());
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("the GPU was running Spin on stream 13 for 24.0 ms, launched by "
                      "\"holder\" (10) in cudaLaunchKernel; busy 100% of the call"),
            std::string::npos)
      << text;
}

TEST(GpuDuringCalls, AnIdleGpuIsSaidToBeIdle) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Kernel(13, 0, 5 * kMs, 0);
  builder.Kernel(13, 16 * kMs, 17 * kMs, 0);
  builder.Call(kHolder, "cudaFree", 10 * kMs, 15 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const BlockedCall& free_call = SlowCallOf(analysis, kHolder);
  ASSERT_TRUE(free_call.gpu.has_value()) << "CUPTI capture: no work means idle";
  EXPECT_EQ(free_call.gpu->busy_ns, 0u);
  EXPECT_EQ(free_call.gpu->main_activity, nullptr);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("the GPU was idle during the call"), std::string::npos) << text;
}

TEST(GpuDuringCalls, PartlyBusy) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Kernel(13, 0, 12 * kMs, 0);
  builder.Call(kHolder, "cudaFree", 10 * kMs, 14 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const GpuDuringCall& gpu = *SlowCallOf(analysis, kHolder).gpu;
  EXPECT_EQ(gpu.busy_ns, 2 * kMs);
  EXPECT_EQ(gpu.main_overlap_ns, 2 * kMs);
  EXPECT_NE(RenderTextReport(session, analysis).find("busy 50% of the call"), std::string::npos);
}

TEST(GpuDuringCalls, OverlappingWorkOnTwoStreamsCountsOnce) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Kernel(13, 1 * kMs, 7 * kMs, 0, "First()");
  builder.Kernel(14, 4 * kMs, 9 * kMs, 0, "Second()");
  builder.Call(kHolder, "cudaDeviceSynchronize", 0, 10 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const GpuDuringCall& gpu = *SlowCallOf(analysis, kHolder).gpu;
  EXPECT_EQ(gpu.busy_ns, 8 * kMs) << "1..9 ms, not 6 + 5";
  ASSERT_NE(gpu.main_activity, nullptr);
  EXPECT_EQ(session.KernelName(std::get<GpuKernel>(gpu.main_activity->detail)), "First()");
  EXPECT_EQ(gpu.main_overlap_ns, 6 * kMs);
}

TEST(GpuDuringCalls, ALongKernelThatStartedEarlierIsFound) {
  // Many short kernels start after the long one; the long one still overlaps the call longest.
  SessionBuilder builder;
  builder.Cupti();
  builder.Kernel(13, 0, 50 * kMs, 0, "Long()");
  for (uint64_t i = 0; i < 20; ++i) builder.Kernel(14, i * kMs, i * kMs + 100000, 0, "Short()");
  builder.Call(kHolder, "cudaDeviceSynchronize", 30 * kMs, 40 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const GpuDuringCall& gpu = *SlowCallOf(analysis, kHolder).gpu;
  EXPECT_EQ(gpu.busy_ns, 10 * kMs);
  EXPECT_EQ(session.KernelName(std::get<GpuKernel>(gpu.main_activity->detail)), "Long()");
}

TEST(GpuDuringCalls, NothingIsSaidWithoutAGpuTimeline) {
  SessionBuilder builder;  // interposition: calls only
  builder.Call(kHolder, "cudaFree", 0, 5 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  EXPECT_FALSE(SlowCallOf(analysis, kHolder).gpu.has_value());
  std::string text = RenderTextReport(session, analysis);
  EXPECT_EQ(text.find("GPU was"), std::string::npos) << text;
  EXPECT_TRUE(RenderJsonReport(session, analysis)["slow_calls"][0]["gpu"].is_null());
}

TEST(GpuDuringCalls, ACallsOwnCopyIsNamedAsItsOwn) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Call(kHolder, "cudaMemcpy", 0, 5 * kMs, 5);
  builder.Memcpy(7, 1 * kMs, 4500000, 5, 1 << 20);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  const GpuDuringCall& gpu = *SlowCallOf(analysis, kHolder).gpu;
  ASSERT_EQ(gpu.own_work.size(), 1u);
  EXPECT_EQ(gpu.own_work[0], gpu.main_activity);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("the GPU was running its own Memcpy HtoD of 1.0 MiB (pageable to device) on "
                      "stream 7 for 3.5 ms; busy 70% of the call"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, analysis)["slow_calls"][0]["gpu"];
  EXPECT_EQ(json["busy_ns"], 3500000);
  EXPECT_DOUBLE_EQ(json["busy_fraction"].get<double>(), 0.7);
  ASSERT_EQ(json["own_work"].size(), 1u);
  EXPECT_EQ(json["own_work"][0]["kind"], "memcpy");
  EXPECT_EQ(json["own_work"][0]["copy_kind"], "HtoD");
  EXPECT_EQ(json["own_work"][0]["from"], "pageable");
  EXPECT_EQ(json["main_activity"]["name"], "Memcpy HtoD");
}

TEST(GpuDuringCalls, OwnWorkThatRanLaterIsStillNamed) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Call(kHolder, "cudaLaunchKernel", 0, 3 * kMs, 9);
  builder.Kernel(13, 4 * kMs, 6 * kMs, 9);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("the GPU was idle during the call; its own work: Spin on stream "
                      "13, 2.0 ms at +0.004 s"),
            std::string::npos)
      << text;
}

TEST(GpuDuringCalls, AFreezeSaysWhatTheGpuRanDuringTheHoldersCall) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Call(kHolder, "cudaLaunchKernel", 0, 50000, 1);
  builder.Kernel(13, 100000, 30 * kMs + 100000, 1);
  builder.Call(kHolder, "cudaFree", 200000, 30 * kMs + 200000, 2);  // spins until the GPU is idle
  for (uint32_t tid : {11u, 12u}) {
    builder.Thread(tid, "launcher");
    builder.Call(tid, "cudaLaunchKernel", 1 * kMs, 30 * kMs + 200000, 2 + tid);
    builder.FutexSleep(tid, kLock, 1 * kMs + 100, 30 * kMs + 180000, 30 * kMs + 190000, kHolder);
  }
  builder.Stack(kHolder, 200000, {"cudaFree+0x10", "FreeLoop(int)+0x1c"});
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(CallFreezes(analysis).size(), 1u);
  const std::vector<CallsInFreeze> freezes = CallFreezes(analysis);
  const HolderActivity& holder = *freezes[0].holder;
  ASSERT_TRUE(holder.gpu.has_value());
  EXPECT_EQ(holder.gpu->busy_ns, 29900000u);
  ASSERT_NE(holder.gpu->main_launcher, nullptr);
  EXPECT_EQ(session.ApiName(*holder.gpu->main_launcher), "cudaLaunchKernel");
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(
      text.find("\n  gpu      the GPU was running Spin on stream 13 for 29.9 ms, "
                "launched by \"holder\" (10) in cudaLaunchKernel; busy 99% of its cudaFree\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("inside cudaFree (+0.000 s, 30.0 ms)\n             at cudaFree+0x10\n"
                      "                FreeLoop+0x1c\n"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, analysis)["freezes"][0]["holder"];
  EXPECT_EQ(json["gpu"]["main_launcher"]["api"], "cudaLaunchKernel");
  EXPECT_EQ(json["native_stack"], (nlohmann::json{"cudaFree+0x10", "FreeLoop(int)+0x1c"}));
}

// A thread's wait clipped to a window it began before, woken before the window: runnable in it.
TEST(Analysis, AWaitWokenBeforeTheWindowIsRunnableInIt) {
  SessionBuilder builder;
  builder.Thread(22, "late-runner");
  LockSleep(&builder, 22, kLock, 1 * kMs, 20 * kMs, 27 * kMs, kHolder, kHolder);
  Session session = builder.Build();
  WaitReader reader(session);
  TimeSplit split = reader.Split(22, 21 * kMs, 30 * kMs);
  EXPECT_EQ(split.asleep_ns, 0u);
  EXPECT_EQ(split.runnable_ns, 6 * kMs);
  EXPECT_EQ(split.on_cpu_ns, 3 * kMs);
  ASSERT_EQ(split.waits.size(), 1u);
  EXPECT_EQ(split.waits[0].asleep_ns(), 0u);
  EXPECT_EQ(split.waits[0].waker_tid, kHolder);
  TimeSplit whole = reader.Split(22, 0, 30 * kMs);
  EXPECT_EQ(whole.asleep_ns, 19 * kMs);
  EXPECT_EQ(whole.runnable_ns, 7 * kMs);
}

}  // namespace
}  // namespace gprof::collector
