// The analysis and the reports on hand-built sessions whose right answer is known: a lock convoy
// behind a holder that sleeps, a holder that spins, preemption, separate freezes on one lock; and
// what the GPU was doing meanwhile.
#include "analysis.h"

#include <gtest/gtest.h>

#include <array>
#include <map>

#include "diagnosis.h"
#include "gpu_timeline.h"
#include "gpu_vocabulary.h"
#include "kernel_events.h"
#include "report.h"
#include "report_diagnosis.h"
#include "report_format.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kPid = 100;
constexpr uint32_t kHolder = 10;
constexpr uint32_t kGpu = 20;
constexpr uint64_t kLock = 0x7f0000001000;
constexpr uint64_t kCondvar = 0x7f0000002000;
constexpr int32_t kFutexStack = 1;
constexpr int32_t kRwsemStack = 2;
constexpr uint64_t kMs = 1'000'000;

class SessionBuilder {
 public:
  SessionBuilder() {
    session_.directory = "/tmp/session";
    session_.meta.start_monotonic_ns = 0;
    session_.kernel_stacks[kFutexStack] = {1, 2, 3, 4};
    session_.kernel_stacks[kRwsemStack] = {1, 2, 5};
    session_.kernel_symbols = {{1, "__schedule+0x1"},
                               {2, "schedule+0x2"},
                               {3, "futex_wait_queue+0x3"},
                               {4, "futex_wait+0x4"},
                               {5, "rwsem_down_read_slowpath+0x5"}};
    Thread(kHolder, "holder");
    Thread(kGpu, "fake-gpu");
  }
  void Thread(uint32_t tid, const std::string& name) {
    session_.threads[tid] = {kPid, tid, name, 0};
  }
  void Call(uint32_t tid, const std::string& api, uint64_t enter, uint64_t exit,
            uint64_t correlation_id = 0, uint32_t pid = kPid) {
    uint32_t index = 0;
    while (index < session_.api_names.size() && session_.api_names[index] != api) ++index;
    if (index == session_.api_names.size()) session_.api_names.push_back(api);
    session_.api_calls.push_back({enter, exit, 0, correlation_id, pid, tid, index, 0, 0});
  }
  // The process's CUDA calls and GPU work recorded through CUPTI.
  void Cupti() {
    session_.processes[kPid].pid = kPid;
    session_.processes[kPid].capture = {CaptureMode::kCupti, 130001, "/usr/lib/libcupti.so.13"};
  }
  void Kernel(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
              const std::string& name = "Spin(long long)", uint32_t device = 0,
              uint32_t pid = kPid) {
    uint32_t index = 0;
    while (index < session_.kernel_names.size() && session_.kernel_names[index] != name) ++index;
    if (index == session_.kernel_names.size()) session_.kernel_names.push_back(name);
    GpuKernel kernel;
    kernel.name_index = index;
    Gpu(stream, start, end, correlation_id, kernel, device, pid);
  }
  void Memcpy(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
              uint64_t bytes) {
    Gpu(stream, start, end, correlation_id, GpuMemcpy{bytes, 1, 1, 3, false});  // HtoD, pageable
  }
  void Gpu(uint32_t stream, uint64_t start, uint64_t end, uint64_t correlation_id,
           decltype(GpuActivity::detail) detail, uint32_t device = 0, uint32_t pid = kPid) {
    GpuActivity activity;
    activity.pid = pid;
    activity.device_id = device;
    activity.stream_id = stream;
    activity.start_ns = start;
    activity.end_ns = end;
    activity.correlation_id = correlation_id;
    activity.detail = std::move(detail);
    session_.gpu_activities.push_back(activity);
  }
  void Stack(uint32_t tid, uint64_t enter, std::vector<std::string> symbols) {
    NativeStack& stack = session_.call_stacks[{tid, enter}];
    stack.pid = kPid;
    for (size_t i = 0; i < symbols.size(); ++i) stack.ips.push_back(0x7f0000400000 + i * 0x10);
    stack.symbols = std::move(symbols);
  }
  // A futex wait on `address` from `start` to `end`, woken at `wake` by `waker`.
  void FutexSleep(uint32_t tid, uint64_t address, uint64_t start, uint64_t wake, uint64_t end,
                  uint32_t waker) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.wake_ns = wake;
    interval.end_ns = end;
    interval.waker_pid = kPid;
    interval.waker_tid = waker;
    interval.waker_comm =
        session_.CommIndex(session_.threads.count(waker) ? session_.threads[waker].name : "");
    interval.kstack_id = kFutexStack;
    interval.raw_state = 1;
    session_.off_cpu.push_back(interval);
    FutexCall futex;
    futex.pid = kPid;
    futex.tid = tid;
    futex.start_ns = start - 1000;
    futex.end_ns = end + 1000;
    futex.uaddr = address;
    futex.op = 0x80;  // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
    session_.futex_calls.push_back(futex);
  }
  // Asleep in `state` from `start` to `end`, woken at `wake` by `waker` (0: an interrupt).
  OffCpuInterval& Sleep(uint32_t tid, uint64_t start, uint64_t wake, uint64_t end, uint32_t waker,
                        uint32_t state = 2, int32_t stack = kRwsemStack) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.wake_ns = wake;
    interval.end_ns = end;
    interval.waker_pid = waker != 0 ? kPid : 0;
    interval.waker_tid = waker;
    interval.waker_comm =
        session_.CommIndex(session_.threads.count(waker) ? session_.threads[waker].name : "");
    interval.kstack_id = stack;
    interval.raw_state = state;
    session_.off_cpu.push_back(interval);
    return session_.off_cpu.back();
  }
  // For what the builder has no helper for: the kernel recorder's other records, maps.
  Session& session() { return session_; }
  void Preempted(uint32_t tid, uint64_t start, uint64_t end) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.end_ns = end;
    session_.off_cpu.push_back(interval);
  }
  Session Build() {
    auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
    std::sort(session_.api_calls.begin(), session_.api_calls.end(),
              [](const ApiCall& a, const ApiCall& b) { return a.enter_ns < b.enter_ns; });
    std::sort(session_.off_cpu.begin(), session_.off_cpu.end(), by_start);
    std::sort(session_.futex_calls.begin(), session_.futex_calls.end(), by_start);
    std::sort(session_.gpu_activities.begin(), session_.gpu_activities.end(), by_start);
    std::sort(session_.futex_waitv_calls.begin(), session_.futex_waitv_calls.end(), by_start);
    std::sort(session_.lock_waits.begin(), session_.lock_waits.end(), by_start);
    std::sort(session_.device_waits.begin(), session_.device_waits.end(), by_start);
    std::sort(session_.page_faults.begin(), session_.page_faults.end(), by_start);
    std::sort(session_.memory_map_calls.begin(), session_.memory_map_calls.end(), by_start);
    return session_;
  }

 private:
  Session session_;
};

// Three launchers queue on the driver lock while the holder sleeps in cudaDeviceSynchronize
// waiting for the GPU; the holder wakes the first, each wakes the next (a glibc mutex convoy).
void AddConvoy(SessionBuilder* b, uint64_t at) {
  b->Call(kHolder, "cudaDeviceSynchronize", at, at + 40 * kMs);
  b->FutexSleep(kHolder, kCondvar, at + 1 * kMs / 10, at + 39 * kMs, at + 39 * kMs + 20000, kGpu);
  for (uint32_t i = 0; i < 3; ++i) {
    uint32_t tid = 11 + i;
    b->Thread(tid, "launcher-" + std::to_string(i));
    uint64_t enter = at + (2 + i) * kMs;
    uint64_t wake = at + 40 * kMs - 50000 + i * 20000;  // the holder releases just before returning
    b->Call(tid, "cudaLaunchKernel", enter, wake + 30000);
    b->FutexSleep(tid, kLock, enter + 5000, wake, wake + 10000, i == 0 ? kHolder : tid - 1);
  }
}

TEST(Analysis, ConvoyBehindASleepingHolderIsOneFreezeWithOneCause) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});

  ASSERT_EQ(analysis.blocked_calls.size(), 4u);
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const Freeze& freeze = analysis.freezes[0];
  EXPECT_EQ(freeze.thread_count, 3u);
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
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const auto& holder = *analysis.freezes[0].holder;
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
  ASSERT_EQ(analysis.freezes.size(), 1u);
  ASSERT_TRUE(analysis.freezes[0].holder.has_value());
  EXPECT_EQ(session.ApiName(*analysis.freezes[0].holder->call), "cudaFree");
  EXPECT_EQ(analysis.freezes[0].holder->release_ns, 30 * kMs - 10000);
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
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const Freeze& freeze = analysis.freezes[0];
  ASSERT_TRUE(freeze.holder.has_value());
  EXPECT_EQ(freeze.holder->tid, kHolder);
  EXPECT_EQ(session.ApiName(*freeze.holder->call), "cudaFree");
  EXPECT_EQ(freeze.holder->hold_start_ns, 195000u);
  EXPECT_EQ(freeze.thread_count, 3u);
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
  ASSERT_EQ(analysis.freezes.size(), 2u);
  EXPECT_LT(analysis.freezes[0].end_ns, analysis.freezes[1].start_ns);
  EXPECT_EQ(analysis.freezes[1].holder->tid, kHolder);
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
  EXPECT_TRUE(analysis.freezes.empty());
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
  ASSERT_TRUE(analysis.freezes.empty());
  const BlockedCall& launch = analysis.blocked_calls[1];
  ASSERT_EQ(launch.waits.size(), 1u);
  EXPECT_EQ(launch.waits[0].waker_tid, kHolder);
  ASSERT_NE(launch.waits[0].waker_call, nullptr);
  EXPECT_EQ(session.ApiName(*launch.waits[0].waker_call), "cudaDeviceSynchronize");
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("woken by holder (10), inside cudaDeviceSynchronize"), std::string::npos)
      << text;
}

// ---------------------------------------------------------------------------------------------
// The GPU during slow calls.

// The slow call of `tid` that is the only one of its thread.
const BlockedCall& SlowCallOf(const Analysis& analysis, uint32_t tid) {
  for (const BlockedCall& blocked : analysis.blocked_calls) {
    if (blocked.call->tid == tid) return blocked;
  }
  ADD_FAILURE() << "no slow call of " << tid;
  return analysis.blocked_calls.front();
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
  EXPECT_NE(text.find("the GPU was running Spin(long long) on stream 13 for 24.0 ms, launched by "
                      "holder (10) in cudaLaunchKernel; busy 100% of the call"),
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
  EXPECT_NE(text.find("the GPU was idle during the call; its own work: Spin(long long) on stream "
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
  ASSERT_EQ(analysis.freezes.size(), 1u);
  const HolderActivity& holder = *analysis.freezes[0].holder;
  ASSERT_TRUE(holder.gpu.has_value());
  EXPECT_EQ(holder.gpu->busy_ns, 29900000u);
  ASSERT_NE(holder.gpu->main_launcher, nullptr);
  EXPECT_EQ(session.ApiName(*holder.gpu->main_launcher), "cudaLaunchKernel");
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\n  gpu      the GPU was running Spin(long long) on stream 13 for 29.9 ms, "
                      "launched by holder (10) in cudaLaunchKernel; busy 99% of its cudaFree\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("inside cudaFree (+0.000 s, 30.0 ms)\n             at cudaFree+0x10 <- "
                      "FreeLoop(int)+0x1c\n"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, analysis)["freezes"][0]["holder"];
  EXPECT_EQ(json["gpu"]["main_launcher"]["api"], "cudaLaunchKernel");
  EXPECT_EQ(json["native_stack"], (nlohmann::json{"cudaFree+0x10", "FreeLoop(int)+0x1c"}));
}

TEST(GpuSummary, CountsKernelsByNameAndLaunchesWithoutTheirKernel) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Call(kHolder, "cudaLaunchKernel", 0, 1000, 1);
  builder.Kernel(13, 2000, 5000, 1, "A()");
  builder.Call(kHolder, "cudaLaunchKernel", 10000, 11000, 2);
  builder.Kernel(13, 12000, 13000, 2, "B()");
  builder.Call(kHolder, "__cudaLaunchKernel", 20000, 21000, 3);
  builder.Kernel(13, 22000, 30000, 3, "A()");
  builder.Call(kHolder, "cuLaunchKernel", 40000, 41000, 4);  // its kernel was not recorded
  builder.Call(kHolder, "cudaMemcpyAsync", 50000, 51000, 5);
  builder.Memcpy(13, 52000, 53000, 5, 4096);
  builder.Call(kHolder, "cudaLaunchHostFunc", 60000, 61000, 6);  // runs no kernel: not counted
  Session session = builder.Build();
  GpuSummary gpu = Analyze(session, {}).gpu;
  EXPECT_EQ(gpu.kernels, 3u);
  EXPECT_EQ(gpu.copies, 1u);
  EXPECT_EQ(gpu.launch_calls, 4u);
  EXPECT_EQ(gpu.launch_calls_with_kernel, 3u);
  ASSERT_EQ(gpu.kernels_by_time.size(), 2u);
  EXPECT_EQ(session.kernel_names[gpu.kernels_by_time[0].name_index], "A()");
  EXPECT_EQ(gpu.kernels_by_time[0].count, 2u);
  EXPECT_EQ(gpu.kernels_by_time[0].total_ns, 3000u + 8000u);
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("gpu       3 kernels, 1 copies, 0 memsets; 1 of 4 kernel launches have no "
                      "kernel recorded"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, Analyze(session, {}));
  EXPECT_EQ(json["gpu"]["launch_calls_with_kernel"], 3);
  EXPECT_EQ(json["gpu"]["kernels"][0]["name"], "A()");
}

TEST(GpuCorrelation, JoinsCallsAndWorkOfOneProcessBothWays) {
  Session session;
  session.api_names = {"cudaLaunchKernel", "cuLaunchKernel", "cudaFree"};
  session.kernel_names = {"k"};
  session.api_calls = {
      {0, 100, 0, 7, 100, 1, 0, 0, 0},    // the runtime call
      {10, 90, 0, 7, 100, 1, 1, 0, 0},    // the driver call inside it, same correlation id
      {20, 80, 0, 7, 200, 2, 0, 0, 0},    // another process, same correlation id
      {200, 300, 0, 0, 100, 1, 2, 0, 0},  // seen by interposition
  };
  auto kernel = [](uint32_t pid, uint64_t start, uint64_t correlation_id) {
    GpuActivity activity;
    activity.pid = pid;
    activity.start_ns = start;
    activity.end_ns = start + 10;
    activity.correlation_id = correlation_id;
    activity.detail = GpuKernel{};
    return activity;
  };
  session.gpu_activities = {kernel(100, 110, 7), kernel(200, 120, 7), kernel(100, 130, 7),
                            kernel(100, 140, 8)};
  GpuCorrelation correlation(session);

  auto of_runtime = correlation.ActivitiesOf(session.api_calls[0]);
  ASSERT_EQ(of_runtime.size(), 2u);
  EXPECT_EQ(of_runtime[0], &session.gpu_activities[0]);
  EXPECT_EQ(of_runtime[1], &session.gpu_activities[2]);
  EXPECT_EQ(correlation.ActivitiesOf(session.api_calls[1]).size(), 2u);
  auto of_other = correlation.ActivitiesOf(session.api_calls[2]);
  ASSERT_EQ(of_other.size(), 1u);
  EXPECT_EQ(of_other[0], &session.gpu_activities[1]);
  EXPECT_TRUE(correlation.ActivitiesOf(session.api_calls[3]).empty());

  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[0]), &session.api_calls[0])
      << "the outermost call";
  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[1]), &session.api_calls[2]);
  EXPECT_EQ(correlation.LauncherOf(session.gpu_activities[3]), nullptr);
}

TEST(Report, ShowsTheFirstFramesOfASlowCallsStackAndJsonAll) {
  SessionBuilder builder;
  builder.Call(kHolder, "cudaMalloc", 0, 5 * kMs);
  std::vector<std::string> frames;
  for (int i = 0; i < 10; ++i) frames.push_back("f" + std::to_string(i) + "()+0x1");
  frames[9] = "";  // no symbol: named by its mapping
  builder.Stack(kHolder, 0, frames);
  Session session = builder.Build();
  session.processes[kPid].maps = {
      {0, {{0x7f0000400000, 0x7f0000500000, 0x1000, "r-xp", "/lib/libapp.so"}}}};
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\n      at f0()+0x1 <- f1()+0x1 <- f2()+0x1 <- f3()+0x1 <- f4()+0x1 <- "
                      "f5()+0x1 <- f6()+0x1 <- f7()+0x1 <- ... (2 more)\n"),
            std::string::npos)
      << text;
  nlohmann::json stack = RenderJsonReport(session, analysis)["slow_calls"][0]["native_stack"];
  ASSERT_EQ(stack.size(), 10u);
  EXPECT_EQ(stack[9], "libapp.so+0x1090");
}

TEST(Report, NamesEachProcesssCaptureAndTheClockCorrected) {
  SessionBuilder builder;
  builder.Cupti();
  Session session = builder.Build();
  // Within its uncertainty, and within a microsecond: the clocks agreed, nothing to say.
  session.processes[kPid].clock_offsets = {
      {1000, 1'200'000, 1000}, {2000, 50, 100}, {3000, 500, 100}};
  Process interposed;
  interposed.pid = 200;
  interposed.capture = {CaptureMode::kInterposition, 0, "CUPTI subscriber taken by another tool"};
  session.processes[200] = interposed;
  Process also_cupti;
  also_cupti.pid = 300;
  also_cupti.capture = session.processes[kPid].capture;
  session.processes[300] = also_cupti;
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("  capture   CUPTI 13.0 (API version 130001), /usr/lib/libcupti.so.13: "
                      "pids 100, 300\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  capture   interposition, no GPU timeline (CUPTI subscriber taken by "
                      "another tool): pid 200\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  clock     pid 100: CUPTI's clock was 1.2 ms ahead of CLOCK_MONOTONIC "
                      "(+-1.0 us); GPU times corrected\n"),
            std::string::npos)
      << text;
  nlohmann::json processes = RenderJsonReport(session, analysis)["session"]["processes"];
  ASSERT_EQ(processes.size(), 3u);
  EXPECT_EQ(processes[0]["capture"]["mode"], "cupti");
  EXPECT_EQ(processes[0]["clock_offsets"][0]["offset_ns"], 1'200'000);
  EXPECT_EQ(processes[1]["capture"]["mode"], "interposition");
}

TEST(Report, TextAndJsonNameTheFreeze) {
  SessionBuilder builder;
  AddConvoy(&builder, 10 * kMs);
  Session session = builder.Build();
  session.meta.command = {"./app"};
  session.meta.exit_code = 0;
  session.meta.kernel_recording = true;
  Analysis analysis = Analyze(session, {});

  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("FREEZE 1"), std::string::npos) << text;
  EXPECT_NE(text.find("3 threads blocked on one lock"), std::string::npos) << text;
  EXPECT_NE(text.find("holder   holder (10) held it"), std::string::npos) << text;
  EXPECT_NE(text.find("inside cudaDeviceSynchronize"), std::string::npos) << text;
  for (const char* name : {"launcher-0 (11)", "launcher-1 (12)", "launcher-2 (13)"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  EXPECT_NE(text.find("passed it on"), std::string::npos) << text;

  nlohmann::json json = RenderJsonReport(session, analysis);
  ASSERT_EQ(json["freezes"].size(), 1u);
  const auto& freeze = json["freezes"][0];
  EXPECT_EQ(freeze["thread_count"], 3);
  EXPECT_EQ(freeze["holder"]["tid"], kHolder);
  EXPECT_EQ(freeze["holder"]["call"]["api"], "cudaDeviceSynchronize");
  EXPECT_EQ(freeze["object"]["futex_address"], "0x7f0000001000");
  EXPECT_EQ(json["slow_calls"].size(), 4u);
}

TEST(Report, SaysWhatIsMissing) {
  SessionBuilder builder;
  Session session = builder.Build();
  session.meta.kernel_recording = false;
  session.meta.kernel_recording_note = "permission denied";
  session.lost.push_back({"kernel off-CPU intervals: ring buffer full", 42, {{0, 40}, {3, 2}}});
  session.diagnostics.push_back({"/s/inject-1.gpr", 4096, "payload checksum mismatch"});
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("NOT recorded: permission denied"), std::string::npos) << text;
  // The text sums a kind over CPUs; the JSON keeps each CPU's count.
  EXPECT_NE(
      text.find("LOST      42 kernel off-CPU intervals: ring buffer full (cpu 0: 40, cpu 3: 2)\n"),
      std::string::npos)
      << text;
  nlohmann::json lost = RenderJsonReport(session, Analyze(session, {}))["session"]["lost"];
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0]["count"], 42);
  EXPECT_EQ(lost[0]["by_cpu"],
            nlohmann::json::parse(R"([{"cpu": 0, "count": 40}, {"cpu": 3, "count": 2}])"));
  EXPECT_NE(text.find("/s/inject-1.gpr at offset 4096: payload checksum mismatch"),
            std::string::npos)
      << text;
}

// ---------------------------------------------------------------------------------------------
// What the kernel recorder says beyond scheduling: the kernel lock, device wait or page fault a
// sleep was in, the lock's owner and what it was doing, the user stack of the sleep.

constexpr uint64_t kMmapLock = 0xffff888100a0c1e8;
constexpr uint32_t kTrainer = 13;

// `tid` waits from `start` to `end` for the process's mmap_lock, held by `owner`.
void AddMmapLockWait(SessionBuilder* b, uint32_t tid, uint64_t start, uint64_t end,
                     uint32_t owner) {
  LockWait lock;
  lock.pid = kPid;
  lock.tid = tid;
  lock.start_ns = start;
  lock.end_ns = end;
  lock.lock_address = kMmapLock;
  lock.flags = GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK;
  lock.owner_pid = kPid;
  lock.owner_tid = owner;
  lock.owner_comm = "trainer";
  b->session().lock_waits.push_back(lock);
}

// The trainer unmaps 512 MiB, holding the mmap_lock for writing throughout; two launchers fault
// meanwhile and sleep on the lock until the munmap releases it.
Session MunmapFreeze() {
  SessionBuilder b;
  b.Thread(kTrainer, "trainer");
  MemoryMapCall munmap;
  munmap.pid = kPid;
  munmap.tid = kTrainer;
  munmap.start_ns = 5 * kMs;
  munmap.end_ns = 40 * kMs + 5000;
  munmap.syscall = MemorySyscall::kMunmap;
  munmap.address = 0x7e0000000000;
  munmap.length = 512ull << 20;
  b.session().memory_map_calls.push_back(munmap);
  for (uint32_t i = 0; i < 2; ++i) {
    uint32_t tid = 11 + i;
    uint64_t enter = (10 + 2 * i) * kMs;
    b.Thread(tid, "launcher-" + std::to_string(i));
    b.Call(tid, i == 0 ? "cudaLaunchKernel" : "cudaMemcpyAsync", enter, 41 * kMs);
    AddMmapLockWait(&b, tid, enter + 5000, 40 * kMs + 2000, kTrainer);
    b.Sleep(tid, enter + 10000, 40 * kMs, 40 * kMs + 10000, kTrainer);
  }
  return b.Build();
}

TEST(KernelWaits, ThreadsAsleepOnTheMmapLockNameItsOwnerInMunmap) {
  Session session = MunmapFreeze();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 2u);
  const Wait& wait = analysis.blocked_calls[0].waits.at(0);
  EXPECT_EQ(wait.object.kind, WaitKind::kKernelLock);
  EXPECT_EQ(wait.object.pid, kPid) << "an mmap_lock belongs to its process";
  ASSERT_NE(wait.kernel_lock, nullptr);
  EXPECT_EQ(wait.kernel_lock->owner_tid, kTrainer);
  ASSERT_NE(wait.owner_memory_call, nullptr);
  EXPECT_EQ(wait.owner_memory_call->syscall, MemorySyscall::kMunmap);

  // Both slept on the one lock at once: a freeze, released by its owner.
  ASSERT_EQ(analysis.freezes.size(), 1u);
  EXPECT_EQ(analysis.freezes[0].thread_count, 2u);
  ASSERT_TRUE(analysis.freezes[0].holder.has_value());
  EXPECT_EQ(analysis.freezes[0].holder->tid, kTrainer);

  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find(": 2 threads blocked on one lock\n  on       the mmap_lock of pid 100\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(
          "launcher-0 (11) in cudaLaunchKernel (+0.000 s, 31.0 ms): asleep 30.0 ms "
          "on the mmap_lock of pid 100 [kernel lock], held by trainer (13) in munmap of 512.0 MiB, "
          "on CPU"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("asleep 28.0 ms on the mmap_lock of pid 100 [kernel lock], held by trainer "
                      "(13) in munmap "
                      "of 512.0 MiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(", 2 kernel lock waits, 1 memory map calls\n"), std::string::npos) << text;

  nlohmann::json json = RenderJsonReport(session, analysis);
  EXPECT_EQ(json["freezes"][0]["object"]["kind"], "kernel_lock");
  EXPECT_EQ(json["freezes"][0]["object"]["mmap_lock"], true);
  EXPECT_EQ(json["freezes"][0]["object"]["lock_address"], "0xffff888100a0c1e8");
  const nlohmann::json& lock = json["slow_calls"][0]["waits"][0]["kernel_lock"];
  EXPECT_EQ(lock["owner"], "trainer (13)");
  EXPECT_EQ(lock["kind"], "rwsem");
  EXPECT_EQ(lock["owner_memory_call"]["syscall"], "munmap");
  EXPECT_EQ(lock["owner_memory_call"]["length"], 512ull << 20);
  EXPECT_EQ(json["session"]["counts"]["memory_map_calls"], 1);
}

TEST(KernelWaits, AKernelMutexIsOneObjectForAllProcessesAndNamesAnOwnerOutsideTheTree) {
  SessionBuilder b;
  b.Call(kHolder, "cudaMalloc", 0, 10 * kMs);
  LockWait lock;
  lock.pid = kPid;
  lock.tid = kHolder;
  lock.start_ns = 1 * kMs;
  lock.end_ns = 9 * kMs;
  lock.lock_address = 0xffff888100b00000;
  lock.flags = GPROF_LOCK_MUTEX;
  lock.owner_tid = 57;
  lock.owner_comm = "kworker/0:1";
  b.session().lock_waits.push_back(lock);
  b.Sleep(kHolder, 1 * kMs + 100, 9 * kMs - 100, 9 * kMs, 0);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  ASSERT_TRUE(analysis.blocked_calls[0].main_object.has_value());
  EXPECT_EQ(analysis.blocked_calls[0].main_object->pid, 0u);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("asleep 8.0 ms on kernel mutex 0xffff888100b00000 [kernel lock], held by "
                      "kworker/0:1 (57),"),
            std::string::npos)
      << text;
}

TEST(KernelWaits, ASleepInAnIoctlOnTheDriverIsNamedWithItsUserStack) {
  SessionBuilder b;
  b.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  DeviceWait ioctl;
  ioctl.pid = kPid;
  ioctl.tid = kHolder;
  ioctl.start_ns = 1 * kMs;
  ioctl.end_ns = 19 * kMs + 50000;
  ioctl.call = DeviceCall::kIoctl;
  ioctl.fd = 5;
  ioctl.request = 0xc020462a;
  ioctl.device = "nvidiactl";
  b.session().device_waits.push_back(ioctl);
  b.Sleep(kHolder, 1 * kMs + 100000, 18 * kMs + 900000, 19 * kMs, kGpu, 1, kFutexStack)
      .user_stack_id = 5;
  // The driver's library is not on this machine: its frames are named by module and offset.
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000000000, 0x7f0000100000, 0, "r-xp", "/nonexistent/libcuda.so.1", 0}}}};
  b.session().user_stacks[5] = {{0x7f0000001010, 0x7f0000002020}, false};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  const BlockedCall& blocked = analysis.blocked_calls[0];
  ASSERT_TRUE(blocked.main_object.has_value());
  EXPECT_EQ(blocked.main_object->kind, WaitKind::kDevice);
  ASSERT_NE(blocked.waits.at(0).device_wait, nullptr);
  EXPECT_EQ(blocked.waits[0].user_stack_id, 5);

  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("holder (10) in cudaDeviceSynchronize (+0.000 s, 20.0 ms): asleep 17.8 ms in "
                      "ioctl on nvidiactl [GPU driver], on CPU"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n      slept at libcuda.so.1+0x1010 <- libcuda.so.1+0x2020\n"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["object"]["kind"], "device");
  EXPECT_EQ(wait["device_wait"]["request"], "0xc020462a");
  EXPECT_EQ(wait["user_stack"],
            nlohmann::json::parse(R"(["libcuda.so.1+0x1010", "libcuda.so.1+0x2020"])"));
}

// Issue 18: a user stack that repeats one frame to the walk's depth limit (128 frames, 3 of them
// distinct) is shown with the repeated frame once and its count; report.json keeps every frame
// and marks the repetition.
TEST(KernelWaits, AUserStackThatRepeatsOneFrameIsShownOnceWithItsCount) {
  SessionBuilder b;
  b.Call(kHolder, "cudaDeviceSynchronize", 0, 20 * kMs);
  b.Sleep(kHolder, 1 * kMs, 18 * kMs, 19 * kMs, kGpu, 1, kFutexStack).user_stack_id = 5;
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000000000, 0x7f0000100000, 0, "r-xp", "/nonexistent/libcuda.so.1", 0}}}};
  std::vector<uint64_t> ips = {0x7f0000001010, 0x7f0000002020};
  ips.resize(128, 0x7f0000003030);
  b.session().user_stacks[5] = {ips, true};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("\n      slept at libcuda.so.1+0x1010 <- libcuda.so.1+0x2020 <- "
                      "libcuda.so.1+0x3030 <- ... libcuda.so.1+0x3030 repeated 125 more times <- "
                      "... (truncated)\n"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["user_stack"].size(), 129u) << "every frame, and the truncation";
  EXPECT_EQ(wait["user_stack_repeats"],
            nlohmann::json::parse(R"([{"first": 2, "frames": 1, "times": 126}])"));
  EXPECT_TRUE(wait["waker_user_stack_repeats"].is_null()) << "no stack, no repeats";
}

TEST(KernelWaits, ASleepInASlowPageFaultNamesTheFaultingModule) {
  SessionBuilder b;
  b.Call(kHolder, "cudaMemcpy", 0, 10 * kMs);
  PageFault fault;
  fault.pid = kPid;
  fault.tid = kHolder;
  fault.start_ns = 1 * kMs;
  fault.end_ns = 9 * kMs;
  fault.address = 0x7f0000401234;
  fault.result = 0x4;  // VM_FAULT_MAJOR
  b.session().page_faults.push_back(fault);
  b.Sleep(kHolder, 1 * kMs + 500000, 8 * kMs + 500000, 8 * kMs + 600000, 0);
  b.session().processes[kPid].maps = {
      {0, {{0x7f0000400000, 0x7f0000500000, 0x1000, "r--p", "/nonexistent/libtorch_cuda.so", 0}}}};
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.blocked_calls.size(), 1u);
  std::string text = RenderTextReport(session, analysis);
  EXPECT_NE(text.find("asleep 7.0 ms in a page fault at 0x7f0000401234 (libtorch_cuda.so+0x2234)"),
            std::string::npos)
      << text;
  nlohmann::json wait = RenderJsonReport(session, analysis)["slow_calls"][0]["waits"][0];
  EXPECT_EQ(wait["page_fault"]["major"], true);
  EXPECT_EQ(wait["page_fault"]["location"], "libtorch_cuda.so+0x2234");
}

TEST(KernelWaits, AKernelLockInAPageFaultInAnIoctlIsTheLock) {
  // Innermost first: the lock the fault waited for, not the fault or the system call around it.
  SessionBuilder b;
  b.Thread(kTrainer, "trainer");
  b.Call(kHolder, "cudaMalloc", 0, 10 * kMs);
  DeviceWait ioctl;
  ioctl.pid = kPid;
  ioctl.tid = kHolder;
  ioctl.start_ns = 1 * kMs;
  ioctl.end_ns = 9 * kMs;
  ioctl.call = DeviceCall::kIoctl;
  ioctl.device = "nvidia0";
  b.session().device_waits.push_back(ioctl);
  PageFault fault;
  fault.pid = kPid;
  fault.tid = kHolder;
  fault.start_ns = 2 * kMs;
  fault.end_ns = 8 * kMs;
  b.session().page_faults.push_back(fault);
  AddMmapLockWait(&b, kHolder, 2 * kMs + 1000, 8 * kMs - 1000, kTrainer);
  b.Sleep(kHolder, 2 * kMs + 2000, 8 * kMs - 2000, 8 * kMs - 1500, kTrainer);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  const Wait& wait = analysis.blocked_calls.at(0).waits.at(0);
  EXPECT_EQ(wait.object.kind, WaitKind::kKernelLock);
  EXPECT_NE(wait.page_fault, nullptr);
  EXPECT_NE(wait.device_wait, nullptr);
}

TEST(KernelWaits, AFutexWaitvSleepIsOnTheWordThatWokeIt) {
  SessionBuilder b;
  b.Call(kHolder, "cudaStreamSynchronize", 0, 10 * kMs);
  FutexWaitvCall waitv;
  waitv.pid = kPid;
  waitv.tid = kHolder;
  waitv.start_ns = 1 * kMs;
  waitv.end_ns = 9 * kMs;
  waitv.count = 2;
  waitv.addresses = {kCondvar, kLock};
  waitv.ret = 1;
  b.session().futex_waitv_calls.push_back(waitv);
  b.Sleep(kHolder, 1 * kMs + 100, 9 * kMs - 1000, 9 * kMs - 500, kGpu, 1, kFutexStack);
  Session session = b.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_TRUE(analysis.blocked_calls.at(0).main_object.has_value());
  EXPECT_EQ(analysis.blocked_calls[0].main_object->kind, WaitKind::kFutex);
  EXPECT_EQ(analysis.blocked_calls[0].main_object->address, kLock);
}

// ---------------------------------------------------------------------------------------------
// The diagnosis (diagnosis.h) over the same kind of sessions.

// A futex wait on a contended mutex word (glibc sleeps on the value 2).
void MutexSleep(SessionBuilder* b, uint32_t tid, uint64_t start, uint64_t wake, uint32_t waker) {
  b->FutexSleep(tid, kLock, start, wake, wake + 10000, waker);
  b->session().futex_calls.back().val = 2;
}

// Threads 11, 12 and 13 sleep on kLock; the holder runs 50 ms holding it, then each waiter passes
// it on to the next.
void MutexConvoy(SessionBuilder* b) {
  MutexSleep(b, 11, 1 * kMs, 50 * kMs, kHolder);
  MutexSleep(b, 12, 2 * kMs, 55 * kMs, 11);
  MutexSleep(b, 13, 3 * kMs, 60 * kMs, 12);
}

TEST(Diagnosis, AConvoyOnOneMutexIsOneCauseHeldByTheThreadThatKeptItOnCpu) {
  SessionBuilder builder;
  for (uint32_t tid : {11u, 12u, 13u}) builder.Thread(tid, "waiter-" + std::to_string(tid));
  MutexConvoy(&builder);
  Session session = builder.Build();
  Diagnosis diagnosis = Diagnose(session, {});

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

// report.json is written a slow call and a stall at a time; the text is the whole tree's dump.
TEST(Report, TheWrittenJsonIsTheReportTreeDumped) {
  SessionBuilder builder;
  // Names that need escaping, each in one way the writer's fast path leaves to nlohmann's: a quote,
  // a backslash, control characters; and the holder's: UTF-8, invalid UTF-8 (replaced), DEL.
  const std::array<std::string, 3> names = {"wait\"er-11", "waiter\\-12", "waiter-13\t\x01"};
  builder.Thread(kHolder, "hölder\xff\xc3\x7f");
  for (uint32_t tid : {11u, 12u, 13u}) {
    builder.Thread(tid, names[tid - 11]);
    builder.Call(tid, "cudaFree", tid * kMs - kMs / 2, (tid + 50) * kMs);
  }
  MutexConvoy(&builder);
  Session session = builder.Build();
  Diagnosis diagnosis = Diagnose(session, {});
  ASSERT_EQ(diagnosis.stalls.size(), 3u);
  for (uint64_t threshold_ns : {uint64_t{1'000'000}, UINT64_MAX}) {
    Analysis analysis = Analyze(session, {threshold_ns});
    EXPECT_EQ(analysis.blocked_calls.size(), threshold_ns == UINT64_MAX ? 0u : 3u);
    for (const Diagnosis* with : std::array<const Diagnosis*, 2>{&diagnosis, nullptr}) {
      std::string written;
      WriteJsonReport(session, analysis, with, nlohmann::detail::output_adapter<char>(written));
      EXPECT_EQ(written, RenderJsonReport(session, analysis, with)
                             .dump(1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
}

TEST(Diagnosis, AHandoffOnAConditionIsAWaitButNoCause) {
  SessionBuilder builder;
  builder.Thread(11, "cv-waiter");
  builder.FutexSleep(11, kCondvar, 1 * kMs, 31 * kMs, 31 * kMs + 10000, kHolder);
  Session session = builder.Build();
  Diagnosis diagnosis = Diagnose(session, {});
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
  Diagnosis diagnosis = Diagnose(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.stalls.size(), 3u);
  EXPECT_EQ(diagnosis.stalls[0].wait_class, WaitClass::kIo);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_NE(text.find("OTHER LONG WAITS: 1 handoffs"), std::string::npos) << text;
  EXPECT_NE(text.find("reader (11) at +0.000 s asleep 20.0 ms on anon_pipe_read [I/O]\n"
                      "     ended by holder (10)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("2 [sleep] waits no thread of the program ended, 8.0 ms in all; the "
                      "longest: napper (12) at +0.001 s asleep 5.0 ms on do_nanosleep [sleep]"),
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
  Diagnosis diagnosis = Diagnose(builder.Build(), {});
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
  constexpr int32_t kFlockStack = 7;
  SessionBuilder builder;
  Session& session = builder.session();
  session.kernel_stacks[kFlockStack] = {1, 2, 6};
  session.kernel_symbols[6] = "locks_lock_inode_wait+0x6";
  for (uint32_t i = 0; i < 2; ++i) {
    const uint32_t pid = kPid + 1 + i;
    session.threads[pid] = {pid, pid, "locker", 0};
    OffCpuInterval& sleep = builder.Sleep(pid, (1 + i) * kMs, 40 * kMs + i * kMs / 10,
                                          40 * kMs + i * kMs / 10 + 5000, kHolder, 1, kFlockStack);
    sleep.pid = pid;
  }
  Diagnosis diagnosis = Diagnose(builder.Build(), {});
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].wait_class, WaitClass::kKernelLock);
  EXPECT_EQ(diagnosis.causes[0].identity, "a file lock (flock, fcntl) in locks_lock_inode_wait");
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
  Diagnosis diagnosis = Diagnose(session, {});
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
  Diagnosis diagnosis = Diagnose(session, {});

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

TEST(Diagnosis, ThreadsShortOfCpuAreOneCauseAndAQuietRunHasNone) {
  {
    SessionBuilder builder;
    for (uint32_t tid : {11u, 12u, 13u}) {
      builder.Thread(tid, "spin");
      for (uint64_t at = 0; at < 100 * kMs; at += 10 * kMs)
        builder.Preempted(tid, at + tid * kMs, at + tid * kMs + 4 * kMs);
    }
    Session session = builder.Build();
    Diagnosis diagnosis = Diagnose(session, {});
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
    Diagnosis diagnosis = Diagnose(session, {});
    EXPECT_TRUE(diagnosis.causes.empty());
    EXPECT_TRUE(diagnosis.freezes.empty());
    EXPECT_TRUE(diagnosis.gaps.empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Time in chains (issue 18): a link is bounded by the release (the wake, the holder's unlock), a
// thread accounts only for the time it existed, and a cycle is one only when its waits were all
// asleep at once.

constexpr uint64_t kUs = 1'000;

// A futex wait on the lock word `lock` (glibc's "locked, with waiters": 2) whose holder field named
// `owner` when the call began; woken at `wake` by `waker` (0, 0: it timed out).
void LockSleep(SessionBuilder* b, uint32_t tid, uint64_t lock, uint64_t start, uint64_t wake,
               uint64_t end, uint32_t waker, uint32_t owner) {
  b->FutexSleep(tid, lock, start, wake, end, waker);
  b->session().futex_calls.back().val = 2;
  b->session().futex_calls.back().owner_tid = owner;
}

// `tid` unlocks `lock` at `at`: a FUTEX_WAKE of the word.
void Unlock(SessionBuilder* b, uint32_t tid, uint64_t lock, uint64_t at) {
  FutexCall wake;
  wake.pid = kPid;
  wake.tid = tid;
  wake.start_ns = at;
  wake.end_ns = at + 2 * kUs;
  wake.uaddr = lock;
  wake.op = 0x81;  // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
  wake.val = 1;
  wake.ret = 1;
  b->session().futex_calls.push_back(wake);
}

std::string DeadlocksIn(const Session& session, const Diagnosis& diagnosis) {
  std::string found;
  for (const Stall& stall : diagnosis.stalls) {
    if (stall.deadlock_tid != 0) found += DescribeDeadlock(session, stall) + "\n";
  }
  return found;
}

// The issue's chain of three mutexes: link-0 holds m0; link-1 holds m1 and waits for m0; link-2
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
    Diagnosis diagnosis = Diagnose(session, {});

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
  Diagnosis diagnosis = Diagnose(session, {});

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
    Diagnosis diagnosis = Diagnose(session, {});

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
    EXPECT_NE(text.find("held by holder (10) on CPU " + FormatDuration(release - 1 * kMs) +
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
    Diagnosis diagnosis = Diagnose(session, {});
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
  Diagnosis diagnosis = Diagnose(session, {});
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
    Diagnosis diagnosis = Diagnose(session, {});
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
    EXPECT_NE(text.find("ended by fresh (23), created at " + FormatOffset(session, created) +
                        ", on CPU 2.0 ms\n       created by spawner (22) on CPU " +
                        FormatDuration(created - 1 * kMs) + "  <- root"),
              std::string::npos)
        << text;
  }
}

// A handoff whose producer was preempted while the consumer waited for it: the CPU it lacked is a
// cause and each link says how long it waited for one, though the producer was short of CPU for
// little of its long life.
TEST(Diagnosis, AProducerPreemptedWhileItsConsumerWaitsLackedACpu) {
  constexpr uint32_t kConsumer = 21, kProducer = 22;
  constexpr int32_t kSleepStack = 8;
  SessionBuilder builder;
  builder.session().kernel_stacks[kSleepStack] = {1, 2, 9};
  builder.session().kernel_symbols[9] = "do_nanosleep+0x9";
  builder.Thread(kConsumer, "consumer");
  builder.Thread(kProducer, "producer");
  // Its life is long, 10 s: the time it was preempted is a small share of it.
  builder.Sleep(kProducer, 0, 0, 10 * kUs, 0, 1, kSleepStack);
  builder.Sleep(kProducer, 9 * 1000 * kMs, 0, 10 * 1000 * kMs, 0, 1, kSleepStack);
  uint64_t preempted_ns = 0;
  const std::array<uint64_t, 6> delays = {16 * kMs, 23 * kMs, 19 * kMs,
                                          21 * kMs, 17 * kMs, 22 * kMs};
  uint64_t at = 100 * kMs;
  for (uint64_t delay : delays) {
    const uint64_t work = 25 * kMs + delay / 2;
    builder.Preempted(kProducer, at + 2 * kMs, at + 2 * kMs + delay);
    preempted_ns += delay;
    const uint64_t wake = at + work + delay;
    builder.FutexSleep(kConsumer, kCondvar, at, wake, wake + 10 * kUs, kProducer);
    at = wake + 5 * kMs;
  }
  Session session = builder.Build();
  Diagnosis diagnosis = Diagnose(session, {});
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
  EXPECT_NE(text.find("1 thread runnable " + FormatDuration(preempted_ns) + ": producer (22) " +
                      FormatDuration(preempted_ns) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("waits held up for want of a CPU: consumer (21) " +
                      FormatDuration(consumer.delayed_ns()) + ": woken, it waited for a CPU " +
                      FormatDuration(consumer.after_wakeup_ns) +
                      " (6 wakeups, longest 10.0 us), the threads it waited for were runnable " +
                      FormatDuration(preempted_ns) + " (producer (22))\n"),
            std::string::npos)
      << text;
  for (size_t i = 0; i < delays.size(); ++i) {
    const Stall& handoff = diagnosis.stalls[i];
    ASSERT_EQ(handoff.tid, kConsumer);
    ASSERT_EQ(handoff.chain.size(), 1u);
    EXPECT_EQ(handoff.chain[0].runnable_ns, delays[i]);
    EXPECT_NE(DescribeLink(session, handoff.chain[0])
                  .find(", waiting for a CPU " + FormatDuration(delays[i])),
              std::string::npos)
        << DescribeLink(session, handoff.chain[0]);
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
  Diagnosis diagnosis = Diagnose(session, {});
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
    listed += (i == 0 ? "" : ", ") + session.ThreadLabel(cpu.tids[i]) + " " +
              FormatDuration(runnable[cpu.tids[i]]);
  }
  EXPECT_NE(text.find(listed + " and 4 more\n"), std::string::npos) << text;
  EXPECT_NE(
      text.find("waits held up for want of a CPU: probe (40) " + FormatDuration(probe_late) +
                ": woken, it waited for a CPU " + FormatDuration(probe_late) + " (" +
                std::to_string(wakeups) + " wakeups, longest " + FormatDuration(longest) + ")\n"),
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
  Diagnosis diagnosis = Diagnose(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.cpu_waits.size(), 1u);
  EXPECT_EQ(diagnosis.cpu_waits[0].runnable_ns, preempted_ns);
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("no thread lacked a CPU"), std::string::npos) << text;
  EXPECT_NE(text.find("no contention: no thread waited 1.0 ms or more on a lock, the GIL, the "
                      "kernel or the GPU driver, or on a thread that lacked a CPU (waiting for "
                      "a CPU in all: worker (11) " +
                      FormatDuration(preempted_ns) + ", " +
                      std::to_string(preempted_ns * 100 / diagnosis.cpu_waits[0].life_ns) +
                      "% of its time)"),
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
  Diagnosis diagnosis = Diagnose(session, {});
  EXPECT_TRUE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.cpu_waits.size(), 2u);
  EXPECT_FALSE(diagnosis.cpu_waits[0].short_of_cpu);
  EXPECT_EQ(diagnosis.cpu_waits[0].awaited_ns, 2 * kMs);
}

// GPU idle is the device's: time in which none of its streams (nor processes) ran anything.

// Idle time of a device, computed apart from the collector: every microsecond between the first
// work's start and the last's end that no work covers. Times here are whole microseconds.
struct IdleByMicrosecond {
  uint64_t idle_ns = 0;
  std::vector<std::pair<uint64_t, uint64_t>> runs;  // idle runs of at least 1 ms, [start, end)
};
IdleByMicrosecond IdleOf(const std::vector<std::pair<uint64_t, uint64_t>>& work) {
  constexpr uint64_t kUs = 1000;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& [start, end] : work) first = std::min(first, start), last = std::max(last, end);
  std::vector<bool> busy((last - first) / kUs, false);
  for (const auto& [start, end] : work) {
    for (uint64_t t = start; t < end; t += kUs) busy[(t - first) / kUs] = true;
  }
  IdleByMicrosecond idle;
  for (size_t i = 0; i < busy.size();) {
    if (busy[i]) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < busy.size() && !busy[j]) ++j;
    idle.idle_ns += (j - i) * kUs;
    if ((j - i) * kUs >= kMs) idle.runs.emplace_back(first + i * kUs, first + j * kUs);
    i = j;
  }
  return idle;
}

// Four decoding threads, each launching on its own stream with CPU work in between, on one GPU
// whose work the streams interleave: a stream is idle most of the time the GPU runs the others.
// `device_work` gets each device's work intervals.
void DecodingStreams(SessionBuilder* b, uint32_t device, uint32_t first_tid,
                     std::vector<std::pair<uint64_t, uint64_t>>* device_work) {
  uint64_t random = 12345 + device;
  auto next = [&](uint64_t bound) {
    random = random * 6364136223846793005ull + 1442695040888963407ull;
    return (random >> 33) % bound;
  };
  static uint64_t correlation = 1000;
  uint64_t gpu_free = 0;  // one engine: work queued on any stream runs after the work before it
  std::vector<uint64_t> ready(4, 0);
  for (int round = 0; round < 40; ++round) {
    for (uint32_t s = 0; s < 4; ++s) {
      const uint32_t tid = first_tid + s;
      b->Thread(tid, "decode-" + std::to_string(s));
      const uint64_t launch = ready[s] + (1000 + next(7000)) * 1000;  // CPU work, then a launch
      b->Call(tid, "cudaLaunchKernel", launch, launch + 10000, ++correlation);
      // Overlapping work on two streams happens: a kernel may start while another runs.
      const uint64_t start = std::max(launch + 20000, next(2) == 0 ? gpu_free : 0);
      const uint64_t end = start + (100 + next(900)) * 1000;
      b->Kernel(13 + s + 10 * device, start, end, correlation, "decode", device);
      device_work->emplace_back(start, end);
      gpu_free = std::max(gpu_free, end);
      ready[s] = launch + 10000;
    }
  }
}

TEST(GpuIdle, IsTheTimeTheDeviceRanNothingCountedOnceAndExplainedAtMostOnce) {
  SessionBuilder builder;
  builder.Cupti();
  std::vector<std::pair<uint64_t, uint64_t>> work;
  DecodingStreams(&builder, 0, 30, &work);
  Session session = builder.Build();
  const IdleByMicrosecond expected = IdleOf(work);
  ASSERT_GT(expected.runs.size(), 5u) << "the pattern has gaps of the whole GPU";

  Diagnosis diagnosis = Diagnose(session, {});
  uint64_t gap_ns = 0;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  for (const GpuGap& gap : diagnosis.gaps) {
    gap_ns += gap.duration();
    gaps.emplace_back(gap.start_ns, gap.end_ns);
  }
  EXPECT_EQ(gaps, expected.runs) << "a gap is an interval in which no stream ran anything";
  uint64_t explained_ns = 0;
  for (const Cause& cause : diagnosis.causes) explained_ns += cause.gpu_idle_ns;
  EXPECT_EQ(explained_ns, gap_ns) << "every gap explained once";
  EXPECT_LE(explained_ns, expected.idle_ns) << "never more GPU idle explained than there was";
  for (const GpuGap& gap : diagnosis.gaps) {
    // The stream that ended the gap is the one whose launch the GPU waited for.
    ASSERT_NE(gap.after_call, nullptr);
    EXPECT_EQ(gap.after->start_ns, gap.end_ns);
    EXPECT_EQ(gap.stream_id, gap.after->stream_id);
    EXPECT_EQ(gap.after_call->tid, 30 + (gap.stream_id - 13));
  }
}

TEST(GpuIdle, EachDeviceHasItsOwnAndTheHeaderSaysIt) {
  SessionBuilder builder;
  builder.Cupti();
  std::vector<std::pair<uint64_t, uint64_t>> work0, work1;
  DecodingStreams(&builder, 0, 30, &work0);
  DecodingStreams(&builder, 1, 40, &work1);
  Session session = builder.Build();
  Analysis analysis = Analyze(session, {});
  ASSERT_EQ(analysis.gpu.devices.size(), 2u);
  const IdleByMicrosecond expected[2] = {IdleOf(work0), IdleOf(work1)};
  for (uint32_t d = 0; d < 2; ++d) {
    const GpuDevice& device = analysis.gpu.devices[d];
    EXPECT_EQ(device.ordinal, d);
    EXPECT_EQ(device.idle_ns(), expected[d].idle_ns) << "GPU " << d;
  }
  Diagnosis diagnosis = Diagnose(session, {});
  ASSERT_EQ(diagnosis.devices.size(), 2u);
  std::vector<uint64_t> explained(2, 0), gap_ns(2, 0);
  for (const GpuGap& gap : diagnosis.gaps) {
    gap_ns[gap.device] += gap.duration();
    EXPECT_EQ(diagnosis.devices[gap.device].ordinal, gap.device_id);
    if (gap.cause >= 0) explained[gap.device] += gap.duration();
  }
  uint64_t causes_ns = 0;
  for (const Cause& cause : diagnosis.causes) causes_ns += cause.gpu_idle_ns;
  EXPECT_EQ(causes_ns, explained[0] + explained[1]);
  for (uint32_t d = 0; d < 2; ++d) {
    uint64_t runs_ns = 0;
    for (const auto& [start, end] : expected[d].runs) runs_ns += end - start;
    EXPECT_EQ(gap_ns[d], runs_ns) << "GPU " << d;
    EXPECT_LE(explained[d], expected[d].idle_ns) << "GPU " << d;
  }
  std::string text = RenderTextReport(session, analysis, {}, &diagnosis);
  for (uint32_t d = 0; d < 2; ++d) {
    const GpuDevice& device = analysis.gpu.devices[d];
    std::string line =
        "  gpu idle  GPU " + std::to_string(d) + " ran nothing " +
        FormatDuration(expected[d].idle_ns) + " (" +
        std::to_string(expected[d].idle_ns * 100 / (device.last_ns - device.first_ns)) +
        "%) of the " + FormatDuration(device.last_ns - device.first_ns) +
        " from its first work to its last\n";
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  nlohmann::json json = RenderJsonReport(session, analysis, &diagnosis);
  EXPECT_EQ(json["gpu"]["devices"][1]["idle_ns"], expected[1].idle_ns)
      << json["gpu"]["devices"].dump();
  EXPECT_EQ(json["diagnosis"]["devices"][0]["gap_idle_ns"], gap_ns[0]);
}

// A stream idle while another ran is no GPU idle time: its thread is no cause, however late.
TEST(GpuIdle, AStreamIdleWhileAnotherRanIsNoCause) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "busy");
  builder.Thread(12, "slow");
  builder.Call(12, "cudaLaunchKernel", 0, 100000, 1);
  builder.Kernel(14, 200000, 1 * kMs, 1);
  // Stream 13 keeps the GPU busy from 1 ms to 40 ms while thread 12 takes 30 ms to launch more.
  for (uint64_t i = 0; i < 13; ++i) {
    builder.Call(11, "cudaLaunchKernel", i * 3 * kMs, i * 3 * kMs + 100000, 10 + i);
    builder.Kernel(13, 1 * kMs + i * 3 * kMs, 4 * kMs + i * 3 * kMs, 10 + i);
  }
  builder.Call(12, "cudaLaunchKernel", 30 * kMs, 30 * kMs + 100000, 2);
  builder.Kernel(14, 31 * kMs, 32 * kMs, 2);
  // Then the GPU runs nothing for 10 ms before thread 12's next launch.
  builder.Call(12, "cudaLaunchKernel", 49 * kMs, 49 * kMs + 100000, 3);
  builder.Kernel(14, 50 * kMs, 51 * kMs, 3);
  Session session = builder.Build();
  Diagnosis diagnosis = Diagnose(session, {});
  ASSERT_EQ(diagnosis.gaps.size(), 1u);
  EXPECT_EQ(diagnosis.gaps[0].start_ns, 40 * kMs);
  EXPECT_EQ(diagnosis.gaps[0].end_ns, 50 * kMs);
  ASSERT_EQ(diagnosis.causes.size(), 1u);
  EXPECT_EQ(diagnosis.causes[0].gpu_idle_ns, 10 * kMs);
  EXPECT_NE(diagnosis.causes[0].identity.find("slow (12)"), std::string::npos)
      << diagnosis.causes[0].identity;
}

// Processes share a GPU CUPTI named (its UUID): one device, its idle time their union's
// complement; a GPU it did not name is each process's own.
TEST(GpuIdle, ProcessesShareAGpuOnlyWhenCuptiNamedIt) {
  for (bool named : {true, false}) {
    SCOPED_TRACE(named);
    SessionBuilder builder;
    builder.Cupti();
    Session& raw = builder.session();
    for (uint32_t pid : {kPid, kPid + 1}) {
      raw.processes[pid].pid = pid;
      raw.processes[pid].capture = {CaptureMode::kCupti, 130001, ""};
      if (named) raw.processes[pid].device_uuids[0] = "GPU-0b1c2d3e-0000-1111-2222-333344445555";
    }
    builder.Kernel(7, 0, 10 * kMs, 0, "a", 0, kPid);
    builder.Kernel(7, 20 * kMs, 30 * kMs, 0, "a", 0, kPid);
    builder.Kernel(7, 5 * kMs, 25 * kMs, 0, "b", 0, kPid + 1);
    Session session = builder.Build();
    GpuSummary gpu = Analyze(session, {}).gpu;
    Diagnosis diagnosis = Diagnose(session, {});
    if (named) {
      ASSERT_EQ(gpu.devices.size(), 1u);
      EXPECT_EQ(gpu.devices[0].idle_ns(), 0u) << "the other process ran in pid 100's gap";
      EXPECT_EQ(gpu.devices[0].pids, (std::vector<uint32_t>{kPid, kPid + 1}));
      EXPECT_TRUE(diagnosis.gaps.empty());
      EXPECT_EQ(GpuDeviceName(gpu.devices[0], gpu.devices),
                "GPU 0 (GPU-0b1c2d3e-0000-1111-2222-333344445555, pids 100, 101)");
    } else {
      ASSERT_EQ(gpu.devices.size(), 2u);
      EXPECT_EQ(gpu.devices[0].idle_ns(), 10 * kMs);
      EXPECT_EQ(gpu.devices[1].idle_ns(), 0u);
      ASSERT_EQ(diagnosis.gaps.size(), 1u);
      EXPECT_EQ(GpuDeviceName(gpu.devices[0], gpu.devices), "GPU 0 of pid 100");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A GPU gap's late thread is described by what it did in the gap, not by the call that ended it.

// The GPU runs a kernel to 10 ms, then nothing until the late thread's next work, queued at
// `queued_ns` by `api` (entered at `enter_ns`) and started 1 ms later.
Session LateLaunch(SessionBuilder& builder, const std::string& api, uint64_t enter_ns,
                   uint64_t queued_ns) {
  builder.Cupti();
  builder.Thread(11, "python3");
  builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
  builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
  builder.Call(11, api, enter_ns, queued_ns, 2);
  builder.Memcpy(7, queued_ns + 1 * kMs, queued_ns + 2 * kMs, 2, 4096);
  return builder.Build();
}

const GpuGap& OnlyGap(const Diagnosis& diagnosis) {
  EXPECT_EQ(diagnosis.gaps.size(), 1u);
  return diagnosis.gaps.front();
}

TEST(LateThread, OnCpuBetweenTwoLaunchesIsOutsideCudaCalls) {
  SessionBuilder builder;
  // Computing on the CPU from 1 ms to 60 ms, then 20 us in the copy that queues the next work.
  Session session = LateLaunch(builder, "cudaMemcpyAsync", 60 * kMs, 60 * kMs + 20000);
  Diagnosis diagnosis = Diagnose(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->call_ns, 20000u);
  EXPECT_EQ(gap.late_thread->other_calls_ns, 0u);
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "python3 (11) on CPU 50.0 ms (50.0 ms outside CUDA calls, then 20.0 us in "
            "cudaMemcpyAsync)");
  std::string text = RenderDiagnosisText(session, diagnosis, 5);
  EXPECT_EQ(text.find("on CPU 50.0 ms in cudaMemcpyAsync"), std::string::npos) << text;
  nlohmann::json json =
      RenderJsonReport(session, Analyze(session, {}), &diagnosis)["diagnosis"]["gaps"][0];
  EXPECT_EQ(json["late_thread"]["call_ns"], 20000);
}

TEST(LateThread, BlockedInsideTheCallIsInIt) {
  SessionBuilder builder;
  // The call that queues the next work began before the GPU went idle and held the thread 50 ms.
  Session session = LateLaunch(builder, "cudaLaunchKernel", 5 * kMs, 60 * kMs);
  Diagnosis diagnosis = Diagnose(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->call_ns, 50 * kMs);
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "python3 (11) on CPU 50.0 ms in "
            "cudaLaunchKernel");
}

TEST(LateThread, TimeInOtherCallsIsCountedApartFromTheCallThatEndedTheGap) {
  SessionBuilder builder;
  builder.Call(11, "cudaEventQuery", 20 * kMs, 21 * kMs, 10);
  builder.Call(11, "cudaEventQuery", 30 * kMs, 33 * kMs, 11);
  // 10 ms outside calls after the GPU went idle, then 20 ms in the call itself.
  Session session = LateLaunch(builder, "cudaMemcpyAsync", 40 * kMs, 60 * kMs);
  Diagnosis diagnosis = Diagnose(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  ASSERT_TRUE(gap.late_thread.has_value());
  EXPECT_EQ(gap.late_thread->other_calls, 2u);
  EXPECT_EQ(gap.late_thread->other_calls_ns, 4 * kMs);
  EXPECT_EQ(DescribeLink(session, *gap.late_thread),
            "python3 (11) on CPU 50.0 ms (26.0 ms outside CUDA calls, 4.0 ms in 2 other CUDA "
            "calls (longest cudaEventQuery), then 20.0 ms in cudaMemcpyAsync)");
}

// Launches made while a stream is captured into a CUDA graph run no kernel: they are counted as
// captured, and the graph launches' kernels as theirs.
TEST(GpuSummary, CapturedLaunchesAreCapturedAndGraphKernelsTheirGraphLaunchs) {
  SessionBuilder builder;
  builder.Cupti();
  builder.Thread(11, "capturer");
  builder.Call(kHolder, "cudaLaunchKernel", 0, 1000, 1);
  builder.Kernel(13, 2000, 5000, 1, "A()");
  builder.Call(11, "cudaStreamBeginCapture", 10000, 11000, 2);
  // Another thread's launch meanwhile runs its kernel; one of its launches has none recorded.
  builder.Call(kHolder, "cudaLaunchKernel", 11500, 11600, 3);
  builder.Kernel(13, 11700, 11800, 3, "A()");
  builder.Call(kHolder, "cudaLaunchKernel", 11900, 11950, 4);
  for (uint64_t i = 0; i < 3; ++i)
    builder.Call(11, "cudaLaunchKernel", 12000 + i * 1000, 12500 + i * 1000, 5 + i);
  builder.Call(11, "cudaStreamEndCapture", 20000, 21000, 8);
  builder.Call(11, "cudaGraphInstantiate", 22000, 23000, 9);
  // A failed begin opens no capture: the launch after it has no kernel, and was not captured.
  builder.Call(11, "cudaStreamBeginCapture", 24000, 24100, 10);
  builder.session().api_calls.back().return_code = 900;  // cudaErrorStreamCaptureUnsupported
  builder.Call(11, "cudaLaunchKernel", 24200, 24300, 11);
  for (uint64_t run = 0; run < 2; ++run) {
    const uint64_t at = 30000 + run * 20000;
    builder.Call(11, "cudaGraphLaunch", at, at + 1000, 20 + run);
    for (uint64_t node = 0; node < 3; ++node) {
      builder.Kernel(14, at + 2000 + node * 1000, at + 2500 + node * 1000, 20 + run, "B()");
      GpuActivity& kernel = builder.session().gpu_activities.back();
      kernel.graph_id = 1;
      kernel.graph_node_id = node + 1;
    }
  }
  Session session = builder.Build();
  GpuCorrelation correlation(session);
  GpuSummary gpu = SummarizeGpu(session, correlation);
  EXPECT_EQ(gpu.launch_calls, 7u);
  EXPECT_EQ(gpu.launch_calls_with_kernel, 2u);
  EXPECT_EQ(gpu.launch_calls_captured, 3u);
  EXPECT_EQ(gpu.graph_launches, 2u);
  EXPECT_EQ(gpu.graph_kernels, 6u);
  for (const GpuActivity& activity : session.gpu_activities) {
    if (activity.graph_id == 0) continue;
    const ApiCall* launcher = correlation.LauncherOf(activity);
    ASSERT_NE(launcher, nullptr);
    EXPECT_EQ(session.ApiName(*launcher), "cudaGraphLaunch");
  }
  std::string text = RenderTextReport(session, Analyze(session, {}));
  EXPECT_NE(text.find("gpu       8 kernels, 0 copies, 0 memsets; 2 of 7 kernel launches have no "
                      "kernel recorded; 3 kernel launches captured into CUDA graphs; 2 graph "
                      "launches ran 6 kernels\n"),
            std::string::npos)
      << text;
  nlohmann::json json = RenderJsonReport(session, Analyze(session, {}))["gpu"];
  EXPECT_EQ(json["launch_calls_captured"], 3);
  EXPECT_EQ(json["graph_kernels"], 6);
}

// A first launch that loads its kernel's module (CUDA's lazy loading) keeps the GPU idle on the
// CPU inside the launch: named as loading a module, not as a thread late to launch.
TEST(ModuleLoading, AFirstLaunchThatLoadsAModuleIsNamedSo) {
  for (bool thread_named : {true, false}) {
    SCOPED_TRACE(thread_named);
    SessionBuilder builder;
    builder.Cupti();
    builder.Thread(11, "python3");
    builder.Call(11, "cudaLaunchKernel", 0, 1 * kMs, 1);
    builder.Kernel(7, 1 * kMs, 10 * kMs, 1);
    builder.Call(11, "cuLaunchKernel", 9 * kMs, 60 * kMs, 2);
    builder.Kernel(7, 61 * kMs, 62 * kMs, 2);
    // 45 ms of the launch: the driver loading the module (CUPTI may name no thread: the call's).
    builder.session().module_loads.push_back(
        {10 * kMs, 55 * kMs, 2, kPid, thread_named ? 11u : 0u, 5u << 16});
    Session session = builder.Build();
    Diagnosis diagnosis = Diagnose(session, {});
    const GpuGap& gap = OnlyGap(diagnosis);
    EXPECT_EQ(gap.module_load_ns, 45 * kMs);
    ASSERT_GE(gap.cause, 0);
    const Cause& cause = diagnosis.causes[gap.cause];
    EXPECT_EQ(
        cause.identity,
        "python3 (11) loading a CUDA module in cuLaunchKernel (lazy loading: the first launch "
        "of a kernel loads its module)");
    EXPECT_EQ(cause.gpu_idle_ns, gap.duration());
    std::string text = RenderDiagnosisText(session, diagnosis, 5);
    EXPECT_NE(text.find("the GPU waited for python3 (11) on CPU 50.0 ms in cuLaunchKernel; the "
                        "driver spent 45.0 ms of the wait loading a CUDA module\n"),
              std::string::npos)
        << text;
    EXPECT_EQ(text.find("late to launch"), std::string::npos) << text;
  }
}

TEST(ModuleLoading, AShortLoadInALongGapLeavesTheThreadLate) {
  SessionBuilder builder;
  builder.Thread(11, "python3");
  builder.session().module_loads.push_back({55 * kMs, 59 * kMs, 2, kPid, 11, 5u << 16});
  Session session = LateLaunch(builder, "cuLaunchKernel", 54 * kMs, 60 * kMs);
  Diagnosis diagnosis = Diagnose(session, {});
  const GpuGap& gap = OnlyGap(diagnosis);
  EXPECT_EQ(gap.module_load_ns, 4 * kMs);
  ASSERT_GE(gap.cause, 0);
  EXPECT_NE(diagnosis.causes[gap.cause].identity.find("late to launch"), std::string::npos)
      << diagnosis.causes[gap.cause].identity;
}

}  // namespace
}  // namespace gprof::collector
